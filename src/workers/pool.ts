/**
 * Spawner workers kept warm off the request path, and bound to sandbox domains on demand.
 *
 * A domain is everything that shapes a worker thread's restriction (profile, workdir, ...);
 * sessions of one domain share its worker, holding a lease on it while they live (each spawn
 * runs as its session's own uid when the server is root). A domain without a restriction (an
 * unenforced profile) takes more workers, up to {@link MAX_OPEN_WORKERS}, while all of its
 * workers have spawns in flight: a spawn holds its thread until the child has exec'd, so one
 * thread is a queue for every start at once. A restricted domain keeps one thread: its sessions
 * share the namespaces that thread made (their loopback network, their mounts). Warm workers
 * are unrestricted until bound; the pool refills in the background. A worker that failed to
 * restrict, or died, is never reused; one whose domain has had no session for a while is
 * stopped (its children live on).
 *
 * @module
 */

import { closeAll, OsError } from "../ffi/libc.ts";
import { startWorker } from "../io/descriptor_reserve.ts";
import { SPARE_EMPTY, SPARE_STOPPED, type Spawned, type SpawnSpec } from "../pty/spawn.ts";
import { SandboxUnavailableError } from "../sandbox/errors.ts";
import type { Restriction } from "../sandbox/enforce/apply.ts";
import type { TakeBack } from "../sandbox/identity/reaper.ts";
import type { WorkerReply, WorkerRequest } from "./protocol.ts";

/**
 * A failed worker request: `kind` says whether the spawn itself failed, the worker reported an
 * internal failure, or the worker died before it answered. `orphan` is the child a dying worker
 * had already started: the caller must end it, reap it and close its master.
 */
export class SpawnFailure extends Error {
  constructor(
    readonly kind: "spawn" | "internal" | "died",
    message: string,
    readonly code?: number,
    readonly orphan?: Spawned,
  ) {
    super(message);
    this.name = "SpawnFailure";
  }
}

/** The spawner worker's module. */
const SPAWNER_MODULE = new URL("./spawner.ts", import.meta.url);

type Pending = { resolve(reply: WorkerReply): void; reject(err: Error): void };
type Request = WorkerRequest extends infer R ? R extends { id: number } ? Omit<R, "id"> : never
  : never;

/** One spawner worker thread. */
export class Spawner {
  #worker: Worker;
  #pending = new Map<number, Pending>();
  #nextId = 1;
  #dead?: Error;
  /** Its domain's and terminal slots' mount namespaces, closed when it is stopped. */
  #namespaces: number[] = [];
  /** Its free terminal slots (terminal_slots.ts), lowest first. */
  #freeSlots: number[] = [];
  /** Resolves once the worker loaded and can take requests; rejects if it died first. */
  readonly ready: Promise<void>;
  /** Called once if the worker dies. */
  onDeath?: () => void;
  #stopped = Promise.withResolvers<void>();
  /** Spawns asked of it and not answered yet. */
  #spawning = 0;
  /** The terminal master the worker opened ahead for its next spawn, -1 when none. */
  #spare = new Int32Array(new SharedArrayBuffer(4)).fill(SPARE_EMPTY);

  /** Start a worker running `module` (the spawner; a test may wrap it). */
  constructor(module: URL = SPAWNER_MODULE) {
    this.#worker = startWorker(module);
    const { promise, resolve, reject } = Promise.withResolvers<void>();
    this.ready = promise;
    promise.catch(() => {});
    this.#worker.onmessage = (e: MessageEvent<WorkerReply>) => {
      const msg = e.data;
      if (msg.type === "ready") return resolve();
      const pending = this.#pending.get(msg.id);
      this.#pending.delete(msg.id);
      pending?.resolve(msg);
    };
    this.#worker.onerror = (e) => {
      e.preventDefault();
      console.error(`uexec: a spawner worker died: ${e.message}`);
      this.#dead = new SpawnFailure("died", `spawner worker died: ${e.message}`);
      reject(this.#dead);
      for (const p of this.#pending.values()) p.reject(this.#dead);
      this.#pending.clear();
      this.terminate();
      this.onDeath?.();
    };
  }

