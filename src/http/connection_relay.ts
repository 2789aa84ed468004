/**
 * One accepted connection of the HTTP listener, relayed to its `Deno.serve` backend: the bytes
 * both ways, each request head tagged with the connection's random tag (any tag the client sent
 * is dropped) so the handler finds its connection, the count of requests in flight, the one
 * timer that enforces the header and idle timeouts, and the in-process WebSocket upgrade of a
 * first request (see listener.ts for the whole design).
 *
 * It must never close a connection with a request in flight for being idle, never relay a head
 * without its tag, and never hand over a socket whose handshake was refused.
 *
 * @module
 */

import type { ConnectionLimits } from "../config.ts";
import { loggable } from "../ffi/libc.ts";
import { concat } from "../output/head_tail.ts";
import { FrameSocket } from "../ws/socket.ts";
import {
  answerAndLinger,
  closeQuietly,
  framingRefusal,
  writeAll,
  writeClosingResponse,
} from "./raw_answers.ts";
import { FramingError, header, RequestFraming, type RequestHead } from "./request_framing.ts";
import { handshakeRefused, hasToken, switchingProtocols } from "./ws_handshake.ts";

/** Accepting a WebSocket upgrade: the largest message the socket may take. */
export interface UpgradeOptions {
  maxMessage: number;
}

/** What a handler served here gets with each request. */
export interface ConnectionInfo extends Deno.ServeHandlerInfo {
  /** One object per accepted connection, the same for each of its requests (a WeakMap key). */
  readonly connection: object;
  /**
   * On a connection's first request for the upgrade path with `Upgrade: websocket`: check the
   * handshake and accept it (`accept` gets the socket once the 101 is sent); answers the
   * handshake's refusal (400, or 426 for another version) or the response to return.
   */
  readonly upgrade?: (
    options: UpgradeOptions,
    accept: (socket: FrameSocket) => void,
  ) => Response;
}

/** The per-connection object of a request this listener served; undefined for any other. */
export function connectionOf(info: unknown): object | undefined {
  return info && typeof info === "object" && "connection" in info &&
      typeof info.connection === "object" && info.connection !== null
    ? info.connection
    : undefined;
}

/** The header that carries a connection's tag from the relay to the handler. */
export const TAG = "x-uexec-connection";

/** Bytes relayed per read. */
const RELAY_CHUNK = 64 * 1024;

/** Deno.serve's default for a handler that throws. */
export function internalError(err: unknown): Response {
  console.error("uexec: request handler failed:", loggable(err));
  return new Response("Internal Server Error", { status: 500 });
}

/** What a connection needs of its listener. */
export interface Relay {
  /** The backend's socket (a new one each time it is restarted). */
  backendPath: string;
  readonly limits: ConnectionLimits;
  readonly handler: Deno.ServeHandler;
  readonly upgradePath?: string;
  readonly byTag: Map<string, Connection>;
}

/** One accepted connection: its relay, its one timer and its requests in flight. */
export class Connection {
  readonly token = {};
  readonly tag = crypto.getRandomValues(new Uint8Array(16)).toHex();
  readonly finished: Promise<void>;
  readonly #conn: Deno.Conn;
  readonly #relay: Relay;
  readonly #remoteAddr: Deno.Addr;
  readonly #framing = new RequestFraming();
  readonly #backend: Deno.Conn;
  #gone = false;
  #done = Promise.withResolvers<void>();
  /** Requests whose head was relayed and whose response is not yet sent (or an upgrade). */
  #inFlight = 0;
  #heads = 0;
  #upgraded = false;
  /** The WebSocket this connection was upgraded to. */
  #socket?: FrameSocket;
  /** When the current wait for a request head began, and how long it may last. */
  #since = performance.now();
  #allowed: number;
  #timer?: ReturnType<typeof setTimeout>;
  /** When the armed timer fires. */
  #due = 0;
  /** When the write to the client under way began; undefined while none is. */
  #writeStarted?: number;
  /** The timer that closes a connection whose write to the client stalled (#watchWrites). */
  #writeWatch?: ReturnType<typeof setTimeout>;

