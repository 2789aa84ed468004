/**
 * Spawner workers kept warm off the request path, and bound to sandbox domains on demand.
 *
 * A domain is everything that shapes a worker thread's restriction (profile, workdir, uid);
 * sessions of one domain share its worker. Warm workers are unrestricted until bound; the pool
 * refills in the background. A worker that failed to restrict is never reused.
 *
 * @module
 */

import type { Spawned, SpawnSpec } from "../pty/spawn.ts";
import { SandboxUnavailableError } from "../sandbox/errors.ts";
import type { ResolvedPolicy } from "../sandbox/policy.ts";
import type { WorkerReply, WorkerRequest } from "./protocol.ts";

/** A failed worker request: `kind` says whether the spawn itself or the worker failed. */
export class SpawnFailure extends Error {
  constructor(
    readonly kind: "spawn" | "internal",
    message: string,
    readonly code?: number,
  ) {
    super(message);
    this.name = "SpawnFailure";
  }
}

/** How a domain's worker restricts itself. */
export interface Restriction {
  policy: ResolvedPolicy;
  uid?: number;
  gid?: number;
}

type Pending = { resolve(reply: WorkerReply): void; reject(err: Error): void };
type Request = WorkerRequest extends infer R ? R extends { id: number } ? Omit<R, "id"> : never
  : never;

/** One spawner worker thread. */
export class Spawner {
  #worker: Worker;
  #pending = new Map<number, Pending>();
  #nextId = 1;
  /** Resolves once the worker loaded and can take requests. */
  readonly ready: Promise<void>;

  constructor() {
    this.#worker = new Worker(new URL("./spawner.ts", import.meta.url), { type: "module" });
    const { promise, resolve } = Promise.withResolvers<void>();
    this.ready = promise;
    this.#worker.onmessage = (e: MessageEvent<WorkerReply>) => {
      const msg = e.data;
      if (msg.type === "ready") return resolve();
      const pending = this.#pending.get(msg.id);
      this.#pending.delete(msg.id);
      pending?.resolve(msg);
    };
    this.#worker.onerror = (e) => {
      e.preventDefault();
      const err = new SpawnFailure("internal", `spawner worker failed: ${e.message}`);
      for (const p of this.#pending.values()) p.reject(err);
      this.#pending.clear();
    };
  }

  /** Start a child on this worker's thread; resolves to its pid (and PTY master). */
  async spawn(spec: SpawnSpec): Promise<Spawned> {
    const reply = await this.#request({ type: "spawn", spec });
    if (reply.type !== "spawned") throw failure(reply);
    return { pid: reply.pid, master: reply.master };
  }

  /** Restrict this worker's thread for good. */
  async restrict(r: Restriction): Promise<void> {
    const reply = await this.#request({ type: "restrict", ...r });
    if (reply.type !== "restricted") throw failure(reply);
  }

  /** Stop the worker thread (its children live on). */
  terminate(): void {
    this.#worker.terminate();
  }

  async #request(req: Request): Promise<WorkerReply> {
    await this.ready;
    const id = this.#nextId++;
    const { promise, resolve, reject } = Promise.withResolvers<WorkerReply>();
    this.#pending.set(id, { resolve, reject });
    this.#worker.postMessage({ ...req, id } as WorkerRequest);
    return await promise;
  }
}

function failure(reply: WorkerReply): Error {
  if (reply.type === "failed") {
    return reply.kind === "sandbox"
      ? new SandboxUnavailableError(reply.message)
      : new SpawnFailure(reply.kind, reply.message, reply.code);
  }
  return new SpawnFailure("internal", `unexpected worker reply ${reply.type}`);
}

/** Warm workers plus the workers bound to domains. */
export class SpawnerPool {
  #warm: Spawner[] = [];
  #domains = new Map<string, Promise<Spawner>>();
  #warmSize: number;

  constructor(warmSize = 2) {
    this.#warmSize = warmSize;
    this.#refill();
  }

  /** Resolves once the warm workers have loaded. */
  async warmedUp(): Promise<void> {
    await Promise.all(this.#warm.map((w) => w.ready));
  }

  /** The worker for `domain`, restricted by `restriction` when it is first bound. */
  spawner(domain: string, restriction?: Restriction): Promise<Spawner> {
    let bound = this.#domains.get(domain);
    if (!bound) {
      bound = this.#bind(restriction);
      this.#domains.set(domain, bound);
      bound.catch(() => this.#domains.delete(domain));
    }
    return bound;
  }

  /** Stop every worker. */
  async close(): Promise<void> {
    const bound = await Promise.allSettled(this.#domains.values());
    for (const b of bound) if (b.status === "fulfilled") b.value.terminate();
    for (const w of this.#warm) w.terminate();
    this.#warm = [];
    this.#domains.clear();
  }

  async #bind(restriction?: Restriction): Promise<Spawner> {
    const worker = this.#warm.shift() ?? new Spawner();
    this.#refill();
    if (!restriction) return worker;
    try {
      await worker.restrict(restriction);
      return worker;
    } catch (err) {
      worker.terminate();
      throw err;
    }
  }

  #refill(): void {
    while (this.#warm.length < this.#warmSize) this.#warm.push(new Spawner());
  }
}
