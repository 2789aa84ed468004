/**
 * The HTTP listener, on public Deno APIs only: it accepts connections itself and relays each one's
 * bytes to a `Deno.serve` that listens on a private unix socket (0600, in a 0700 directory of its
 * own), so that what clients hold is bounded; `Deno.serve` alone has no header timeout, idle
 * timeout or connection cap, and takes no accepted connection.
 *
 * At accept, before a connection holds a slot: a peer that `peers` finds sandboxed is answered 403
 * and closed, and beyond the connection cap, beyond the per-peer cap, and when the process is out
 * of file descriptors, a client is answered 503 and closed (when not even that descriptor can be
 * had, the connection idle longest is closed for it; a connection is taken only with three
 * descriptors free, its own, the relay's and the backend's, because Deno.serve's accept loop ends
 * at EMFILE, after which the backend is started again). A connection must then complete a request
 * head within the header timeout of being accepted, and the next one within the idle timeout of
 * its last response; a request head or body under way that stops coming for the idle timeout
 * closes it too, though the request is in flight, and so does a client that reads nothing of its
 * responses for the idle timeout.
 *
 * The relay (connection_relay.ts, one per connection) reads each request's framing
 * (request_framing.ts) and adds to its head a header with the connection's random tag (any the
 * client sent is dropped), which the `Deno.serve` handler uses to find the connection (the tag
 * stays on the request, whose headers are immutable; it is worth nothing without the private
 * socket). That gives each request its connection's `info` (client address, a per-connection
 * `connection` object) and keeps the count of requests in flight that the timeouts need. A request
 * the relay cannot frame is answered 4xx and its connection closed.
 *
 * A connection's first request, if it is a `GET` of the upgrade path with `Upgrade: websocket`, is
 * not relayed: the handler is called in-process with `info.upgrade`, which checks the handshake
 * and, once the handler accepts, answers 101 and hands the connection to a `FrameSocket`
 * (ws/socket.ts; the handshake: ws_handshake.ts) (`Deno.upgradeWebSocket` works only under
 * `Deno.serve`, whose connection this is not). Any other answer is written back with
 * `connection: close` (raw_answers.ts). Probed on Deno 2.9.6 before choosing this: `node:http`
 * emits a real `upgrade` event, but it would move every route off `Deno.serve` onto the Node
 * compatibility layer; `Deno.serve` has no timeouts or cap and gives a unix client no address of
 * its own to tell connections apart (hence the tag).
 *
 * It must never crash or spin on an accept error, never close a connection that has a request in
 * flight (a long poll or an event stream is not idle), never serve a request that lacks a live
 * connection's tag, and never let the private socket be reached by anyone but itself.
 *
 * @module
 */

import type { ConnectionLimits } from "../config.ts";
import { loggable, outOfDescriptors } from "../ffi/libc.ts";
import {
  answerAndLinger,
  closeQuietly,
  refusal,
  REFUSAL_LINGER_MS,
  writeAll,
} from "./raw_answers.ts";
import { Connection, internalError, type Relay, TAG } from "./connection_relay.ts";
import { RequestFraming } from "./request_framing.ts";
import { deadInstanceDirs, instanceName, tempRoot } from "../sandbox/instance.ts";

/**
 * The private socket's directory: `uexec-relay-<instance>-<random>` in the temporary directory,
 * named for the server instance (sandbox/instance.ts) so that a later server can remove what a
 * killed one left ({@link removeDeadRelayDirs}).
 */
const RELAY_PREFIX = "uexec-relay-";
const RELAY_INSTANCE = /^uexec-relay-(i\d+-\d+)-/;

/**
 * Removes the private socket directories of server instances that no longer run (one killed
 * with SIGKILL could not remove its own) in `root` (the temporary directory); resolves to how
 * many. Only real directories of this process's uid count, never a link or another user's
 * look-alike.
 */
export async function removeDeadRelayDirs(root = tempRoot()): Promise<number> {
  let removed = 0;
  for await (const path of deadInstanceDirs(root, RELAY_INSTANCE)) {
    await Deno.remove(path, { recursive: true });
    removed++;
  }
  return removed;
}

/** Who is at the other end of a TCP connection, as found at accept. */
export interface Peer {
  /** A sandboxed command of this server (or a local peer that cannot be found): refused. */
  sandboxed: boolean;
  /** The key of the per-peer cap (a local uid, a remote address); none: only the cap. */
  key?: string;
}

/** Where to listen: TCP, or a unix socket. */
export type ListenAt =
  | { transport?: "tcp"; hostname: string; port: number }
  | { transport: "unix"; path: string };

