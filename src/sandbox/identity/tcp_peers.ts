/**
 * Which uid owns the client end of an accepted TCP connection on this host: an exact 4-tuple
 * lookup through NETLINK_SOCK_DIAG (inet_diag, SOCK_DIAG_BY_FAMILY without NLM_F_DUMP), which
 * the kernel answers with one hash lookup instead of the table walk behind /proc/net/tcp. It
 * lets the HTTP layer refuse requests that come from a sandbox uid (a sandboxed command under a
 * network profile shares the host network namespace and can reach the server on 127.0.0.1).
 *
 * The client's socket is the one whose local end is the client's address and port and whose
 * remote end is the server's. A query is one write and one read on a netlink socket opened once
 * (close-on-exec, non-blocking: the kernel answers inside the write, so the read never waits and
 * the event loop is never held). It must never decide policy, never walk the socket tables, and
 * never issue a call through a `nonblocking` FFI symbol. The egress gateway uses it too, with a
 * netlink socket made inside each egress namespace (it answers for the namespace it was made
 * in), to tell which session's uid opened a connection to the proxy.
 *
 * What a hostile local process can do, and what the answer means:
 * - Close or reset its end before the lookup. Its socket is then gone, or it lingers as an
 *   orphan or a TIME_WAIT entry, which inet_diag reports with uid 0 (not the owner's) and
 *   inode 0. `uid` only answers for a socket that a process still holds (inode not 0), so this
 *   yields `undefined`, never 0. A client on a local address (loopback, or any address of this
 *   host) that yields `undefined` must be refused: a real client keeps its socket until the
 *   response.
 * - Steer the lookup onto another socket. The kernel falls back to a listening socket on the
 *   client's address and port when no connection matches; `uid` only accepts a reply whose
 *   4-tuple is exactly the one asked for, so a listener (even root's) never answers for a client.
 * - Hand its socket to another process (SCM_RIGHTS): the owner stays the uid that created the
 *   socket, so a sandbox socket passed to a root process still reads as the sandbox uid. The
 *   reverse needs a root-created socket in the sandbox; the sandbox spawn closes inherited fds.
 * - fchown its socket: that does change the owner inet_diag reports (probed), but giving it to
 *   another uid needs CAP_CHOWN over a user namespace where that uid is mapped; a user
 *   namespace of its own maps only its own uid.
 * - Reuse the 4-tuple: while the server holds its end, no other connection can have the same
 *   4-tuple. Only a client reset frees it, and then a socket of another uid gets it only if
 *   that uid's process connects to the server from the same port. Look up as soon as the
 *   request arrives, before acting on it; the answer holds for that moment.
 * - Forge netlink replies: sending to this socket's port id needs CAP_NET_ADMIN over the host
 *   network namespace, which no sandboxed command has.
 * - Relay through a local service of another uid (a proxy, another server): the connection is
 *   then that service's. This lookup cannot see through relays.
 *
 * Not covered: peers on other hosts or in other network namespaces (no socket here:
 * `undefined`), commands that run as a non-sandbox uid, and a wildcard server address
 * (0.0.0.0, ::): the connection's local address is then unknown, so the lookup cannot be exact
 * and `uid` throws rather than guess.
 *
 * @module
 */

import { E, errno, libc, OsError } from "../../ffi/libc.ts";
import { checkedSyscall, closeFd, SYS } from "../syscalls.ts";

/** One end of a TCP connection, as `Deno.NetAddr` gives it (IPv6 with or without brackets). */
export interface Endpoint {
  hostname: string;
  port: number;
}

const AF_INET = 2;
const AF_INET6 = 10;
const AF_NETLINK = 16;
const SOCK_RAW = 3;
const SOCK_NONBLOCK = 0o4000;
const SOCK_CLOEXEC = 0o2000000;
const NETLINK_SOCK_DIAG = 4;
const IPPROTO_TCP = 6;
const NLMSG_ERROR = 2;
const SOCK_DIAG_BY_FAMILY = 20;
const NLM_F_REQUEST = 1;
const ALL_STATES = 0xffffffff;
const INET_DIAG_NOCOOKIE = 0xffffffff;

/** struct nlmsghdr (16 bytes) + struct inet_diag_req_v2 (8 bytes + inet_diag_sockid, 48). */
const HEADER = 16;
const REQUEST_SIZE = HEADER + 8 + 48;
/** Offsets inside the request: the sockid starts after the nlmsghdr and 8 bytes of req_v2. */
const REQ_ID = HEADER + 8;
/** Offsets inside struct inet_diag_msg (after the nlmsghdr). */
const MSG_ID = 4;
const MSG_UID = 64;
const MSG_INODE = 68;
const MSG_SIZE = 72;
/** inet_diag_sockid: sport (be16), dport (be16), src[16], dst[16], if, cookie[2]. */
const ID_SPORT = 0;
const ID_DPORT = 2;
const ID_SRC = 4;
const ID_DST = 20;
const ID_COOKIE = 40;

