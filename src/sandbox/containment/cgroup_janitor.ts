/**
 * The cgroup janitor: a worker thread that makes session cgroups (see {@link CgroupPlan}),
 * readies emptied ones for reuse (see {@link ReusePlan}) and removes those not kept, off the
 * main thread. Should it die, removals are done on the calling thread instead, and makes and
 * reuses fail (the caller then makes its cgroups itself, and removes what it would have reused).
 *
 * It must never be the only record of a directory to remove: a removal it did not confirm is
 * done again by the caller's thread, except after {@link CgroupJanitor.abandon} at shutdown,
 * when the instance's record (`instance_records.ts`) has the next start remove what is left.
 *
 * @module
 */

import { type Baseline, type CgroupPlan, removeDirs, type ReusePlan } from "./cgroup_fs.ts";

/** A request to the janitor worker. */
export type JanitorRequest =
  | { id: number; type: "make"; plan: CgroupPlan }
  | { id: number; type: "reuse"; plan: ReusePlan }
  | { id: number; type: "remove"; dirs: string[] };

/**
 * Its answer: the opened `cgroup.procs` descriptors of a make or a reuse (with the reused
 * cgroups' baseline), `removed` for a removal or a reuse it declined (it removed them), or why
 * it failed.
 */
export type JanitorReply =
  | { id: number; procs: number[]; baseline?: Baseline }
  | { id: number; removed: true }
  | { id: number; error: string };

/** Cgroups readied for reuse: their opened `cgroup.procs` descriptors and their baseline. */
export interface Reused {
  procs: number[];
  baseline: Baseline;
}

interface Pending {
  req: JanitorRequest;
  resolve(reply: JanitorReply): void;
  reject(err: Error): void;
}

/** The main thread's handle on the janitor worker. */
export class CgroupJanitor {
  #worker: Worker;
  #pending = new Map<number, Pending>();
  #next = 1;
  #dead = false;
  #inFlight = new Set<Promise<JanitorReply>>();

  constructor() {
    this.#worker = new Worker(new URL("./cgroup_janitor_worker.ts", import.meta.url), {
      type: "module",
    });
    this.#worker.onmessage = (e: MessageEvent<JanitorReply>) => {
      const reply = e.data;
      const p = this.#pending.get(reply.id);
      this.#pending.delete(reply.id);
      if (!p) return;
      if ("error" in reply) p.reject(new Error(reply.error));
      else p.resolve(reply);
    };
    this.#worker.onerror = (e) => {
      e.preventDefault();
      console.error("uexec: the cgroup janitor died:", e.message);
      this.#stop();
    };
  }

  /** Make a session's cgroups by `plan`; resolves to its opened `cgroup.procs` descriptors. */
  async make(plan: CgroupPlan): Promise<number[]> {
    const reply = await this.#send({ id: this.#next++, type: "make", plan });
    return "procs" in reply ? reply.procs : [];
  }

  /**
   * Ready the emptied cgroups of `plan` for another session; resolves to what {@link Reused}
   * says, or undefined when they were not fit for reuse and were removed instead.
   */
  async reuse(plan: ReusePlan): Promise<Reused | undefined> {
    const reply = await this.#send({ id: this.#next++, type: "reuse", plan });
    return "baseline" in reply && reply.baseline
      ? { procs: reply.procs, baseline: reply.baseline }
      : undefined;
  }

  /** Remove the emptied cgroup directories `dirs`. */
  async remove(dirs: string[]): Promise<void> {
    await this.#send({ id: this.#next++, type: "remove", dirs });
  }

  /** Stop the worker once everything asked of it is done. */
  async close(): Promise<void> {
    await Promise.allSettled(this.#inFlight);
    this.#stop();
  }

  #send(req: JanitorRequest): Promise<JanitorReply> {
    if (this.#dead) {
      try {
        return Promise.resolve(this.#here(req));
      } catch (err) {
        return Promise.reject(err);
      }
    }
    const { promise, resolve, reject } = Promise.withResolvers<JanitorReply>();
    this.#pending.set(req.id, { req, resolve, reject });
    this.#inFlight.add(promise);
    promise.then(() => this.#inFlight.delete(promise), () => this.#inFlight.delete(promise));
    this.#worker.postMessage(req);
    return promise;
  }

  /** A request done on this thread (the worker is gone): removals only; a reuse removes. */
  #here(req: JanitorRequest): JanitorReply {
    if (req.type === "make") throw new Error("the cgroup janitor is gone");
    removeDirs(req.type === "remove" ? req.dirs : req.plan.dirs);
    return { id: req.id, removed: true };
  }

  /**
   * Stop the worker now, leaving what it has not done undone (server shutdown past its wait for
   * the removals: the instance's record has the next start remove what is left). Pending makes
   * fail, pending removals resolve.
   */
  abandon(): void {
    if (this.#dead) return;
    this.#dead = true;
    this.#worker.terminate();
    for (const p of this.#pending.values()) {
      if (p.req.type === "make") p.reject(new Error("the cgroup janitor stopped"));
      else p.resolve({ id: p.req.id, removed: true });
    }
    this.#pending.clear();
  }

  #stop(): void {
    if (this.#dead) return;
    this.#dead = true;
    this.#worker.terminate();
    for (const p of this.#pending.values()) {
      try {
        p.resolve(this.#here(p.req));
      } catch (err) {
        p.reject(err as Error);
      }
    }
    this.#pending.clear();
  }
}
