/**
 * Text written to a stream in order, one write at a time. A batch starts with the first text
 * written while nothing is in flight and goes out as one write when its wait ends: at the end
 * of the event-loop turn (`setImmediate`, which runs once the turn's I/O and timer callbacks
 * have, so that a stream that writes at once still gets whole batches under load), or, with a
 * `delayMs`, that many milliseconds later, so that a stream whose every write wakes a reader
 * (a pipe, a terminal) is written a few times a second however many lines arrive. The wait
 * ends early when the batch reaches `maxChars`, and on `flush`. What arrives while a write is
 * in flight waits for it and then goes out as one write. `flush` resolves once everything
 * written so far is out (or cannot be written); `takeQueued` hands over what has not started
 * out, for a process about to die, whose timers will never fire. Text may be given as a
 * function that makes it, called only when its batch goes out (a log line is then formatted off
 * the path of the request it logs).
 *
 * It must never throw at a caller, never reorder text, never have two writes in flight, and
 * never hold more than about `maxChars` waiting on a timer. A stream that fails (a closed pipe)
 * drops what is queued and everything written after.
 *
 * @module
 */

import { setImmediate } from "node:timers";

const encoder = new TextEncoder();

/** Text made when its batch goes out; it must not throw. */
export type DeferredText = () => string;

/** What a deferred text counts for against `maxChars` before it is made (a log line's size). */
const DEFERRED_CHARS = 200;

/** Writes `bytes` (possibly only part of them); resolves to how many it wrote. */
export type WriteBytes = (bytes: Uint8Array) => Promise<number>;

/** How long a batch may wait for more text. */
export interface BatchLimits {
  /** How long the first text of a batch waits for more; 0 (the default): the turn's end. */
  delayMs?: number;
  /** A batch this many characters long goes out at the turn's end however long `delayMs` is. */
  maxChars?: number;
}

/** The default `maxChars`. */
const MAX_CHARS = 64 * 1024;

/** Text batched onto a stream. */
export class BatchedWriter {
  readonly #write: WriteBytes;
  readonly #delayMs: number;
  readonly #maxChars: number;
  #queue: (string | DeferredText)[] = [];
  #chars = 0;
  #draining?: Promise<void>;
  /** Ends the current batch's wait, while it waits. */
  #hurry?: () => void;
  #failed = false;

  constructor(write: WriteBytes, limits: BatchLimits = {}) {
    this.#write = write;
    this.#delayMs = limits.delayMs ?? 0;
    this.#maxChars = limits.maxChars ?? MAX_CHARS;
  }

  /** Queue `text` (or what makes it); it goes out after everything written before it. */
  write(text: string | DeferredText): void {
    if (this.#failed) return;
    this.#queue.push(text);
    this.#chars += typeof text === "string" ? text.length : DEFERRED_CHARS;
    if (this.#chars >= this.#maxChars) this.#hurry?.();
    this.#draining ??= this.#drain();
  }

  /** Resolves once everything written so far is out, or dropped because the stream failed. */
  flush(): Promise<void> {
    this.#hurry?.();
    return this.#draining ?? Promise.resolve();
  }

  /**
   * What is queued and not yet started out, removed from the queue (a write in flight still
   * completes): for whoever must write it synchronously now.
   */
  takeQueued(): string {
    const text = this.#queue.map((t) => typeof t === "string" ? t : t()).join("");
    this.#queue = [];
    this.#chars = 0;
    return text;
  }

  /** Until the batch's wait ends: the turn's end, then, with a delay, the delay or a hurry. */
  async #wait(): Promise<void> {
    if (this.#delayMs > 0 && this.#chars < this.#maxChars) {
      const { promise, resolve } = Promise.withResolvers<void>();
      const timer = setTimeout(resolve, this.#delayMs);
      this.#hurry = () => {
        clearTimeout(timer);
        resolve();
      };
      await promise;
      this.#hurry = undefined;
    }
    // Let the writes of this turn of the event loop join the batch (a write that completes
    // at once would otherwise go out per line under load).
    await new Promise((resolve) => setImmediate(resolve));
  }

  async #drain(): Promise<void> {
    await this.#wait();
    while (this.#queue.length > 0) {
      const bytes = encoder.encode(this.takeQueued());
      try {
        for (let off = 0; off < bytes.length;) {
          const n = await this.#write(bytes.subarray(off));
          if (!(n > 0)) throw new Error("the stream took nothing");
          off += n;
        }
      } catch {
        this.#failed = true;
        this.takeQueued();
      }
    }
    this.#draining = undefined;
  }
}
