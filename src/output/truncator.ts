/**
 * Where truncation runs: small outputs inline (a thread hop would cost more than the work),
 * large ones on the tokenizer worker, in order. It must never block the main thread on a large
 * output, and never lose one: if the worker dies, its pending jobs are fitted inline.
 *
 * @module
 */

import { startWorker } from "../io/descriptor_reserve.ts";
import { type Truncated, truncateToTokens } from "./truncate.ts";
import type { TruncateJob } from "./truncate_worker.ts";

/** Outputs up to this many characters are fitted on the calling thread. */
export const INLINE_CHARS = 16 * 1024;

interface Pending {
  job: TruncateJob;
  resolve(r: Truncated): void;
}

/** Fits outputs to token budgets, off the main thread when they are large. */
export class Truncator {
  #worker?: Worker;
  #pending = new Map<number, Pending>();
  #nextId = 1;

  constructor() {
    this.#start();
  }

  /** Fit `text` into `maxTokens` tokens. */
  fit(text: string, maxTokens: number): Promise<Truncated> {
    if (text.length <= INLINE_CHARS) return Promise.resolve(truncateToTokens(text, maxTokens));
    const job = { id: this.#nextId++, text, maxTokens };
    const { promise, resolve } = Promise.withResolvers<Truncated>();
    let worker: Worker;
    try {
      worker = this.#start();
    } catch {
      // No descriptors for a new worker (see startWorker): fitted here instead.
      return Promise.resolve(truncateToTokens(text, maxTokens));
    }
    this.#pending.set(job.id, { job, resolve });
    worker.postMessage(job);
    return promise;
  }

  /** Stop the worker. */
  close(): void {
    this.#worker?.terminate();
    this.#worker = undefined;
  }

  #start(): Worker {
    if (this.#worker) return this.#worker;
    const worker = startWorker(new URL("./truncate_worker.ts", import.meta.url));
    worker.onmessage = (e: MessageEvent<{ id: number; result: Truncated }>) => {
      const pending = this.#pending.get(e.data.id);
      this.#pending.delete(e.data.id);
      pending?.resolve(e.data.result);
    };
    worker.onerror = (e) => {
      e.preventDefault();
      console.error("uexec: tokenizer worker failed, fitting inline:", e.message);
      this.#worker = undefined;
      const pending = [...this.#pending.values()];
      this.#pending.clear();
      for (const { job, resolve } of pending) resolve(truncateToTokens(job.text, job.maxTokens));
    };
    this.#worker = worker;
    return worker;
  }
}
