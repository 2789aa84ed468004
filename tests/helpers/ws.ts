/**
 * A JSON-RPC client over a real WebSocket (Deno's built-in one), for the tests of `GET /v1/ws`:
 * calls answered by id in any order, notifications kept in arrival order together with the
 * answers, so a test can tell what came before what. And a raw upgrade over TCP, for refusals
 * and for a client that does not read.
 *
 * @module
 */

/** A frame received: an answer or a notification (parsed JSON, checked by the tests). */
// deno-lint-ignore no-explicit-any
export type Frame = Record<string, any>;

/** A connected JSON-RPC client. */
export class RpcSocket {
  /** Every frame received, in order. */
  readonly frames: Frame[] = [];
  #socket: WebSocket;
  #nextId = 1;
  #waiters: {
    match: (f: Frame) => boolean;
    resolve: (f: Frame) => void;
    reject: (err: Error) => void;
  }[] = [];
  #seen = 0;
  /** Set once the socket closed: later waits that find nothing fail with it. */
  #gone?: Error;
  readonly closed: Promise<CloseEvent>;

  private constructor(socket: WebSocket) {
    this.#socket = socket;
    const closed = Promise.withResolvers<CloseEvent>();
    this.closed = closed.promise;
    socket.onclose = (e) => {
      this.#gone = new Error(`the socket closed (${e.code} ${e.reason}) before the frame came`);
      for (const w of this.#waiters.splice(0)) w.reject(this.#gone);
      closed.resolve(e);
    };
    socket.onmessage = (e) => {
      const frame = JSON.parse(e.data as string) as Frame;
      this.frames.push(frame);
      const i = this.#waiters.findIndex((w) => w.match(frame));
      if (i >= 0) this.#waiters.splice(i, 1)[0].resolve(frame);
    };
  }

  /** Open a WebSocket to `url` (ws://.../v1/ws) with `headers` on the upgrade. */
  static async open(url: string, headers: Record<string, string>): Promise<RpcSocket> {
    const socket = new WebSocket(url, { headers });
    const opened = Promise.withResolvers<void>();
    socket.onopen = () => opened.resolve();
    socket.onerror = (e) =>
      opened.reject(new Error(`websocket failed: ${(e as ErrorEvent).message}`));
    await opened.promise;
    return new RpcSocket(socket);
  }

  /** Send a raw text frame. */
  sendRaw(text: string): void {
    this.#socket.send(text);
  }

  /** Send a request; returns its id (a closed socket sends nothing). */
  send(method: string, params: unknown): number {
    const id = this.#nextId++;
    if (this.#gone) return id;
    this.#socket.send(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
    return id;
  }

  /**
   * The first frame (received before or after now) that `match` accepts; rejects once the
   * socket is closed without it.
   */
  wait(match: (f: Frame) => boolean): Promise<Frame> {
    const found = this.frames.find(match);
    if (found) return Promise.resolve(found);
    if (this.#gone) return Promise.reject(this.#gone);
    return new Promise((resolve, reject) => this.#waiters.push({ match, resolve, reject }));
  }

  /** The answer to request `id`. */
  answer(id: number): Promise<Frame> {
    return this.wait((f) => f.id === id && f.method === undefined);
  }

  /** Call and wait for the answer frame. */
  async call(method: string, params: unknown): Promise<Frame> {
    return await this.answer(this.send(method, params));
  }

  /** Frames received after the previous `drain` call. */
  drain(): Frame[] {
    const fresh = this.frames.slice(this.#seen);
    this.#seen = this.frames.length;
    return fresh;
  }

  /** Close (with `code` when given) and wait for the close. */
  close(code?: number): Promise<CloseEvent> {
    this.#socket.close(code);
    return this.closed;
  }
}

const encoder = new TextEncoder();

/** The server's WebSocket URL, as `/healthz` gives it to a caller with a credential (`auth`). */
export async function wsUrl(httpUrl: string, auth: Record<string, string>): Promise<string> {
  const res = await fetch(`${httpUrl}/healthz`, { headers: auth });
  const url = (await res.json()).websocket;
  if (typeof url !== "string") throw new Error("the server names no websocket URL");
  return url;
}

/** A WebSocket client frame (masked) holding `text`. */
export function clientFrame(text: string): Uint8Array {
  const payload = encoder.encode(text);
  const n = payload.length;
  const head = n < 126 ? [0x81, 0x80 | n] : n < 65536 ? [0x81, 0x80 | 126, n >> 8, n & 0xff] : [
    0x81,
    0x80 | 127,
    0,
    0,
    0,
    0,
    (n >>> 24) & 0xff,
    (n >> 16) & 0xff,
    (n >> 8) & 0xff,
    n & 0xff,
  ];
  const mask = crypto.getRandomValues(new Uint8Array(4));
  const out = new Uint8Array(head.length + 4 + n);
  out.set(head);
  out.set(mask, head.length);
  for (let i = 0; i < n; i++) out[head.length + 4 + i] = payload[i] ^ mask[i & 3];
  return out;
}

/** Sends the JSON-RPC request `id` calling `method` with `params` over a raw connection. */
export async function rawRequest(
  conn: Deno.Conn,
  id: number,
  method: string,
  params: unknown,
): Promise<void> {
  await conn.write(clientFrame(JSON.stringify({ jsonrpc: "2.0", id, method, params })));
}

/**
 * A raw upgrade of `GET /v1/ws` at `url` (ws://...) over TCP with `headers`: the connection and the response
 * head as text (status line and headers), with any bytes read past the head.
 */
export async function rawUpgrade(
  url: string,
  headers: Record<string, string>,
): Promise<{ conn: Deno.TcpConn; head: string; rest: Uint8Array }> {
  const { hostname, port } = new URL(url);
  const conn = await Deno.connect({ hostname, port: Number(port) });
  const lines = [
    "GET /v1/ws HTTP/1.1",
    `Host: ${hostname}:${port}`,
    "Upgrade: websocket",
    "Connection: Upgrade",
    "Sec-WebSocket-Version: 13",
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
    ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
  ];
  await conn.write(encoder.encode(lines.join("\r\n") + "\r\n\r\n"));
  let got = new Uint8Array(0);
  const buf = new Uint8Array(65536);
  for (;;) {
    const end = new TextDecoder("latin1").decode(got).indexOf("\r\n\r\n");
    if (end >= 0) {
      return {
        conn,
        head: new TextDecoder().decode(got.subarray(0, end)),
        rest: got.slice(end + 4),
      };
    }
    const n = await conn.read(buf);
    if (n === null) throw new Error("connection closed before the response head");
    const next = new Uint8Array(got.length + n);
    next.set(got);
    next.set(buf.subarray(0, n), got.length);
    got = next;
  }
}

/** A frame as the server sent it: its opcode and (unmasked) payload. */
export interface ServerFrame {
  op: number;
  payload: Uint8Array;
}

/** Reads server (unmasked) frames from a raw connection, after `rest`. */
export class FrameReader {
  #buf: Uint8Array;
  #conn: Deno.Conn;
  #chunk = new Uint8Array(1 << 20);

  constructor(conn: Deno.Conn, rest: Uint8Array) {
    this.#conn = conn;
    this.#buf = rest;
  }

  /** Whether `n` bytes are buffered, reading as needed; false once the connection ended. */
  async #fill(n: number): Promise<boolean> {
    while (this.#buf.length < n) {
      const got = await this.#conn.read(this.#chunk);
      if (got === null) return false;
      const next = new Uint8Array(this.#buf.length + got);
      next.set(this.#buf);
      next.set(this.#chunk.subarray(0, got), this.#buf.length);
      this.#buf = next;
    }
    return true;
  }

  /** The next frame of any opcode; undefined when the connection ended before a whole one. */
  async frame(): Promise<ServerFrame | undefined> {
    if (!await this.#fill(2)) return undefined;
    const op = this.#buf[0] & 0x0f;
    let len = this.#buf[1] & 0x7f;
    let at = 2;
    if (len === 126) {
      if (!await this.#fill(4)) return undefined;
      len = (this.#buf[2] << 8) | this.#buf[3];
      at = 4;
    } else if (len === 127) {
      if (!await this.#fill(10)) return undefined;
      len = Number(new DataView(this.#buf.buffer, this.#buf.byteOffset + 2, 8).getBigUint64(0));
      at = 10;
    }
    if (!await this.#fill(at + len)) return undefined;
    const payload = this.#buf.slice(at, at + len);
    this.#buf = this.#buf.subarray(at + len);
    return { op, payload };
  }

  /** The next text frame's payload (control frames are skipped). */
  async next(): Promise<string> {
    for (;;) {
      const frame = await this.frame();
      if (!frame) throw new Error("connection closed mid-frame");
      if (frame.op === 1) return new TextDecoder().decode(frame.payload);
    }
  }
}