  /**
   * Start a child on this worker's thread, in terminal slot `slot` when the worker has slots
   * (terminal_slots.ts); resolves to its pid (and PTY master).
   */
  async spawn(spec: SpawnSpec, slot?: number): Promise<Spawned> {
    const started = new Int32Array(new SharedArrayBuffer(8)).fill(-1);
    let reply: WorkerReply;
    this.#spawning++;
    try {
      reply = await this.#request({ type: "spawn", spec, started, spare: this.#spare, slot });
    } catch (err) {
      const pid = Atomics.load(started, 0);
      if (!(err instanceof SpawnFailure) || err.kind !== "died" || pid < 0) throw err;
      const master = Atomics.load(started, 1);
      const orphan = master < 0 ? { pid } : { pid, master };
      throw new SpawnFailure("died", err.message, undefined, orphan);
    } finally {
      this.#spawning--;
    }
    if (reply.type !== "spawned") throw failure(reply);
    return { pid: reply.pid, master: reply.master, unplaced: reply.unplaced };
  }

  /**
   * Kill every process of each of `uids`, then take back the files `takeBack` names (only on a
   * worker that is never restricted, as root).
   */
  async reap(uids: number[], takeBack?: TakeBack): Promise<void> {
    const reply = await this.#request({ type: "reap", uids, takeBack });
    if (reply.type !== "reaped") throw failure(reply);
  }

  /**
   * Restrict this worker's thread for good; resolves to its network namespace's descriptor
   * when its policy has egress rules (the caller owns it).
   */
  async restrict(r: Restriction): Promise<number | undefined> {
    const reply = await this.#request({ type: "restrict", ...r });
    if (reply.type !== "restricted") throw failure(reply);
    this.#namespaces = reply.namespaces ?? [];
    this.#freeSlots = Array.from({ length: reply.slots ?? 0 }, (_, i) => i);
    return reply.netns;
  }

  /**
   * A free terminal slot for one session; undefined when the worker has none, or every one is
   * held (the session then shares the domain's own devpts instance, capped as well).
   */
  takeSlot(): number | undefined {
    return this.#freeSlots.shift();
  }

  /** Gives back a slot `takeSlot` handed out, once its session ended. */
  giveSlot(slot: number): void {
    this.#freeSlots.push(slot);
    this.#freeSlots.sort((a, b) => a - b);
  }

  /** Its spawns in flight (waiting for their child's exec, or queued behind one). */
  get inFlight(): number {
    return this.#spawning;
  }

