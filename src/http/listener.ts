/**
 * The HTTP listener: it accepts connections itself and hands each one to Deno's HTTP server
 * (the same HTTP/1.1 and HTTP/2 code Deno.serve runs, on Deno's internal
 * `serveHttpOnConnection`), so that what clients hold is bounded. A connection must complete a
 * request head within the header timeout of being accepted, and the next one within the idle
 * timeout of its last response; beyond the connection cap, and when the process is out of file
 * descriptors, a client is answered 503 and closed (when not even that descriptor can be had,
 * the connection idle longest is closed for it). Requests themselves pass untouched; the
 * handler's `info` has the client's address, Deno's completion promise and `connection`, one
 * object per accepted connection (so that what holds for a whole connection, such as who its
 * peer is, can be found once). Per request this adds only an in-flight count kept through the
 * completion promise, and timers are per connection.
 *
 * It must never crash or spin on an accept error, and never close a connection that has a
 * request in flight (a long poll or an event stream is not idle).
 *
 * @module
 */

import { outOfDescriptors } from "../ffi/libc.ts";

/** What one connection may hold, and how many there may be. */
export interface ConnectionLimits {
  /** A new connection must complete its first request head within this. */
  headerTimeoutMs: number;
  /** A connection with nothing in flight must complete its next request head within this. */
  idleTimeoutMs: number;
  /**
   * Connections served at once; more are answered 503 and closed (and while as many refusals
   * are under way, closed unanswered).
   */
  maxConnections: number;
}

/** Where to listen: TCP, or a unix socket. */
export type ListenAt =
  | { transport?: "tcp"; hostname: string; port: number }
  | { transport: "unix"; path: string };

/** A listening server. */
export interface HttpListener {
  readonly addr: Deno.NetAddr | Deno.UnixAddr;
  /** Connections being served now (refused ones are not counted). */
  readonly connections: number;
  /** Stop accepting, let requests in flight finish and close every connection. */
  shutdown(): Promise<void>;
}

/** What a handler served here gets with each request. */
export interface ConnectionInfo extends Deno.ServeHandlerInfo {
  /** One object per accepted connection, the same for each of its requests (a WeakMap key). */
  readonly connection: object;
}

/** The per-connection object of a request this listener served; undefined for any other. */
export function connectionOf(info: unknown): object | undefined {
  return info && typeof info === "object" && "connection" in info &&
      typeof info.connection === "object" && info.connection !== null
    ? info.connection
    : undefined;
}

type ServeOnConnection = (
  conn: Deno.Conn,
  signal: AbortSignal | undefined,
  handler: Deno.ServeHandler,
  onError: (error: unknown) => Response,
  onListen: () => void,
) => Deno.HttpServer;

