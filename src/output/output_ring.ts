/**
 * A session's recent output by byte offset: every byte the child wrote has an offset (its
 * position in all the output so far), and the newest bytes (1 MiB by default) are kept in a ring
 * so readers that resume (an SSE client's `Last-Event-ID`, `output?since=N`) get exactly the
 * bytes after the offset they hold, or learn how many were lost. Reading never takes anything
 * away, so it cannot disturb `exec_command`/`write_stdin` collection. It never holds more than
 * its capacity, and a read that starts after a loss starts on a UTF-8 character boundary.
 *
 * @module
 */

import { nextBoundary } from "./utf8.ts";

/** Default capacity: 1 MiB. */
export const RING_CAPACITY = 1024 * 1024;

/** What a read returns: `bytes` start at offset `from`; `lost` bytes before it are gone. */
export interface RingRead {
  from: number;
  bytes: Uint8Array;
  lost: number;
}

const INITIAL = 4096;

/**
 * The ring of recent output with offsets. Storage grows by doubling up to the capacity (until
 * then nothing has wrapped), so a session with little output holds little memory.
 */
export class OutputRing {
  #capacity: number;
  #ring = new Uint8Array(0);
  #end = 0;

  constructor(capacity = RING_CAPACITY) {
    this.#capacity = capacity;
  }

  /** The offset after the last byte written. */
  get end(): number {
    return this.#end;
  }

  /** The offset of the oldest byte held. */
  get start(): number {
    return Math.max(0, this.#end - this.#capacity);
  }

  /** Append a copy of `bytes`. */
  push(bytes: Uint8Array): void {
    const cap = this.#capacity;
    this.#grow(Math.min(cap, this.#end + bytes.length));
    const src = bytes.length > cap ? bytes.subarray(bytes.length - cap) : bytes;
    const skipped = bytes.length - src.length;
    const at = (this.#end + skipped) % cap;
    const first = Math.min(src.length, cap - at);
    if (first === src.length) this.#ring.set(src, at);
    else {
      this.#ring.set(src.subarray(0, first), at);
      this.#ring.set(src.subarray(first), 0);
    }
    this.#end += bytes.length;
  }

  /**
   * Up to `max` bytes from offset `from` (which must not be past `end`). When `from` is older
   * than what is held, the read starts at the first character boundary held and `lost` counts
   * the bytes skipped.
   */
  read(from: number, max = Infinity): RingRead {
    if (from > this.#end) throw new RangeError(`offset ${from} is past the end ${this.#end}`);
    let start = Math.max(from, this.start);
    let bytes = this.#copy(start, Math.min(this.#end, start + max));
    if (start > from) {
      const cut = nextBoundary(bytes, 0);
      bytes = bytes.subarray(cut);
      start += cut;
    }
    return { from: start, bytes, lost: start - from };
  }

  #grow(need: number): void {
    if (need <= this.#ring.length) return;
    let size = Math.max(INITIAL, this.#ring.length);
    while (size < need) size *= 2;
    const grown = new Uint8Array(Math.min(size, this.#capacity));
    grown.set(this.#ring.subarray(0, this.#end));
    this.#ring = grown;
  }

  #copy(from: number, to: number): Uint8Array {
    const cap = this.#capacity;
    const out = new Uint8Array(to - from);
    const at = from % cap;
    const first = Math.min(out.length, cap - at);
    out.set(this.#ring.subarray(at, at + first));
    if (first < out.length) out.set(this.#ring.subarray(0, out.length - first), first);
    return out;
  }
}