/** What else the listener is told. */
export interface ListenOptions {
  /**
   * Made once the address is bound: who a TCP client is. Without it, no client is sandboxed
   * and each remote address is a peer.
   */
  peers?: (addr: Deno.NetAddr) => (remote: Deno.NetAddr) => Peer;
  /** The path whose first-request upgrades are served in-process (see the module doc). */
  upgradePath?: string;
}

/** A listening server. */
export interface HttpListener {
  readonly addr: Deno.NetAddr | Deno.UnixAddr;
  /** Connections being served now (refused ones are not counted). */
  readonly connections: number;
  /** Stop accepting, let requests in flight finish and close every connection. */
  shutdown(): Promise<void>;
}

const overloaded = (message: string) => refusal(503, "overloaded", message);
const TOO_MANY = overloaded("too many connections; retry later");
const TOO_MANY_FROM_PEER = overloaded("too many connections from this peer; retry later");
const NO_DESCRIPTORS = overloaded("the server is out of file descriptors; retry later");
const FORBIDDEN_PEER = refusal(
  403,
  "forbidden_peer",
  "requests from sandboxed commands are refused",
);

/**
 * After an accept error that a refusal could not clear, accepting waits until one of its
 * connections closes (freeing a descriptor), or at most this long (descriptors freed elsewhere
 * in the process announce nothing).
 */
const ACCEPT_BACKOFF_MS = 100;
/**
 * Sandboxed peers answered 403 at once; beyond, a sandboxed connection is closed unanswered (a
 * real command gets its answer; a flood holds no more than these descriptors).
 */
const SANDBOXED_ANSWERS = 16;

class Listener implements HttpListener {
  readonly addr: Deno.NetAddr | Deno.UnixAddr;
  readonly #listener: Deno.Listener;
  readonly #limits: ConnectionLimits;
  readonly #relay: Relay;
  readonly #dir: string;
  #backend?: Deno.HttpServer;
  #generation = 0;
  readonly #peerOf?: (remote: Deno.NetAddr) => Peer;
  readonly #live = new Set<Connection>();
  readonly #perPeer = new Map<string, number>();
  readonly #refused = new Set<Deno.Conn>();
  /** Sandboxed peers being answered 403 (also in #refused; see SANDBOXED_ANSWERS). */
  #sandboxedRefusals = 0;
  /** A descriptor held back so that a client can still be accepted, and refused, at EMFILE. */
  #reserve?: Deno.FsFile;
  #closing = false;
  readonly #accepting: Promise<void>;
  /** Wakes an accept loop that waits after an error, when a connection closes. */
  #wake?: () => void;

  constructor(
    at: ListenAt,
    limits: ConnectionLimits,
    handler: Deno.ServeHandler,
    options: ListenOptions,
  ) {
    this.#limits = limits;
    // The private socket: only this process (its uid) can reach the directory.
    this.#dir = Deno.makeTempDirSync({ prefix: `${RELAY_PREFIX}${instanceName()}-` });
    Deno.chmodSync(this.#dir, 0o700);
    this.#relay = {
      backendPath: "",
      limits,
      handler,
      upgradePath: options.upgradePath,
      byTag: new Map(),
    };
    try {
      this.#startBackend();
      this.#listener = at.transport === "unix"
        ? Deno.listen({ transport: "unix", path: at.path })
        : Deno.listen({ hostname: at.hostname, port: at.port });
    } catch (err) {
      this.#closing = true;
      this.#backend?.shutdown().finally(() => Deno.removeSync(this.#dir, { recursive: true }));
      if (!this.#backend) Deno.removeSync(this.#dir, { recursive: true });
      throw err;
    }
    this.addr = this.#listener.addr as Deno.NetAddr | Deno.UnixAddr;
    try {
      if (this.addr.transport === "tcp") this.#peerOf = options.peers?.(this.addr);
    } catch (err) {
      this.#closing = true;
      this.#listener.close();
      this.#backend!.shutdown().finally(() => Deno.removeSync(this.#dir, { recursive: true }));
      throw err;
    }
    this.#reserve = openReserve();
    this.#accepting = this.#acceptLoop();
  }

  /**
   * Start the `Deno.serve` behind the relay on a fresh socket path. Its accept loop ends on an
   * accept error (EMFILE: Deno.serve then rejects `finished` and removes its socket); it is
   * started again as soon as a descriptor frees up, and relays meanwhile answer 503.
   */
  #startBackend(): void {
    const byTag = this.#relay.byTag;
    const path = `${this.#dir}/http-${this.#generation++}.sock`;
    const umask = Deno.umask(0o177);
    let backend: Deno.HttpServer;
    try {
      backend = Deno.serve({
        transport: "unix",
        path,
        onListen() {},
        onError: internalError,
      }, (req, info) => {
        const tag = req.headers.get(TAG);
        const connection = tag === null ? undefined : byTag.get(tag);
        if (!connection) {
          return Response.json({
            error: { code: "invalid_request", message: "the request's framing was not understood" },
          }, { status: 400, headers: { connection: "close" } });
        }
        return connection.serve(req, info.completed);
      });
    } finally {
      Deno.umask(umask);
    }
    this.#backend = backend;
    this.#relay.backendPath = path;
    backend.finished.catch((err) => {
      if (this.#closing) return;
      // Reported, not a crash: the relays answer 503 until it is back.
      if (outOfDescriptors(err)) {
        console.error(
          "uexec: the HTTP server behind the listener ran out of descriptors; restarting it",
        );
      } else {console.error(
          "uexec: the HTTP server behind the listener stopped; restarting it:",
          err,
        );}
      this.#restartBackend();
    });
  }

  /** Start the backend again; while that fails (no descriptor), retry as connections close. */
  async #restartBackend(): Promise<void> {
    while (!this.#closing) {
      try {
        return this.#startBackend();
      } catch (err) {
        if (!outOfDescriptors(err)) console.error("uexec: restarting the HTTP server failed:", err);
        this.#closeLongestIdle();
        const { promise, resolve } = Promise.withResolvers<void>();
        const timer = setTimeout(resolve, ACCEPT_BACKOFF_MS);
        this.#live.values().next().value?.finished.then(resolve);
        await promise;
        clearTimeout(timer);
      }
    }
  }

