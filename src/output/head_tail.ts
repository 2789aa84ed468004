/**
 * A bounded byte buffer for output that waits to be collected: it keeps the first half of its
 * capacity and the newest bytes, drops the middle, and counts what it dropped. Bytes are copied
 * into storage it owns (a head that grows by doubling, a ring for the tail allocated only once
 * the head is full), so a flood of output allocates nothing per read. Cut points fall on UTF-8
 * character boundaries. It never grows past its capacity, whatever is pushed.
 *
 * @module
 */

import { completeLength, nextBoundary, previousBoundary } from "./utf8.ts";

/** What a drain returns: `head` then `tail`, with `omitted` bytes dropped between them. */
export interface Drained {
  head: Uint8Array;
  tail: Uint8Array;
  omitted: number;
}

/** Default capacity: 1 MiB. */
export const DEFAULT_CAPACITY = 1024 * 1024;

const INITIAL_HEAD = 4096;
const EMPTY = new Uint8Array(0);

/** The head+tail buffer. */
export class HeadTailBuffer {
  #headCap: number;
  #tailCap: number;
  #head: Uint8Array = EMPTY;
  #headLen = 0;
  #headFull = false;
  #ring: Uint8Array = EMPTY;
  /** Index of the oldest tail byte in the ring. */
  #ringStart = 0;
  #tailLen = 0;
  #omitted = 0;

  constructor(capacity = DEFAULT_CAPACITY) {
    this.#headCap = Math.floor(capacity / 2);
    this.#tailCap = capacity - this.#headCap;
  }

  /** Bytes held. */
  get size(): number {
    return this.#headLen + this.#tailLen;
  }

  /** Bytes dropped since the last drain. */
  get omitted(): number {
    return this.#omitted;
  }

  /** Append a copy of `bytes`; the caller may reuse `bytes` afterwards. */
  push(bytes: Uint8Array): void {
    let rest = bytes;
    if (!this.#headFull) {
      const room = this.#headCap - this.#headLen;
      if (rest.length <= room) {
        this.#appendHead(rest);
        return;
      }
      const cut = previousBoundary(rest, room);
      this.#appendHead(rest.subarray(0, cut));
      this.#headFull = true;
      rest = rest.subarray(cut);
    }
    this.#appendTail(rest);
  }

  /**
   * Everything held, as copies, without taking it. When bytes were dropped, both cuts fall on
   * character boundaries: a character the head's end or the tail's start splits counts as
   * omitted.
   */
  peek(): Drained {
    const tail = this.#linearTail();
    const cut = this.#omitted > 0 ? nextBoundary(tail, 0) : 0;
    const headEnd = this.#omitted > 0
      ? completeLength(this.#head.subarray(0, this.#headLen))
      : this.#headLen;
    return {
      head: this.#head.slice(0, headEnd),
      tail: tail.subarray(cut),
      omitted: this.#omitted + cut + this.#headLen - headEnd,
    };
  }

  /**
   * Take everything held and reset. Large storage is released, to be allocated again on demand;
   * a small head is kept for the next output, which is the common case of an interactive session.
   */
  drain(): Drained {
    const out = this.peek();
    if (this.#head.length > INITIAL_HEAD) this.#head = EMPTY;
    this.#ring = EMPTY;
    this.#headLen =
      this.#tailLen =
      this.#ringStart =
      this.#omitted =
        0;
    this.#headFull = false;
    return out;
  }

  #appendHead(bytes: Uint8Array): void {
    const need = this.#headLen + bytes.length;
    if (need > this.#head.length) {
      let size = Math.max(INITIAL_HEAD, this.#head.length);
      while (size < need) size *= 2;
      const grown = new Uint8Array(Math.min(size, this.#headCap));
      grown.set(this.#head.subarray(0, this.#headLen));
      this.#head = grown;
    }
    this.#head.set(bytes, this.#headLen);
    this.#headLen = need;
  }

  #appendTail(bytes: Uint8Array): void {
    if (this.#ring.length === 0) this.#ring = new Uint8Array(this.#tailCap);
    const cap = this.#tailCap;
    let src = bytes;
    if (src.length >= cap) {
      this.#omitted += this.#tailLen + src.length - cap;
      src = src.subarray(src.length - cap);
      this.#ringStart = 0;
      this.#tailLen = 0;
    }
    const overflow = this.#tailLen + src.length - cap;
    if (overflow > 0) {
      this.#ringStart = (this.#ringStart + overflow) % cap;
      this.#tailLen -= overflow;
      this.#omitted += overflow;
    }
    const at = (this.#ringStart + this.#tailLen) % cap;
    const first = Math.min(src.length, cap - at);
    this.#ring.set(src.subarray(0, first), at);
    if (first < src.length) this.#ring.set(src.subarray(first), 0);
    this.#tailLen += src.length;
  }

  #linearTail(): Uint8Array {
    if (this.#tailLen === 0) return EMPTY;
    const out = new Uint8Array(this.#tailLen);
    const first = Math.min(this.#tailLen, this.#tailCap - this.#ringStart);
    out.set(this.#ring.subarray(this.#ringStart, this.#ringStart + first));
    if (first < this.#tailLen) out.set(this.#ring.subarray(0, this.#tailLen - first), first);
    return out;
  }
}

/** Join chunks into one array of `length` bytes. */
export function concat(chunks: Uint8Array[], length: number): Uint8Array {
  if (chunks.length === 1) return chunks[0];
  const out = new Uint8Array(length);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}
