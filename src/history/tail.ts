/**
 * The last bytes of a command's output, kept for its history row: a fixed ring that the output
 * is copied into as it arrives, so a flood allocates nothing per read. The snapshot starts on a
 * UTF-8 character boundary. It must never grow past its capacity, whatever is pushed.
 *
 * @module
 */

import { nextBoundary } from "../output/utf8.ts";

/** How much of each command's output the history keeps: 64 KiB. */
export const TAIL_BYTES = 64 * 1024;

/** The newest `capacity` bytes of a stream, and how many bytes went through it. */
export class OutputTail {
  #ring: Uint8Array;
  /** Where the next byte goes. */
  #at = 0;
  /** Bytes pushed in all. */
  total = 0;

  constructor(capacity = TAIL_BYTES) {
    this.#ring = new Uint8Array(capacity);
  }

  /** Append `bytes`, overwriting the oldest once full. */
  push(bytes: Uint8Array): void {
    const cap = this.#ring.length;
    this.total += bytes.length;
    if (bytes.length < cap - this.#at) {
      // The usual chunk: it fits before the end of the ring, one copy.
      this.#ring.set(bytes, this.#at);
      this.#at += bytes.length;
      return;
    }
    const src = bytes.length > cap ? bytes.subarray(bytes.length - cap) : bytes;
    const first = Math.min(src.length, cap - this.#at);
    this.#ring.set(src.subarray(0, first), this.#at);
    this.#ring.set(src.subarray(first), 0);
    this.#at = (this.#at + src.length) % cap;
  }

  /** The kept bytes in order, starting at the first whole character. */
  snapshot(): Uint8Array {
    const cap = this.#ring.length;
    if (this.total < cap) return this.#ring.slice(0, this.total);
    const out = new Uint8Array(cap);
    out.set(this.#ring.subarray(this.#at), 0);
    out.set(this.#ring.subarray(0, this.#at), cap - this.#at);
    return out.subarray(nextBoundary(out, 0));
  }
}