/** Deno's internal per-connection server; a runtime without it cannot start this server. */
function serveOnConnection(): ServeOnConnection {
  const internal = (Deno as unknown as { internal: symbol }).internal;
  const internals = (Deno as unknown as Record<symbol, Record<string, unknown> | undefined>)[
    internal
  ];
  const serve = internals?.serveHttpOnConnection;
  if (typeof serve !== "function") {
    throw new Error("this Deno has no serveHttpOnConnection; uexec needs Deno 2.9");
  }
  return serve as ServeOnConnection;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** A complete 503 response with the API's error body, closing the connection. */
function overloaded(message: string): Uint8Array {
  const body = JSON.stringify({ error: { code: "overloaded", message } });
  return encoder.encode(
    "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n" +
      `content-length: ${encoder.encode(body).length}\r\nconnection: close\r\n\r\n${body}`,
  );
}

const TOO_MANY = overloaded("too many connections; retry later");
const NO_DESCRIPTORS = overloaded("the server is out of file descriptors; retry later");

/**
 * How long a refused connection is kept to read its client's request (a close with unread data
 * resets the connection, which can destroy the 503 before the client reads it).
 */
const REFUSAL_LINGER_MS = 1000;
/**
 * After an accept error that a refusal could not clear, accepting waits until one of its
 * connections closes (freeing a descriptor), or at most this long (descriptors freed elsewhere
 * in the process announce nothing).
 */
const ACCEPT_BACKOFF_MS = 100;

/** Deno.serve's default for a handler that throws. */
function internalError(err: unknown): Response {
  console.error("uexec: request handler failed:", err);
  return new Response("Internal Server Error", { status: 500 });
}

/** One served connection and its one timer (re-armed only when it fires early). */
class Connection {
  readonly server: Deno.HttpServer;
  readonly #idleTimeoutMs: number;
  #gone = false;
  #inFlight = 0;
  /** When the current wait for a request head began, and how long it may last. */
  #since = performance.now();
  #allowed: number;
  #timer?: ReturnType<typeof setTimeout>;
  /** When the armed timer fires. */
  #due = 0;

  constructor(
    conn: Deno.Conn,
    limits: ConnectionLimits,
    handler: Deno.ServeHandler,
    serve: ServeOnConnection,
  ) {
    this.#idleTimeoutMs = limits.idleTimeoutMs;
    this.#allowed = limits.headerTimeoutMs;
    this.#arm(limits.headerTimeoutMs);
    // Deno finds a unix client's address through a listener it does not have here: the
    // handler gets the socket's path, as Deno.serve gives.
    const remoteAddr = conn.remoteAddr.transport === "unix" ? conn.localAddr : conn.remoteAddr;
    const connection = {};
    this.server = serve(
      conn,
      undefined,
      (req, info) => {
        this.#inFlight++;
        const completed = info.completed;
        completed.then(this.#ended, this.#ended);
        const served: ConnectionInfo = { remoteAddr, completed, connection };
        return handler(req, served);
      },
      internalError,
      () => {},
    );
  }

  /** When it became idle (nothing in flight), or undefined while a request is in flight. */
  get idleSince(): number | undefined {
    return this.#inFlight === 0 && !this.#gone ? this.#since : undefined;
  }

  /** The connection is gone: its timer must not outlive it. */
  closed(): void {
    this.#gone = true;
    clearTimeout(this.#timer);
  }

  #ended = () => {
    if (--this.#inFlight > 0 || this.#gone) return;
    this.#since = performance.now();
    this.#allowed = this.#idleTimeoutMs;
    // A timer that fires by the new deadline re-arms itself; a later one (the header
    // timeout's) is replaced.
    if (this.#timer !== undefined && this.#due <= this.#since + this.#allowed) return;
    clearTimeout(this.#timer);
    this.#arm(this.#allowed);
  };

  #arm(ms: number): void {
    this.#due = performance.now() + ms;
    this.#timer = setTimeout(this.#expire, ms);
  }

  #expire = () => {
    this.#timer = undefined;
    if (this.#inFlight > 0) return; // #ended re-arms.
    const left = this.#since + this.#allowed - performance.now();
    if (left > 0) this.#arm(left);
    // With nothing in flight, Deno's graceful close closes the connection at once.
    else this.server.shutdown().catch(() => {/* already closed */});
  };
}

class Listener implements HttpListener {
  readonly addr: Deno.NetAddr | Deno.UnixAddr;
  readonly #listener: Deno.Listener;
  readonly #limits: ConnectionLimits;
  readonly #handler: Deno.ServeHandler;
  readonly #serve = serveOnConnection();
  readonly #live = new Set<Connection>();
  readonly #refused = new Set<Deno.Conn>();
  /** A descriptor held back so that a client can still be accepted, and refused, at EMFILE. */
  #reserve?: Deno.FsFile;
  #closing = false;
  readonly #accepting: Promise<void>;
  /** Wakes an accept loop that waits after an error, when a connection closes. */
  #wake?: () => void;

  constructor(at: ListenAt, limits: ConnectionLimits, handler: Deno.ServeHandler) {
    this.#listener = at.transport === "unix"
      ? Deno.listen({ transport: "unix", path: at.path })
      : Deno.listen({ hostname: at.hostname, port: at.port });
    this.addr = this.#listener.addr as Deno.NetAddr | Deno.UnixAddr;
    this.#limits = limits;
    this.#handler = handler;
    this.#reserve = openReserve();
    this.#accepting = this.#acceptLoop();
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
    await Promise.all([...this.#live].map((c) => c.server.shutdown()));
  }

  async #acceptLoop(): Promise<void> {
    while (!this.#closing) {
      let conn: Deno.Conn;
      try {
        conn = await this.#listener.accept();
      } catch (err) {
        if (this.#closing) return;
        await this.#acceptFailed(err);
        continue;
      }
      const max = this.#limits.maxConnections;
      if (this.#live.size < max) this.#open(conn);
      // Refusals hold descriptors too: beyond as many as the cap, a flood is closed unanswered.
      else if (this.#refused.size < max) this.#refuse(conn, TOO_MANY, true);
      else closeQuietly(conn);
    }
  }

  #open(conn: Deno.Conn): void {
    const c = new Connection(conn, this.#limits, this.#handler, this.#serve);
    this.#live.add(c);
    c.server.finished.catch(() => {/* the client's connection failed: nothing to do */})
      .finally(() => {
        c.closed();
        this.#live.delete(c);
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
    longest?.server.shutdown().catch(() => {/* already closed */});
  }

  /**
   * Read the request head, answer 503 and close (a client such as fetch takes an answer that
   * comes before its request for a broken connection). With `linger`, the connection is then
   * half-closed and read until the client closes, so the answer is not lost to a reset. Either
   * way it lasts at most REFUSAL_LINGER_MS.
   */
  async #refuse(conn: Deno.Conn, answer: Uint8Array, linger: boolean): Promise<void> {
    this.#refused.add(conn);
    const timer = setTimeout(() => closeQuietly(conn), REFUSAL_LINGER_MS);
    const buf = new Uint8Array(4096);
    try {
      let head = "";
      while (!head.includes("\r\n\r\n")) {
        const n = await conn.read(buf);
        if (n === null) break;
        head = (head + decoder.decode(buf.subarray(0, n))).slice(-4096);
      }
      for (let off = 0; off < answer.length;) off += await conn.write(answer.subarray(off));
      if (linger) {
        await conn.closeWrite();
        while (await conn.read(buf) !== null) { /* discard the rest */ }
      }
    } catch { /* the client left, or the time is up */ }
    clearTimeout(timer);
    this.#refused.delete(conn);
    closeQuietly(conn);
  }
}

/** Close `conn` unless it is closed already. */
function closeQuietly(conn: Deno.Conn): void {
  try {
    conn.close();
  } catch { /* closed */ }
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
 * the address cannot be bound or the runtime cannot serve single connections.
 */
export function serveLimited(
  at: ListenAt,
  limits: ConnectionLimits,
  handler: Deno.ServeHandler,
): HttpListener {
  return new Listener(at, limits, handler);
}
