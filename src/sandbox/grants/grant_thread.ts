/**
 * Write grants (write_grant.ts) made and taken back on a worker thread of their own
 * (grant_worker.ts): a grant walks the whole directory it is for, up to 50,000 entries at a
 * few system calls each, which on the server's thread held every other request and session
 * for seconds. Requests are served in order; the worker starts with the first.
 *
 * It must never report a grant taken back that was not: a worker that dies takes the grants it
 * held with it, and their take-backs then answer false (the uid is retired and the grant's
 * record kept for the next start, grant_journal.ts). The next request starts a new worker.
 * Stopping it lets what it was asked finish; after that it refuses, as nothing done.
 *
 * @module
 */

import type { SandboxIds } from "../identity/identity.ts";
import { type GrantedRoot, GrantError } from "./write_grant.ts";

/** Whom a grant is for: a session's uid, the server's sandbox ids and the protected names. */
export interface GrantSpec {
  uid: number;
  ids: SandboxIds;
  protectedNames: string[];
}

/** A message to the worker. */
export type GrantRequest =
  | { seq: number; type: "grant"; roots: GrantedRoot[]; spec: GrantSpec }
  | { seq: number; type: "revoke"; grant: number }
  | { seq: number; type: "takeBack"; roots: GrantedRoot[]; spec: GrantSpec };

/**
 * The worker's answer: for a grant, its number (what `revoke` names); for a take-back, whether
 * all of it was taken back; or why it failed (`takenBack` false: a grant that failed could not
 * undo what it had changed).
 */
export type GrantReply =
  | { seq: number; value: number | boolean }
  | { seq: number; error: string; takenBack: boolean };

/** A distributive Omit, keeping each request kind's own fields. */
type Request = GrantRequest extends infer R ? R extends unknown ? Omit<R, "seq"> : never
  : never;

/** The grant worker, started on first use. */
export class GrantThread {
  #worker?: Worker;
  #seq = 0;
  #waiting = new Map<number, PromiseWithResolvers<number | boolean>>();
  #closed = false;

  /**
   * Grants `spec.uid` write access to `roots`; resolves to the grant's number, or rejects with
   * a {@link GrantError} saying why not.
   */
  async grant(roots: GrantedRoot[], spec: GrantSpec): Promise<number> {
    return await this.#send({ type: "grant", roots, spec }) as number;
  }

  /** Takes grant `grant` back; false when not all of it could be (or the worker died). */
  revoke(grant: number): Promise<boolean> {
    return this.#answer({ type: "revoke", grant });
  }

  /** Takes back a grant a killed server held (WriteGrant.takeBack); false when not all of it. */
  takeBack(roots: GrantedRoot[], spec: GrantSpec): Promise<boolean> {
    return this.#answer({ type: "takeBack", roots, spec });
  }

  /**
   * Stops the worker once what it was asked is done, and refuses what is asked after (a grant
   * it still holds is not taken back: take it back first).
   */
  async close(): Promise<void> {
    this.#closed = true;
    await Promise.allSettled([...this.#waiting.values()].map((w) => w.promise));
    this.#worker?.terminate();
    this.#died("the grant worker was stopped");
  }

  async #answer(req: Request): Promise<boolean> {
    try {
      return await this.#send(req) as boolean;
    } catch (err) {
      console.error(`uexec: taking back write access failed: ${(err as Error).message}`);
      return false;
    }
  }

  #send(req: Request): Promise<number | boolean> {
    // Refused before anything changed.
    if (this.#closed) return Promise.reject(new GrantError("the grant worker was stopped", true));
    const seq = ++this.#seq;
    const waiting = Promise.withResolvers<number | boolean>();
    try {
      this.#start().postMessage({ ...req, seq });
    } catch (err) {
      return Promise.reject(new GrantError(`the grant worker cannot start: ${err}`, true));
    }
    this.#waiting.set(seq, waiting);
    return waiting.promise;
  }

  #start(): Worker {
    if (this.#worker) return this.#worker;
    const worker = new Worker(new URL("./grant_worker.ts", import.meta.url), { type: "module" });
    worker.onmessage = (event: MessageEvent<GrantReply>) => {
      const reply = event.data;
      const waiting = this.#waiting.get(reply.seq);
      this.#waiting.delete(reply.seq);
      if ("value" in reply) waiting?.resolve(reply.value);
      else waiting?.reject(new GrantError(reply.error, reply.takenBack));
    };
    worker.onerror = (event) => {
      event.preventDefault();
      worker.terminate();
      this.#died(`the grant worker failed: ${event.message}`);
    };
    return this.#worker = worker;
  }

  /** Fails everything sent to the worker that is gone; the next request starts another. */
  #died(why: string): void {
    this.#worker = undefined;
    // What a grant that never answered changed cannot be known: not taken back.
    for (const waiting of this.#waiting.values()) waiting.reject(new GrantError(why, false));
    this.#waiting.clear();
  }
}
