/**
 * The history writer: hands batches of rows to a worker thread that commits them (see
 * writer_worker.ts), so no SQLite commit or WAL checkpoint ever runs on the server's event
 * loop. Each batch settles once committed, or with the error that stopped it.
 *
 * It must never lose track of a batch: a batch the worker cannot write (or a worker that died)
 * rejects, so the caller can keep it for later.
 *
 * @module
 */

import type { ApprovalRow, CommandRow, Retention } from "./store.ts";

/** A message to the writer worker. */
export type WriterRequest =
  | { seq: number; type: "open"; path: string; retention: Retention }
  | { seq: number; type: "write"; commands: CommandRow[]; approvals: ApprovalRow[] }
  | { seq: number; type: "close" };

/** The worker's answer to one request. */
export interface WriterReply {
  seq: number;
  error?: string;
}

/** A distributive Omit, keeping each request kind's own fields. */
type Request = WriterRequest extends infer R ? R extends unknown ? Omit<R, "seq"> : never
  : never;

/** Writes history batches on a worker thread. */
export class HistoryWriter {
  #worker: Worker;
  #seq = 0;
  #waiting = new Map<number, PromiseWithResolvers<void>>();
  #dead?: string;

  /** Start the worker and open `path` there (the schema must exist already). */
  constructor(path: string, retention: Retention) {
    this.#worker = new Worker(new URL("./writer_worker.ts", import.meta.url), { type: "module" });
    this.#worker.onmessage = (event: MessageEvent<WriterReply>) => {
      const { seq, error } = event.data;
      const waiting = this.#waiting.get(seq);
      this.#waiting.delete(seq);
      if (error === undefined) waiting?.resolve();
      else waiting?.reject(new Error(error));
    };
    this.#worker.onerror = (event) => {
      event.preventDefault();
      this.#dead = `history writer failed: ${event.message}`;
      for (const waiting of this.#waiting.values()) waiting.reject(new Error(this.#dead));
      this.#waiting.clear();
    };
    this.#send({ type: "open", path, retention }).catch(() => {
      // Reported by the first write, which fails the same way.
    });
  }

  /** Commit `commands` and `approvals` in one transaction; rejects with why not. */
  write(commands: CommandRow[], approvals: ApprovalRow[]): Promise<void> {
    return this.#send({ type: "write", commands, approvals });
  }

  /** Resolves once every batch sent so far has settled. */
  async idle(): Promise<void> {
    await Promise.allSettled([...this.#waiting.values()].map((w) => w.promise));
  }

  /** Close the worker's connection and stop it once everything sent is written. */
  async close(): Promise<void> {
    await this.#send({ type: "close" }).catch(() => {});
    this.#worker.terminate();
  }

  #send(req: Request): Promise<void> {
    if (this.#dead) return Promise.reject(new Error(this.#dead));
    const seq = ++this.#seq;
    const waiting = Promise.withResolvers<void>();
    this.#waiting.set(seq, waiting);
    this.#worker.postMessage({ ...req, seq });
    return waiting.promise;
  }
}
