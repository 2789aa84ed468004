/**
 * The server end of one WebSocket (RFC 6455) over an upgraded connection: it reads client
 * frames and hands whole text or binary messages up, answers pings and the closing handshake,
 * and writes text frames in order, counting what is queued (`bufferedAmount`) and telling
 * listeners each time a write drained some of it.
 *
 * It is ours rather than Deno's (`Deno.upgradeWebSocket` needs `Deno.serve` to own the
 * connection, and Deno's reader accepts unmasked client frames and reads a frame whole, up to
 * 64 MiB, before anything can check its size). Here an unmasked frame, a reserved bit or
 * opcode, a bad close frame or a broken fragment sequence is answered with a close frame 1002;
 * text that is not UTF-8, 1007; a frame whose length (from its header, with the fragments
 * before it) exceeds the message bound, 1009 before its payload is read. After a close frame it
 * sends nothing, half-closes the connection and reads (discarding) until the client closes, at
 * most CLOSE_LINGER_MS, so the close frame is not lost to a reset. While more than
 * READ_PAUSE_QUEUED waits to be written to the client, it reads nothing from it.
 *
 * It must never buffer more of a message than the bound, never act on a frame after a protocol
 * error, and never send after its close frame.
 *
 * @module
 */

/** The readyState values, as WebSocket numbers them. */
export const OPEN = 1;
export const CLOSING = 2;
export const CLOSED = 3;

/** What the socket hands up: a whole message. */
export interface MessageEvent {
  data: string | Uint8Array;
}

/** How the connection ended: the close code (1006 when no close frame came) and reason. */
export interface CloseEvent {
  code: number;
  reason: string;
}

/** How long a closing socket waits for the client to close its end. */
const CLOSE_LINGER_MS = 1000;
/**
 * Reading pauses while more than this is queued for the client: one that sends requests and
 * reads none of their answers cannot make the server hold more (subscriptions stop at 4 MiB of
 * their own, see subscription.ts).
 */
const READ_PAUSE_QUEUED = 8 * 1024 * 1024;
/** Bytes read from the connection at once. */
const READ_CHUNK = 64 * 1024;
/** Queued frames are joined into one write until they hold this many bytes. */
const WRITE_BATCH = 64 * 1024;

const encoder = new TextEncoder();
const utf8 = new TextDecoder("utf-8", { fatal: true });

/** A frame the protocol does not allow: the close code and reason that answer it. */
class FrameError extends Error {
  constructor(readonly code: number, message: string) {
    super(message);
  }
}

/** A server-side WebSocket on `conn`, after the 101 response; `rest` was read past the head. */
export class FrameSocket {
  readyState = OPEN;
  onmessage?: (event: MessageEvent) => void;
  onclose?: (event: CloseEvent) => void;
  readonly #conn: Deno.Conn;
  readonly #maxMessage: number;
  #pending: Uint8Array;
  readonly #chunk = new Uint8Array(READ_CHUNK);
  readonly #queue: Uint8Array[] = [];
  #queued = 0;
  #writing = false;
  readonly #drainListeners = new Set<() => void>();
  readonly #closeListeners = new Set<(event: CloseEvent) => void>();
  /** Wakes the read loop paused for a full queue (see READ_PAUSE_QUEUED). */
  #resume?: () => void;
  /** The last pong queued (see #pong). */
  #lastPong?: Uint8Array;
  /** Set once a close frame went into the queue. */
  #closeSent = false;
  #ended = false;
  #closeEvent: CloseEvent = { code: 1006, reason: "" };
  readonly #endedPromise = Promise.withResolvers<void>();
  /** Settles when the client's end is read to its close. */
  readonly #closed = Promise.withResolvers<void>();

  constructor(conn: Deno.Conn, rest: Uint8Array, maxMessage: number) {
    this.#conn = conn;
    this.#pending = rest;
    this.#maxMessage = maxMessage;
    this.#readLoop().catch(() => this.#end());
  }

  /** Bytes queued and not yet written to the connection. */
  get bufferedAmount(): number {
    return this.#queued;
  }

  /** Call `listener` after each completed write (bufferedAmount went down); returns its removal. */
  onDrain(listener: () => void): () => void {
    this.#drainListeners.add(listener);
    return () => this.#drainListeners.delete(listener);
  }

  /** Call `listener` once the connection is gone. */
  addCloseListener(listener: (event: CloseEvent) => void): void {
    this.#closeListeners.add(listener);
  }

  /** Settles once the connection is gone (at most CLOSE_LINGER_MS after a close frame). */
  get ended(): Promise<void> {
    return this.#endedPromise.promise;
  }

  /** Send one text message (nothing once closing). */
  send(text: string): void {
    if (this.readyState !== OPEN) return;
    this.#enqueue(frame(0x1, encoder.encode(text)));
  }

