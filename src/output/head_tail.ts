/**
 * A bounded byte buffer for output that waits to be collected: it keeps the first half of its
 * capacity and the newest bytes, drops the middle, and counts what it dropped. Cut points fall
 * on UTF-8 character boundaries. It never grows past its capacity, whatever is pushed.
 *
 * @module
 */

import { nextBoundary, previousBoundary } from "./utf8.ts";

/** What a drain returns: `head` then `tail`, with `omitted` bytes dropped between them. */
export interface Drained {
  head: Uint8Array;
  tail: Uint8Array;
  omitted: number;
}

/** Default capacity: 1 MiB. */
export const DEFAULT_CAPACITY = 1024 * 1024;

/** The head+tail buffer. */
export class HeadTailBuffer {
  #headCap: number;
  #tailCap: number;
  #head: Uint8Array[] = [];
  #headLen = 0;
  #headFull = false;
  #tail: Uint8Array[] = [];
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

  /** Append bytes. */
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
    this.#tail.push(rest);
    this.#tailLen += rest.length;
    this.#trimTail();
  }

  /** Everything held, without taking it. */
  peek(): Drained {
    return {
      head: concat(this.#head, this.#headLen),
      tail: concat(this.#tail, this.#tailLen),
      omitted: this.#omitted,
    };
  }

  /** Take everything held and reset. */
  drain(): Drained {
    const out = this.peek();
    this.#head = [];
    this.#tail = [];
    this.#headLen = this.#tailLen = this.#omitted = 0;
    this.#headFull = false;
    return out;
  }

  #appendHead(bytes: Uint8Array): void {
    if (bytes.length === 0) return;
    this.#head.push(bytes);
    this.#headLen += bytes.length;
  }

  #trimTail(): void {
    let excess = this.#tailLen - this.#tailCap;
    while (excess > 0) {
      const first = this.#tail[0];
      if (first.length <= excess) {
        this.#tail.shift();
        this.#tailLen -= first.length;
        this.#omitted += first.length;
        excess -= first.length;
        continue;
      }
      const cut = nextBoundary(first, excess);
      this.#tail[0] = first.subarray(cut);
      this.#tailLen -= cut;
      this.#omitted += cut;
      excess = 0;
    }
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