  constructor(conn: Deno.Conn, backend: Deno.Conn, relay: Relay) {
    this.#conn = conn;
    this.#backend = backend;
    this.#relay = relay;
    this.finished = this.#done.promise;
    // A unix client has no address of its own: the handler gets the socket's path, as
    // Deno.serve gives.
    this.#remoteAddr = conn.remoteAddr.transport === "unix" ? conn.localAddr : conn.remoteAddr;
    this.#allowed = relay.limits.headerTimeoutMs;
    this.#arm(this.#allowed);
    relay.byTag.set(this.tag, this);
    this.#readClient().catch(() => this.close());
    this.#readBackend().finally(() => {
      // An upgraded connection no longer needs the backend.
      if (!this.#upgraded) this.close();
    });
  }

  /** When it became idle (nothing in flight), or undefined while a request is in flight. */
  get idleSince(): number | undefined {
    return this.#inFlight === 0 && !this.#gone ? this.#since : undefined;
  }

  /** Serve a relayed request of this connection (the handler's `info` is this connection's). */
  serve(req: Request, completed: Promise<void>): Response | Promise<Response> {
    completed.then(this.#ended, this.#ended);
    const info: ConnectionInfo = {
      remoteAddr: this.#remoteAddr,
      completed,
      connection: this.token,
    };
    return this.#relay.handler(req, info);
  }

  /** At shutdown: a WebSocket is told the server goes away (close 1001) and ends cleanly. */
  async goAway(): Promise<void> {
    const socket = this.#socket;
    if (socket && !this.#gone) {
      socket.close(1001, "server shutting down");
      await socket.ended;
    }
    this.close();
  }

  /** Close both ends now. */
  close(): void {
    if (this.#gone) return;
    this.#gone = true;
    clearTimeout(this.#timer);
    clearTimeout(this.#writeWatch);
    this.#relay.byTag.delete(this.tag);
    closeQuietly(this.#conn);
    closeQuietly(this.#backend);
    this.#done.resolve();
  }

  async #readClient(): Promise<void> {
    const buf = new Uint8Array(RELAY_CHUNK);
    /** Bytes for the backend from the read being framed (views of `buf`, or new arrays). */
    const relayed: Uint8Array[] = [];
    try {
      for (;;) {
        // A head or body under way must keep coming: a client that stops sending it for the
        // idle timeout is closed, though a request is in flight (its handler waits on it).
        const stalled = this.#framing.between
          ? undefined
          : setTimeout(() => this.close(), this.#relay.limits.idleTimeoutMs);
        const n = await this.#conn.read(buf).finally(() => clearTimeout(stalled));
        if (n === null) break;
        let data: Uint8Array = buf.subarray(0, n);
        while (data.length > 0) {
          const { segments, rest } = this.#framing.push(data);
          data = rest;
          for (const segment of segments) {
            if ("body" in segment) {
              relayed.push(segment.body);
              continue;
            }
            if (this.#heads++ === 0 && this.#isUpgrade(segment.head)) {
              return await this.#upgrade(segment.head, data.slice());
            }
            this.#inFlight++;
            relayed.push(latin1(tagged(segment.head, this.tag)));
          }
        }
        // What one read brought (a head and its body, say) goes to the backend in one write.
        await this.#toBackend(relayed);
      }
    } catch (err) {
      if (!(err instanceof FramingError)) throw err;
      // The requests framed before the error are relayed, as they came.
      await this.#toBackend(relayed).catch(() => {});
      // Answered only where no response of the backend can interleave with it.
      if (this.#heads <= 1 && this.#inFlight === 0) {
        clearTimeout(this.#timer);
        await answerAndLinger(this.#conn, framingRefusal(err));
      }
      return this.close();
    }
    // The client is done sending: responses in flight are still delivered.
    if (this.#inFlight === 0) return this.close();
    await this.#backend.closeWrite().catch(() => this.close());
  }

  /** Relay `parts` to the backend in one write, emptying the list. */
  async #toBackend(parts: Uint8Array[]): Promise<void> {
    if (parts.length === 0) return;
    const bytes = parts.length === 1
      ? parts[0]
      : concat(parts, parts.reduce((n, p) => n + p.length, 0));
    parts.length = 0;
    await writeAll(this.#backend, bytes);
  }

  async #readBackend(): Promise<void> {
    const buf = new Uint8Array(RELAY_CHUNK);
    const backend = this.#backend;
    try {
      for (let n = await backend.read(buf); n !== null; n = await backend.read(buf)) {
        await this.#toClient(buf.subarray(0, n));
      }
    } catch { /* either end is gone */ }
  }

  /**
   * Relay `bytes` to the client. A client that reads nothing for the idle timeout is closed:
   * else, by not reading its responses (pipelined requests, a long answer), it would keep a
   * request in flight, and its connection, for ever.
   */
  async #toClient(bytes: Uint8Array): Promise<void> {
    for (let off = 0; off < bytes.length;) {
      this.#writeStarted = performance.now();
      this.#watchWrites();
      try {
        off += await this.#conn.write(bytes.subarray(off));
      } finally {
        this.#writeStarted = undefined;
      }
    }
  }

  /**
   * Close the connection once a write to the client has waited the idle timeout. One timer
   * watches every write: armed by the first, it looks again when the write under way could
   * time out, and lapses once no write is under way (a timer set and cleared per write would
   * cost each response two timer operations).
   */
  #watchWrites(): void {
    if (this.#writeWatch !== undefined) return;
    const idle = this.#relay.limits.idleTimeoutMs;
    const check = () => {
      this.#writeWatch = undefined;
      const started = this.#writeStarted;
      if (started === undefined) return;
      const left = started + idle - performance.now();
      if (left <= 0) return this.close();
      this.#writeWatch = setTimeout(check, left);
    };
    this.#writeWatch = setTimeout(check, idle);
  }

  #isUpgrade(head: RequestHead): boolean {
    const path = this.#relay.upgradePath;
    return path !== undefined && head.method === "GET" &&
      head.target.split("?")[0] === path && hasToken(header(head, "upgrade"), "websocket");
  }

  /** Serve the first request in-process with `info.upgrade` (see the module doc). */
  async #upgrade(head: RequestHead, rest: Uint8Array): Promise<void> {
    this.#inFlight++;
    clearTimeout(this.#timer);
    this.#upgraded = true;
    closeQuietly(this.#backend);
    const completed = Promise.withResolvers<void>();
    completed.promise.catch(() => {});
    let req: Request;
    try {
      const headers = new Headers(head.headers.filter(([name]) => name.toLowerCase() !== TAG));
      req = new Request(new URL(head.target, `http://${headers.get("host") ?? "localhost"}`), {
        headers,
      });
    } catch {
      await answerAndLinger(this.#conn, framingRefusal(new FramingError(400, "malformed request")));
      return this.close();
    }
    let accepted: { options: UpgradeOptions; accept: (socket: FrameSocket) => void } | undefined;
    const upgrade = (options: UpgradeOptions, accept: (socket: FrameSocket) => void) => {
      const refused = handshakeRefused(req);
      if (refused) return refused;
      accepted = { options, accept };
      return new Response(null, { status: 200 });
    };
    const info: ConnectionInfo = {
      remoteAddr: this.#remoteAddr,
      completed: completed.promise,
      connection: this.token,
      upgrade,
    };
    let res: Response;
    try {
      res = await this.#relay.handler(req, info);
    } catch (err) {
      res = internalError(err);
    }
    try {
      if (accepted && res.ok) {
        await res.body?.cancel();
        await writeAll(this.#conn, await switchingProtocols(req));
        completed.resolve();
        if (this.#gone) return;
        const socket = this.#socket = new FrameSocket(
          this.#conn,
          rest,
          accepted.options.maxMessage,
        );
        socket.addCloseListener(() => this.close());
        accepted.accept(socket);
        return;
      }
      await writeClosingResponse(this.#conn, res);
      completed.resolve();
    } catch (err) {
      completed.reject(err);
    }
    this.close();
  }

  #ended = () => {
    if (--this.#inFlight > 0 || this.#gone) return;
    this.#since = performance.now();
    this.#allowed = this.#relay.limits.idleTimeoutMs;
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
    else this.close();
  };
}

/** `head` as relayed: the client's lines, less any tag of its own, plus the connection's. */
function tagged(head: RequestHead, tag: string): string {
  let text = `${head.method} ${head.target} HTTP/${head.version}\r\n`;
  for (const [name, value] of head.headers) {
    if (name.toLowerCase() !== TAG) text += `${name}: ${value}\r\n`;
  }
  return `${text}${TAG}: ${tag}\r\n\r\n`;
}

/**
 * A head's text as the bytes it was decoded from (as latin1, one code unit a byte; UTF-8 would
 * turn each byte beyond ASCII into two).
 */
function latin1(text: string): Uint8Array {
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  return bytes;
}