/** Owner lookups for TCP connections in this network namespace; holds one netlink socket. */
export class TcpPeers {
  #fd: number;
  #seq = 0;
  readonly #request = new Uint8Array(REQUEST_SIZE);
  readonly #req = new DataView(this.#request.buffer);
  readonly #reply = new Uint8Array(8192);
  readonly #rep = new DataView(this.#reply.buffer);
  readonly #client = new Uint8Array(16);
  readonly #server = new Uint8Array(16);

  /**
   * Open the NETLINK_SOCK_DIAG socket and check that it can look TCP sockets up (with a
   * short-lived listener on 127.0.0.1, so it needs net permission). Throws if it cannot.
   */
  constructor() {
    this.#fd = checkedSyscall(
      "socket(AF_NETLINK, NETLINK_SOCK_DIAG)",
      SYS.socket,
      AF_NETLINK,
      SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK,
      NETLINK_SOCK_DIAG,
    );
    const r = this.#req;
    r.setUint32(0, REQUEST_SIZE, true);
    r.setUint16(4, SOCK_DIAG_BY_FAMILY, true);
    r.setUint16(6, NLM_F_REQUEST, true);
    this.#request[HEADER + 1] = IPPROTO_TCP;
    r.setUint32(HEADER + 4, ALL_STATES, true);
    r.setUint32(REQ_ID + ID_COOKIE, INET_DIAG_NOCOOKIE, true);
    r.setUint32(REQ_ID + ID_COOKIE + 4, INET_DIAG_NOCOOKIE, true);
    try {
      this.#probe();
    } catch (err) {
      this.close();
      throw err;
    }
  }

  /**
   * The uid that owns the client's socket of the connection from `client` to `server` (its
   * creator, unless it was fchown-ed), while a process still holds it; `undefined` if there is no such socket here (the connection is
   * gone or closing, or the peer is on another host or network namespace). `server` must be
   * the concrete address the client connected to. Throws on an unusable address or a failed
   * netlink exchange.
   */
  uid(server: Endpoint, client: Endpoint): number | undefined {
    if (!this.#query(server, client)) return undefined;
    if (!this.#matches(client.port, server.port)) return undefined;
    if (this.#rep.getUint32(HEADER + MSG_INODE, true) === 0) return undefined;
    return this.#rep.getUint32(HEADER + MSG_UID, true);
  }

  /** Close the netlink socket; later lookups throw. */
  close(): void {
    if (this.#fd < 0) return;
    closeFd(this.#fd);
    this.#fd = -1;
  }

  /**
   * Ask the kernel for the socket at the 4-tuple; true if it answered with a socket record
   * (now in the reply buffer), false if it has none.
   */
  #query(server: Endpoint, client: Endpoint): boolean {
    if (this.#fd < 0) throw new Error("TcpPeers: lookup after close()");
    const serverV4 = parseAddress(server.hostname, this.#server);
    const clientV4 = parseAddress(client.hostname, this.#client);
    if (isUnspecified(this.#server)) {
      throw new Error(
        `peer lookup needs the connection's local address, not the wildcard ${server.hostname}`,
      );
    }
    if (serverV4 !== clientV4) return false;
    const req = this.#req;
    const seq = this.#seq = (this.#seq + 1) >>> 0;
    req.setUint32(8, seq, true);
    this.#request[HEADER] = serverV4 ? AF_INET : AF_INET6;
    req.setUint16(REQ_ID + ID_SPORT, port(client.port));
    req.setUint16(REQ_ID + ID_DPORT, port(server.port));
    // An AF_INET request reads the first word of each address; the kernel's IPv4 lookup also
    // finds IPv6 sockets connected to IPv4-mapped addresses.
    const from = serverV4 ? 12 : 0;
    this.#request.fill(0, REQ_ID + ID_SRC, REQ_ID + ID_DST + 16);
    this.#request.set(this.#client.subarray(from), REQ_ID + ID_SRC);
    this.#request.set(this.#server.subarray(from), REQ_ID + ID_DST);

    const c = libc();
    const sent = c.write(this.#fd, this.#request, BigInt(REQUEST_SIZE));
    if (sent !== REQUEST_SIZE) throw netlinkError("send", sent);
    for (;;) {
      const n = c.read(this.#fd, this.#reply, BigInt(this.#reply.length));
      if (n < 0) throw netlinkError("recv", n);
      const rep = this.#rep;
      if (n < HEADER || rep.getUint32(0, true) > n) {
        throw new Error(`sock_diag: malformed reply of ${n} bytes`);
      }
      // A reply left over from an earlier, failed exchange: skip it.
      if (rep.getUint32(8, true) !== seq) continue;
      const type = rep.getUint16(4, true);
      if (type === NLMSG_ERROR) {
        const err = -rep.getInt32(HEADER, true);
        if (err === E.ENOENT) return false;
        throw new OsError("sock_diag lookup", err);
      }
      if (type !== SOCK_DIAG_BY_FAMILY || n < HEADER + MSG_SIZE) {
        throw new Error(`sock_diag: unexpected reply type ${type} of ${n} bytes`);
      }
      return true;
    }
  }

  /**
   * Fail closed if this kernel cannot look TCP sockets up (no tcp_diag), which would otherwise
   * read as "no such socket" for every connection: ask for a 4-tuple whose local end is a fresh
   * listener, which the kernel's fallback to listening sockets must find.
   */
  #probe(): void {
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    try {
      if (!this.#query(listener.addr, listener.addr)) {
        throw new Error("sock_diag cannot look up TCP sockets on this kernel (tcp_diag missing?)");
      }
    } finally {
      listener.close();
    }
  }

  /** Whether the reply describes exactly the asked-for 4-tuple (not a fallback listener). */
  #matches(clientPort: number, serverPort: number): boolean {
    const rep = this.#rep;
    const id = HEADER + MSG_ID;
    if (rep.getUint16(id + ID_SPORT) !== clientPort) return false;
    if (rep.getUint16(id + ID_DPORT) !== serverPort) return false;
    const v4 = this.#reply[HEADER] === AF_INET;
    return sameAddress(this.#reply, id + ID_SRC, v4, this.#client) &&
      sameAddress(this.#reply, id + ID_DST, v4, this.#server);
  }
}

/** Whether the reply's address at `at` (IPv4 in the first word if `v4`) equals `want`. */
function sameAddress(reply: Uint8Array, at: number, v4: boolean, want: Uint8Array): boolean {
  if (v4) {
    if (!isMapped(want)) return false;
    for (let i = 0; i < 4; i++) if (reply[at + i] !== want[12 + i]) return false;
    return true;
  }
  for (let i = 0; i < 16; i++) if (reply[at + i] !== want[i]) return false;
  return true;
}

function port(p: number): number {
  if (!Number.isInteger(p) || p < 1 || p > 65535) throw new Error(`peer lookup: bad port ${p}`);
  return p;
}

function netlinkError(step: string, result: number): Error {
  const code = errno();
  if (result < 0 && code === E.EAGAIN) return new Error(`sock_diag ${step}: no reply from kernel`);
  if (result < 0) return new OsError(`sock_diag ${step}`, code);
  return new Error(`sock_diag ${step}: short transfer (${result} bytes)`);
}

const V4_PREFIX = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];

function isMapped(a: Uint8Array): boolean {
  for (let i = 0; i < 12; i++) if (a[i] !== V4_PREFIX[i]) return false;
  return true;
}

function isUnspecified(a: Uint8Array): boolean {
  const from = isMapped(a) ? 12 : 0;
  for (let i = from; i < 16; i++) if (a[i] !== 0) return false;
  return true;
}

/**
 * Parse an IPv4 or IPv6 literal into `out` as 16 bytes (IPv4 as ::ffff:a.b.c.d); true if the
 * address is IPv4 or IPv4-mapped. Throws on anything else, including scoped (`%`) addresses.
 */
function parseAddress(hostname: string, out: Uint8Array): boolean {
  const host = hostname.startsWith("[") && hostname.endsWith("]")
    ? hostname.slice(1, -1)
    : hostname;
  if (!host.includes(":")) {
    out.set(V4_PREFIX);
    if (!parseV4(host, out, 12)) throw badAddress(hostname);
    return true;
  }
  const halves = host.split("::");
  if (halves.length > 2) throw badAddress(hostname);
  const head = halves[0] === "" ? [] : halves[0].split(":");
  const tail = halves.length === 1 || halves[1] === "" ? [] : halves[1].split(":");
  const words: number[] = [];
  const groups = [...head, ...tail];
  const last = groups.at(-1) ?? "";
  const v4Tail = last.includes(".");
  for (const [i, group] of groups.entries()) {
    if (v4Tail && i === groups.length - 1) break;
    if (!/^[0-9a-fA-F]{1,4}$/.test(group)) throw badAddress(hostname);
    words.push(parseInt(group, 16));
  }
  const total = words.length + (v4Tail ? 2 : 0);
  if (halves.length === 1 ? total !== 8 : total > 7) throw badAddress(hostname);
  const zeros = 8 - total;
  const all = [
    ...words.slice(0, head.length),
    ...new Array(zeros).fill(0),
    ...words.slice(head.length),
  ];
  for (const [i, w] of all.entries()) {
    out[2 * i] = w >> 8;
    out[2 * i + 1] = w & 0xff;
  }
  if (v4Tail && !parseV4(last, out, 12)) throw badAddress(hostname);
  return isMapped(out);
}

function parseV4(s: string, out: Uint8Array, at: number): boolean {
  const parts = s.split(".");
  if (parts.length !== 4) return false;
  for (const [i, part] of parts.entries()) {
    if (!/^\d{1,3}$/.test(part) || Number(part) > 255) return false;
    out[at + i] = Number(part);
  }
  return true;
}

function badAddress(hostname: string): Error {
  return new Error(`peer lookup: ${JSON.stringify(hostname)} is not an IP address`);
}

let shared: TcpPeers | undefined;

/**
 * `TcpPeers.uid` on a netlink socket shared by this thread, opened on first use and kept for the
 * life of the process.
 */
export function peerUid(server: Endpoint, client: Endpoint): number | undefined {
  shared ??= new TcpPeers();
  return shared.uid(server, client);
}