  /** Stop the worker thread (its children live on; its spare terminal is closed). */
  terminate(): void {
    closeAll(this.#namespaces);
    this.#namespaces = [];
    this.#worker.terminate();
    const spare = Atomics.exchange(this.#spare, 0, SPARE_STOPPED);
    if (spare >= 0) closeAll([spare]);
    this.#stopped.resolve();
  }

  /** Resolves once the worker has been stopped. */
  get stopped(): Promise<void> {
    return this.#stopped.promise;
  }

  async #request(req: Request): Promise<WorkerReply> {
    await this.ready;
    if (this.#dead) throw this.#dead;
    const id = this.#nextId++;
    const { promise, resolve, reject } = Promise.withResolvers<WorkerReply>();
    this.#pending.set(id, { resolve, reject });
    this.#worker.postMessage({ ...req, id } as WorkerRequest);
    return await promise;
  }
}

/** Stop a binding's further workers (its first is stopped apart). */
function retireMore(binding: Binding): void {
  for (const w of binding.more?.splice(0) ?? []) w.terminate();
}

function failure(reply: WorkerReply): Error {
  if (reply.type === "failed") {
    return reply.kind === "sandbox"
      ? new SandboxUnavailableError(reply.message)
      : new SpawnFailure(reply.kind, reply.message, reply.code);
  }
  return new SpawnFailure("internal", `unexpected worker reply ${reply.type}`);
}

/** A session's hold on its domain's worker; `release` it when the session ends. */
export interface Lease {
  /**
   * The worker to spawn on, chosen when read: a restricted domain's one worker, or the least
   * busy of an unrestricted domain's workers (read it right before the spawn).
   */
  readonly spawner: Spawner;
  /** The session's terminal slot on it, when the worker has slots (a root server). */
  slot?: number;
  release(): void;
}

interface Binding {
  spawner: Promise<Spawner>;
  /** An unrestricted domain's further workers, taken while all of its workers were busy. */
  more?: Spawner[];
  users: number;
  idle?: ReturnType<typeof setTimeout>;
}

/** How long a domain's worker outlives its last session, by default. */
const IDLE_MS = 5 * 60_000;
/**
 * How many idle domains keep their workers, by default. A worker holds a V8 isolate (about 20
 * MiB here): commands in 120 directories of their own once left 120 idle workers and 2.4 GiB
 * for five minutes, a way for an agent to exhaust the server's memory by changing `workdir`.
 */
const MAX_IDLE = 8;
/**
 * Most workers of an unrestricted domain: two per core here. A spawn's thread mostly waits for
 * its child's exec, so more than the cores overlap; each costs about 20 MiB while its domain
 * lives (they stop with its first worker when the domain goes idle).
 */
export const MAX_OPEN_WORKERS = 4;

/** Settings of a pool. */
export interface PoolOptions {
  /** Workers kept loaded ahead of demand (default 2). */
  warm?: number;
  /** How long a domain's worker outlives its last session (default 5 minutes). */
  idleMs?: number;
  /** Idle domains whose workers are kept; past it the least recently used is stopped (8). */
  maxIdle?: number;
  /** The workers' module (default the spawner; a test may pass a wrapper of it). */
  module?: URL;
  /**
   * Opens what a worker with egress rules needs in its network namespace `netns` (which it
   * takes over); what it gives is closed when that worker stops. A rejection fails the bind.
   */
  egress?: (netns: number, restriction: Restriction) => Promise<{ close(): void }>;
}

/** Warm workers plus the workers bound to domains. */
export class SpawnerPool {
  #warm: Spawner[] = [];
  #domains = new Map<string, Binding>();
  /** Domains whose worker has no lease, least recently released first. */
  #idle = new Map<string, Binding>();
  #warmSize: number;
  #idleMs: number;
  #maxIdle: number;
  #module?: URL;
  #egress?: PoolOptions["egress"];

  constructor(opts: PoolOptions = {}) {
    this.#egress = opts.egress;
    this.#warmSize = opts.warm ?? 2;
    this.#idleMs = opts.idleMs ?? IDLE_MS;
    this.#maxIdle = opts.maxIdle ?? MAX_IDLE;
    this.#module = opts.module;
    this.#refill();
  }

  /** Resolves once the warm workers have loaded. */
  async warmedUp(): Promise<void> {
    await Promise.all(this.#warm.map((w) => w.ready));
  }

  /** A lease on the worker for `domain`, restricted by `restriction` when first bound. */
  async acquire(domain: string, restriction?: Restriction): Promise<Lease> {
    let binding = this.#domains.get(domain);
    if (!binding) {
      const fresh: Binding = {
        spawner: this.#bind(restriction),
        users: 0,
        more: restriction ? undefined : [],
      };
      fresh.spawner.then(
        (spawner) => spawner.onDeath = () => this.#forget(domain, fresh),
        () => this.#forget(domain, fresh),
      );
      this.#domains.set(domain, fresh);
      binding = fresh;
    }
    const held = binding;
    held.users++;
    clearTimeout(held.idle);
    this.#idle.delete(domain);
    try {
      const spawner = await held.spawner;
      const slot = spawner.takeSlot();
      let released = false;
      const pick = () => this.#pick(held, spawner);
      return {
        get spawner() {
          return pick();
        },
        slot,
        release: () => {
          if (released) return;
          released = true;
          if (slot !== undefined) spawner.giveSlot(slot);
          this.#release(domain, held);
        },
      };
    } catch (err) {
      held.users--;
      throw err;
    }
  }

  /**
   * The least busy of `first` and the binding's further workers; one more is taken (a warm one
   * when there is one) while every one is busy and there are fewer than the most.
   */
  #pick(binding: Binding, first: Spawner): Spawner {
    const more = binding.more;
    if (!more) return first;
    let best = first;
    for (const w of more) if (w.inFlight < best.inFlight) best = w;
    if (best.inFlight === 0 || more.length + 1 >= MAX_OPEN_WORKERS) return best;
    let added: Spawner;
    try {
      added = this.#warm.shift() ?? new Spawner(this.#module);
    } catch (err) {
      // Short of descriptors for another thread (see startWorker): the busy one takes it.
      if (err instanceof OsError) return best;
      throw err;
    }
    this.#refill();
    more.push(added);
    added.onDeath = () => {
      const at = more.indexOf(added);
      if (at >= 0) more.splice(at, 1);
    };
    return added;
  }

  /** How many workers there are: warm ones, and ones bound to a sandbox domain. */
  workers(): { warm: number; bound: number } {
    let bound = 0;
    for (const b of this.#domains.values()) bound += 1 + (b.more?.length ?? 0);
    return { warm: this.#warm.length, bound };
  }

  /** Stop every worker. */
  async close(): Promise<void> {
    const bindings = [...this.#domains.values()];
    this.#domains.clear();
    this.#idle.clear();
    for (const b of bindings) clearTimeout(b.idle);
    for (const b of bindings) retireMore(b);
    const bound = await Promise.allSettled(bindings.map((b) => b.spawner));
    for (const b of bound) if (b.status === "fulfilled") b.value.terminate();
    for (const w of this.#warm) w.terminate();
    this.#warm = [];
  }

  #release(domain: string, binding: Binding): void {
    if (--binding.users > 0) return;
    // No longer the domain's (its first worker died): nothing spawns on its others any more.
    if (this.#domains.get(domain) !== binding) retireMore(binding);
    binding.idle = setTimeout(() => this.#stop(domain, binding), this.#idleMs);
    if (this.#domains.get(domain) !== binding) return;
    this.#idle.set(domain, binding);
    for (const [oldest, idle] of this.#idle) {
      if (this.#idle.size <= this.#maxIdle) break;
      this.#stop(oldest, idle);
    }
  }

  /**
   * Stop `domain`'s idle worker (its idle time is up, or it is the least recently used past the
   * cap), unless it was leased again or is no longer that domain's.
   */
  #stop(domain: string, binding: Binding): void {
    clearTimeout(binding.idle);
    if (binding.users > 0 || !this.#forget(domain, binding)) return;
    retireMore(binding);
    binding.spawner.then((s) => s.terminate(), () => {});
  }

  /** Drop `binding` if it is still the one for `domain`; true if it was. */
  #forget(domain: string, binding: Binding): boolean {
    if (this.#domains.get(domain) !== binding) return false;
    this.#domains.delete(domain);
    if (this.#idle.get(domain) === binding) this.#idle.delete(domain);
    return true;
  }

  async #bind(restriction?: Restriction): Promise<Spawner> {
    const worker = this.#warm.shift() ?? new Spawner(this.#module);
    this.#refill();
    if (!restriction) return worker;
    try {
      const netns = await worker.restrict(restriction);
      if (netns !== undefined) {
        if (!this.#egress) {
          closeAll([netns]);
          throw new SandboxUnavailableError("egress rules need the egress proxy, which is off");
        }
        const opened = await this.#egress(netns, restriction);
        worker.stopped.then(() => opened.close());
      }
      return worker;
    } catch (err) {
      worker.terminate();
      throw err;
    }
  }

  #refill(): void {
    try {
      while (this.#warm.length < this.#warmSize) this.#warm.push(new Spawner(this.#module));
    } catch (err) {
      // Short of descriptors (see startWorker): a later bind makes them.
      if (!(err instanceof OsError)) throw err;
    }
  }
}