  /** Start the closing handshake with `code` and `reason` (at most 123 bytes of UTF-8). */
  close(code = 1000, reason = ""): void {
    if (this.#closeSent || this.#ended) return;
    this.#sendClose(code, reason);
  }

  #sendClose(code: number, reason: string): void {
    this.#closeSent = true;
    this.readyState = CLOSING;
    // 1005 (the client's close had no code) is never sent: the answer has none either.
    if (code === 1005) return this.#enqueue(frame(0x8, new Uint8Array(0)));
    const text = encoder.encode(reason).subarray(0, 123);
    const payload = new Uint8Array(2 + text.length);
    new DataView(payload.buffer).setUint16(0, code);
    payload.set(text, 2);
    this.#enqueue(frame(0x8, payload));
  }

  /**
   * Answer a ping. A pong still queued (not yet being written) is replaced by this one, as RFC
   * 6455 5.5.3 allows: a client that pings and never reads gets no unbounded queue of pongs.
   */
  #pong(payload: Uint8Array): void {
    const pong = frame(0xa, payload);
    // The queue holds only frames not yet being written (see #writeLoop).
    const at = this.#lastPong ? this.#queue.indexOf(this.#lastPong) : -1;
    if (at >= 0) {
      this.#queued += pong.length - this.#queue[at].length;
      this.#queue[at] = pong;
    } else this.#enqueue(pong);
    this.#lastPong = pong;
  }

  #enqueue(bytes: Uint8Array): void {
    this.#queue.push(bytes);
    this.#queued += bytes.length;
    if (!this.#writing) this.#writeLoop();
  }

  async #writeLoop(): Promise<void> {
    this.#writing = true;
    try {
      while (this.#queue.length > 0) {
        // The frames queued so far go out in one write, up to about WRITE_BATCH bytes (an
        // answer and the output queued beside it cost one system call, not one each; a long
        // queue is not copied whole).
        let count = 0;
        let size = 0;
        while (count < this.#queue.length && (count === 0 || size < WRITE_BATCH)) {
          size += this.#queue[count++].length;
        }
        const next = join(this.#queue.splice(0, count), size);
        for (let off = 0; off < next.length;) off += await this.#conn.write(next.subarray(off));
        this.#queued -= next.length;
        if (this.#queued <= READ_PAUSE_QUEUED) this.#resume?.();
        for (const listener of this.#drainListeners) listener();
      }
      if (this.#closeSent) await this.#linger();
    } catch {
      this.#end();
    } finally {
      this.#writing = false;
    }
  }

  /** After the close frame: half-close, wait for the client's end (bounded), then close. */
  async #linger(): Promise<void> {
    const timer = setTimeout(() => this.#end(), CLOSE_LINGER_MS);
    try {
      await this.#conn.closeWrite();
    } catch { /* the client is gone */ }
    await this.#closed.promise;
    clearTimeout(timer);
    this.#end();
  }

  /** Read at least `n` pending bytes; false at the end of the connection. */
  async #fill(n: number): Promise<boolean> {
    while (this.#pending.length < n) {
      const got = await this.#conn.read(this.#chunk);
      if (got === null) return false;
      const next = new Uint8Array(this.#pending.length + got);
      next.set(this.#pending);
      next.set(this.#chunk.subarray(0, got), this.#pending.length);
      this.#pending = next;
    }
    return true;
  }

  /** The next `n` bytes, read straight into a buffer of their own; null at the end. */
  async #readExact(n: number): Promise<Uint8Array | null> {
    const out = new Uint8Array(n);
    const have = Math.min(n, this.#pending.length);
    out.set(this.#pending.subarray(0, have));
    this.#pending = this.#pending.subarray(have);
    for (let off = have; off < n;) {
      const got = await this.#conn.read(out.subarray(off));
      if (got === null) return null;
      off += got;
    }
    return out;
  }

  #take(n: number): Uint8Array {
    const taken = this.#pending.subarray(0, n);
    this.#pending = this.#pending.subarray(n);
    return taken;
  }

  async #readLoop(): Promise<void> {
    /** The fragments of the message being read, and its opcode. */
    let fragments: Uint8Array[] = [];
    let size = 0;
    let opcode = 0;
    try {
      for (;;) {
        while (this.#queued > READ_PAUSE_QUEUED && !this.#ended) {
          const resumed = Promise.withResolvers<void>();
          this.#resume = resumed.resolve;
          await resumed.promise;
          this.#resume = undefined;
        }
        if (!await this.#fill(2)) break;
        const [b0, b1] = this.#take(2);
        const fin = (b0 & 0x80) !== 0;
        const op = b0 & 0x0f;
        if (b0 & 0x70) throw new FrameError(1002, "reserved bits set");
        if (!(b1 & 0x80)) throw new FrameError(1002, "client frames must be masked");
        let length = b1 & 0x7f;
        if (length === 126) {
          if (!await this.#fill(2)) break;
          const b = this.#take(2);
          length = (b[0] << 8) | b[1];
        } else if (length === 127) {
          if (!await this.#fill(8)) break;
          const big = new DataView(this.#take(8).slice().buffer).getBigUint64(0);
          length = big > BigInt(Number.MAX_SAFE_INTEGER) ? Infinity : Number(big);
        }
        if (op >= 0x8) {
          if (op > 0xa) throw new FrameError(1002, `reserved opcode ${op}`);
          if (!fin || length > 125) throw new FrameError(1002, "bad control frame");
        } else if (op === 0 ? opcode === 0 : op > 2 || opcode !== 0) {
          throw new FrameError(1002, op > 2 ? `reserved opcode ${op}` : "bad fragment sequence");
        } else if (size + length > this.#maxMessage) {
          throw new FrameError(1009, `a message may hold at most ${this.#maxMessage} bytes`);
        }
        if (!await this.#fill(4)) break;
        const mask = this.#take(4).slice();
        const payload = await this.#readExact(length);
        if (!payload) break;
        for (let i = 0; i < payload.length; i++) payload[i] ^= mask[i & 3];
        if (op === 0x8) {
          this.#closeEvent = closeFrame(payload);
          if (!this.#closeSent) this.#sendClose(this.#closeEvent.code, "");
          break;
        }
        if (op === 0x9) {
          if (!this.#closeSent) this.#pong(payload);
          continue;
        }
        if (op === 0xa) continue;
        if (op !== 0) opcode = op;
        fragments.push(payload);
        size += payload.length;
        if (!fin) continue;
        const message = join(fragments, size);
        const text = opcode === 0x1;
        fragments = [];
        size = 0;
        opcode = 0;
        if (this.#closeSent) continue;
        let data: string | Uint8Array = message;
        if (text) {
          try {
            data = utf8.decode(message);
          } catch {
            throw new FrameError(1007, "a text message must be UTF-8");
          }
        }
        this.onmessage?.({ data });
      }
    } catch (err) {
      if (!(err instanceof FrameError)) throw err;
      this.#closeEvent = { code: err.code, reason: err.message };
      if (!this.#closeSent) this.#sendClose(err.code, err.message);
    }
    // The client left without a close frame: nothing more can reach it.
    if (!this.#closeSent) return this.#end();
    // Read nothing more into memory: discard until the client closes (see #linger).
    while (await this.#conn.read(this.#chunk) !== null) { /* discard */ }
    this.#closed.resolve();
    if (!this.#writing) this.#end();
  }

  /** The connection is gone: close it and tell the listeners once. */
  #end(): void {
    this.#closed.resolve();
    if (this.#ended) return;
    this.#ended = true;
    this.readyState = CLOSED;
    try {
      this.#conn.close();
    } catch { /* closed */ }
    this.#queue.length = 0;
    this.#queued = 0;
    this.#resume?.();
    const event = this.#closeEvent;
    this.onclose?.(event);
    for (const listener of this.#closeListeners) listener(event);
    this.#endedPromise.resolve();
  }
}

/** A server frame (unmasked, final) with `opcode` and `payload`. */
function frame(opcode: number, payload: Uint8Array): Uint8Array {
  const n = payload.length;
  const head = n < 126 ? 2 : n < 65536 ? 4 : 10;
  const out = new Uint8Array(head + n);
  out[0] = 0x80 | opcode;
  const view = new DataView(out.buffer);
  if (n < 126) out[1] = n;
  else if (n < 65536) {
    out[1] = 126;
    view.setUint16(2, n);
  } else {
    out[1] = 127;
    view.setBigUint64(2, BigInt(n));
  }
  out.set(payload, head);
  return out;
}

function join(parts: Uint8Array[], size: number): Uint8Array {
  if (parts.length === 1) return parts[0];
  const out = new Uint8Array(size);
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

/** The code and reason of a client's close frame; a malformed one is a FrameError. */
function closeFrame(payload: Uint8Array): CloseEvent {
  if (payload.length === 0) return { code: 1005, reason: "" };
  if (payload.length === 1) throw new FrameError(1002, "a close frame's code needs two bytes");
  const code = (payload[0] << 8) | payload[1];
  const valid = (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) ||
    (code >= 3000 && code <= 4999);
  if (!valid) throw new FrameError(1002, `close code ${code} may not be sent`);
  try {
    return { code, reason: utf8.decode(payload.subarray(2)) };
  } catch {
    throw new FrameError(1007, "a close reason must be UTF-8");
  }
}
