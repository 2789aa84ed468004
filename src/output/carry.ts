/**
 * Bytes that arrive in pieces, cut after their last complete UTF-8 character: the trailing
 * partial character is carried into the next piece, so a character split across reads is never
 * decoded as replacement characters. It must never drop or reorder a byte.
 *
 * @module
 */

import { concat } from "./head_tail.ts";
import { completeLength } from "./utf8.ts";

const NO_BYTES = new Uint8Array(0);

/** The partial character carried between pieces of one byte stream. */
export class CharCarry {
  #rest = NO_BYTES;

  /** The bytes carried from the last piece (an incomplete character, or nothing). */
  get rest(): Uint8Array {
    return this.#rest;
  }

  /**
   * What was carried plus `bytes`, up to the last complete character; the rest is carried.
   * With `final` (the stream has ended) nothing is carried and everything is returned.
   */
  complete(bytes: Uint8Array, final = false): Uint8Array {
    const data = this.#rest.length === 0
      ? bytes
      : concat([this.#rest, bytes], this.#rest.length + bytes.length);
    const end = final ? data.length : completeLength(data);
    this.#rest = end === data.length ? NO_BYTES : data.slice(end);
    return end === data.length ? data : data.subarray(0, end);
  }

  /** Forget what is carried (the bytes before it were dropped). */
  drop(): void {
    this.#rest = NO_BYTES;
  }
}
