/**
 * The cgroup janitor: a worker thread that makes session cgroups (see {@link CgroupPlan}) and
 * removes emptied ones off the main thread. Should it die, removals are done on the calling
 * thread instead and makes fail (the caller then makes its cgroups itself).
 *
 * It must never be the only record of a directory to remove: a removal it did not confirm is
 * done again by the caller's thread.
 *
 * @module
 */

import { type CgroupPlan, removeDirs } from "./cgroup_fs.ts";

/** A request to the janitor worker. */
export type JanitorRequest =
  | { id: number; type: "make"; plan: CgroupPlan }
  | { id: number; type: "remove"; dirs: string[] };

/** Its answer: the opened `cgroup.procs` descriptors of a make, or why it failed. */
export type JanitorReply = { id: number; procs: number[] } | { id: number; error: string };

interface Pending {
  req: JanitorRequest;
  resolve(procs: number[]): void;
  reject(err: Error): void;
}

/** The main thread's handle on the janitor worker. */
export class CgroupJanitor {
  #worker: Worker;
  #pending = new Map<number, Pending>();
  #next = 1;
  #dead = false;
  #inFlight = new Set<Promise<number[]>>();

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
      else p.resolve(reply.procs);
    };
    this.#worker.onerror = (e) => {
      e.preventDefault();
      console.error("uexec: the cgroup janitor died:", e.message);
      this.#stop();
    };
  }

  /** Make a session's cgroups by `plan`; resolves to its opened `cgroup.procs` descriptors. */
  make(plan: CgroupPlan): Promise<number[]> {
    return this.#send({ id: this.#next++, type: "make", plan });
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

  #send(req: JanitorRequest): Promise<number[]> {
    if (this.#dead) {
      try {
        return Promise.resolve(this.#here(req));
      } catch (err) {
        return Promise.reject(err);
      }
    }
    const { promise, resolve, reject } = Promise.withResolvers<number[]>();
    this.#pending.set(req.id, { req, resolve, reject });
    this.#inFlight.add(promise);
    promise.then(() => this.#inFlight.delete(promise), () => this.#inFlight.delete(promise));
    this.#worker.postMessage(req);
    return promise;
  }

  /** A request done on this thread (the worker is gone): removals only. */
  #here(req: JanitorRequest): number[] {
    if (req.type === "make") throw new Error("the cgroup janitor is gone");
    removeDirs(req.dirs);
    return [];
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
