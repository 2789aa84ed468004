/**
 * Text written to a stream in order, one write at a time: what one turn of the event loop writes
 * goes out as one write at its end (`setImmediate`, which runs once the turn's I/O and timer
 * callbacks have, so that a stream that writes at once still gets whole batches under load;
 * a zero-delay timer would wake the loop again about a millisecond later, once per batch),
 * and what arrives while a write is in flight waits for it and then goes out as one write. No
 * delay beyond that turn. `flush` resolves once everything written so far is out (or cannot be
 * written).
 *
 * It must never throw at a caller, never reorder text, and never have two writes in flight. A
 * stream that fails (a closed pipe) drops what is queued and everything written after.
 *
 * @module
 */

import { setImmediate } from "node:timers";

const encoder = new TextEncoder();

/** Writes `bytes` (possibly only part of them); resolves to how many it wrote. */
export type WriteBytes = (bytes: Uint8Array) => Promise<number>;

/** Text batched onto a stream. */
export class BatchedWriter {
  readonly #write: WriteBytes;
  #queue: string[] = [];
  #draining?: Promise<void>;
  #failed = false;

  constructor(write: WriteBytes) {
    this.#write = write;
  }

  /** Queue `text`; it goes out after everything written before it. */
  write(text: string): void {
    if (this.#failed) return;
    this.#queue.push(text);
    this.#draining ??= this.#drain();
  }

  /** Resolves once everything written so far is out, or dropped because the stream failed. */
  flush(): Promise<void> {
    return this.#draining ?? Promise.resolve();
  }

  async #drain(): Promise<void> {
    // Let the writes of this turn of the event loop join the first batch (a write that completes
    // at once would otherwise go out per line under load).
    await new Promise((resolve) => setImmediate(resolve));
    while (this.#queue.length > 0) {
      const bytes = encoder.encode(this.#queue.join(""));
      this.#queue = [];
      try {
        for (let off = 0; off < bytes.length;) {
          const n = await this.#write(bytes.subarray(off));
          if (!(n > 0)) throw new Error("the stream took nothing");
          off += n;
        }
      } catch {
        this.#failed = true;
        this.#queue = [];
      }
    }
    this.#draining = undefined;
  }
}