  get connections(): number {
    return this.#live.size;
  }

  async shutdown(): Promise<void> {
    this.#closing = true;
    this.#listener.close();
    await this.#accepting;
    this.#reserve?.close();
    for (const conn of this.#refused) closeQuietly(conn);
    // Requests in flight finish (Deno.serve's graceful shutdown), then every relay closes.
    await this.#backend?.shutdown().catch(() => {/* it had stopped */});
    await Promise.all([...this.#live].map((c) => c.goAway()));
    await Deno.remove(this.#dir, { recursive: true }).catch(() => {});
  }

  async #acceptLoop(): Promise<void> {
    while (!this.#closing) {
      let conn: Deno.Conn;
      try {
        // A connection takes three descriptors (its own, the relay's, the backend's): short of
        // them, accept as out of descriptors (a 503, see #acceptFailed), so that the backend's
        // accept is never the one to fail.
        roomFor(3);
        conn = await this.#listener.accept();
      } catch (err) {
        if (this.#closing) return;
        await this.#acceptFailed(err);
        continue;
      }
      await this.#admit(conn);
    }
  }

  /** Refuse `conn` (sandboxed, over a cap) or serve it. */
  async #admit(conn: Deno.Conn): Promise<void> {
    const max = this.#limits.maxConnections;
    let peer: Peer = { sandboxed: false };
    if (conn.remoteAddr.transport === "tcp") {
      try {
        peer = this.#peerOf?.(conn.remoteAddr) ??
          { sandboxed: false, key: conn.remoteAddr.hostname };
      } catch (err) {
        console.error("uexec: peer lookup failed; refusing the connection:", loggable(err));
        peer = { sandboxed: true };
      }
    }
    const answer = peer.sandboxed
      ? FORBIDDEN_PEER
      : this.#live.size >= max
      ? TOO_MANY
      : peer.key !== undefined && (this.#perPeer.get(peer.key) ?? 0) >= this.#limits.maxPerPeer
      ? TOO_MANY_FROM_PEER
      : undefined;
    if (answer === undefined) {
      // Small answers and frames go out at once (Nagle's delay, against a client's delayed
      // acknowledgement, costs up to 40 ms a round trip; Deno.serve sets this on its own).
      if (conn.remoteAddr.transport === "tcp") (conn as Deno.TcpConn).setNoDelay(true);
      return await this.#open(conn, peer.key);
    }
    // Refusals hold descriptors too: beyond as many as the cap, a flood is closed unanswered;
    // a sandboxed one beyond a few, so that it holds next to nothing and crowds out no 503.
    if (peer.sandboxed) {
      if (this.#sandboxedRefusals >= SANDBOXED_ANSWERS) return closeQuietly(conn);
      this.#sandboxedRefusals++;
      this.#refuse(conn, answer, true).finally(() => this.#sandboxedRefusals--);
    } else if (this.#refused.size < max) this.#refuse(conn, answer, true);
    else closeQuietly(conn);
  }

  /**
   * Serve `conn` through a connection of its own to the backend, made before the next accept so
   * that descriptors go to whole relays: it needs one for its end and one for the backend's
   * (Deno.serve's accept loop ends at EMFILE, see #startBackend), so with fewer than two free it
   * is answered 503 and the connection idle longest is closed.
   */
  async #open(conn: Deno.Conn, key: string | undefined): Promise<void> {
    let backend: Deno.Conn;
    try {
      roomFor(2);
      backend = await Deno.connect({ transport: "unix", path: this.#relay.backendPath });
    } catch (err) {
      // Out of descriptors, or the backend is being restarted (see #startBackend).
      if (!outOfDescriptors(err)) console.error("uexec: relaying a connection failed:", err);
      this.#closeLongestIdle();
      if (this.#refused.size < this.#limits.maxConnections) {
        this.#refuse(conn, NO_DESCRIPTORS, true);
      } else closeQuietly(conn);
      return;
    }
    const c = new Connection(conn, backend, this.#relay);
    this.#live.add(c);
    if (key !== undefined) this.#perPeer.set(key, (this.#perPeer.get(key) ?? 0) + 1);
    c.finished.then(() => {
      this.#live.delete(c);
      if (key !== undefined) {
        const left = this.#perPeer.get(key)! - 1;
        if (left > 0) this.#perPeer.set(key, left);
        else this.#perPeer.delete(key);
      }
      this.#wake?.();
    });
  }

  /**
   * Out of descriptors: give the reserve up for one accept, answer that client 503 and take the
   * reserve back. Without a reserve (someone else took the freed descriptor), the connection
   * idle longest is closed; then, as on any other error, wait for a connection to close (see
   * ACCEPT_BACKOFF_MS) rather than retry an accept that fails at once.
   */
  async #acceptFailed(err: unknown): Promise<void> {
    if (outOfDescriptors(err) && this.#reserve) {
      this.#reserve.close();
      this.#reserve = undefined;
      try {
        await this.#refuse(await this.#listener.accept(), NO_DESCRIPTORS, false);
      } catch { /* the client left, or the listener closed */ }
    } else {
      if (!outOfDescriptors(err)) console.error("uexec: accepting a connection failed:", err);
      // Else a client may wait in the backlog until some connection closes by itself: the one
      // idle longest gives its descriptor up now.
      else this.#closeLongestIdle();
      const { promise, resolve } = Promise.withResolvers<void>();
      const timer = setTimeout(resolve, ACCEPT_BACKOFF_MS);
      this.#wake = resolve;
      await promise;
      clearTimeout(timer);
      this.#wake = undefined;
    }
    this.#reserve ??= openReserve();
  }

  #closeLongestIdle(): void {
    let longest: Connection | undefined;
    let earliest = Infinity;
    for (const c of this.#live) {
      const since = c.idleSince;
      if (since !== undefined && since < earliest) {
        longest = c;
        earliest = since;
      }
    }
    longest?.close();
  }

  /**
   * Read the request head, answer and close (a client such as fetch takes an answer that
   * comes before its request for a broken connection). With `linger`, the connection is then
   * half-closed and read until the client closes, so the answer is not lost to a reset. Either
   * way it lasts at most REFUSAL_LINGER_MS.
   */
  async #refuse(conn: Deno.Conn, answer: Uint8Array, linger: boolean): Promise<void> {
    this.#refused.add(conn);
    const timer = setTimeout(() => closeQuietly(conn), REFUSAL_LINGER_MS);
    const buf = new Uint8Array(4096);
    try {
      const framing = new RequestFraming();
      let headed = false;
      while (!headed) {
        const n = await conn.read(buf);
        if (n === null) break;
        try {
          headed = framing.push(buf.subarray(0, n)).segments.some((s) => "head" in s);
        } catch {
          headed = true; // A malformed head ends it too.
        }
      }
      if (linger) await answerAndLinger(conn, answer);
      else await writeAll(conn, answer);
    } catch { /* the client left, or the time is up */ }
    clearTimeout(timer);
    this.#refused.delete(conn);
    closeQuietly(conn);
  }
}

/** Throws EMFILE unless `n` descriptors can be had now (opened and closed again at once). */
function roomFor(n: number): void {
  const probes: Deno.FsFile[] = [];
  try {
    for (let i = 0; i < n; i++) probes.push(Deno.openSync("/dev/null"));
  } finally {
    for (const probe of probes) probe.close();
  }
}

function openReserve(): Deno.FsFile | undefined {
  try {
    return Deno.openSync("/dev/null");
  } catch {
    return undefined;
  }
}

/**
 * Listen at `at` and serve `handler` on every accepted connection within `limits`. Throws if
 * the address or the private socket cannot be bound.
 */
export function serveLimited(
  at: ListenAt,
  limits: ConnectionLimits,
  handler: Deno.ServeHandler,
  options: ListenOptions = {},
): HttpListener {
  return new Listener(at, limits, handler, options);
}
