/**
 * Who owns a TCP socket, asked of the kernel: one `NETLINK_SOCK_DIAG` socket per network
 * namespace (it answers for the namespace it was made in) and an exact lookup by the
 * connection's addresses and ports, whose answer carries the owning uid. The egress gateway
 * attributes each proxy connection to a session this way: every session runs as a uid of its
 * own. `/proc/net/tcp` says the same but walks the whole host's TCP hash table, milliseconds per
 * read on the server's thread; the exact lookup is one hash probe.
 *
 * Synchronous calls on the calling thread only (the reply is queued before `sendto` returns).
 * It must never report an owner for a socket it did not find.
 *
 * @module
 */

import { errno, OsError, rawSyscall } from "../ffi/libc.ts";

const SYS_SOCKET = 41;
const SYS_SENDTO = 44;
const SYS_RECVFROM = 45;
const SYS_CLOSE = 3;
const AF_NETLINK = 16;
const AF_INET = 2;
const SOCK_DGRAM = 2;
const SOCK_CLOEXEC = 0o2000000;
const NETLINK_SOCK_DIAG = 4;
const SOCK_DIAG_BY_FAMILY = 20;
const NLM_F_REQUEST = 1;
const NLMSG_ERROR = 2;
const IPPROTO_TCP = 6;
const MSG_DONTWAIT = 0x40;
const NLMSG_HEADER = 16;
/** `struct inet_diag_req_v2`. */
const REQUEST_SIZE = 56;
/** Offset of `idiag_uid` in `struct inet_diag_msg`. */
const UID_OFFSET = 64;

/** Owners of TCP sockets in one network namespace. */
export class SocketOwners {
  #fd: number;
  #seq = 0;
  #request = new Uint8Array(NLMSG_HEADER + REQUEST_SIZE);
  #reply = new Uint8Array(8192);

  /** Opens the netlink socket in the calling thread's network namespace. */
  constructor() {
    const fd = rawSyscall(SYS_SOCKET, AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd < 0) throw new OsError("socket(NETLINK_SOCK_DIAG)", errno());
    this.#fd = fd;
  }

  /**
   * The uid owning the IPv4 TCP socket bound to `local` (`a.b.c.d:port`) and connected to
   * `remote`; undefined when there is none (it closed meanwhile).
   */
  uid(local: [string, number], remote: [string, number]): number | undefined {
    const req = this.#request;
    req.fill(0);
    const view = new DataView(req.buffer);
    view.setUint32(0, req.length, true);
    view.setUint16(4, SOCK_DIAG_BY_FAMILY, true);
    view.setUint16(6, NLM_F_REQUEST, true);
    view.setUint32(8, ++this.#seq, true);
    const body = NLMSG_HEADER;
    req[body] = AF_INET;
    req[body + 1] = IPPROTO_TCP;
    view.setUint32(body + 4, 0xffffffff, true); // every state
    const id = body + 8;
    view.setUint16(id, local[1], false);
    view.setUint16(id + 2, remote[1], false);
    req.set(local[0].split(".").map(Number), id + 4);
    req.set(remote[0].split(".").map(Number), id + 20);
    view.setUint32(id + 40, 0xffffffff, true); // INET_DIAG_NOCOOKIE
    view.setUint32(id + 44, 0xffffffff, true);
    if (rawSyscall(SYS_SENDTO, this.#fd, req, req.length, 0, null, 0) < 0) {
      throw new OsError("sendto(sock_diag)", errno());
    }
    // A reply of an earlier lookup (one whose receive failed) is skipped, never read as this
    // one's: its uid would attribute the connection to another session.
    let n: number;
    let reply: DataView;
    do {
      n = rawSyscall(
        SYS_RECVFROM,
        this.#fd,
        this.#reply,
        this.#reply.length,
        MSG_DONTWAIT,
        null,
        null,
      );
      if (n < 0) throw new OsError("recv(sock_diag)", errno());
      reply = new DataView(this.#reply.buffer, 0, n);
    } while (n >= NLMSG_HEADER && reply.getUint32(8, true) !== this.#seq);
    if (n < NLMSG_HEADER + UID_OFFSET + 4 || reply.getUint16(4, true) === NLMSG_ERROR) {
      return undefined;
    }
    return reply.getUint32(NLMSG_HEADER + UID_OFFSET, true);
  }

  close(): void {
    rawSyscall(SYS_CLOSE, this.#fd);
  }
}
