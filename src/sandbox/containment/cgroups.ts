/**
 * One cgroup per session, so that killing a session kills everything it started, whatever it
 * did with sessions, process groups or double forks (`cgroup.kill`), and so that its whole
 * tree is limited and accounted. Cgroups live at `<v2 root>/uexec/<instance>/<session>`; the
 * instance name records the server's pid and start time, so a later server can tell that an
 * instance is dead (even after pid reuse) and kill and remove what it left (`dead_instances.ts`).
 *
 * On hybrid hosts, where the v1 hierarchies own the `pids` and `memory` controllers, each
 * session also gets a cgroup of the same name beneath this server's own v1 cgroup there, for
 * its limits and its memory peak; the v2 cgroup still does the killing and the CPU accounting
 * (`cpu.stat` needs no controller).
 *
 * A child is started inside its cgroups where the spawning thread can (see
 * `pty/clone_into_cgroup.ts`: this host's kernel takes `CLONE_INTO_CGROUP`, and the thread has
 * no seccomp filter and no uid switch); elsewhere it is put in them by pid while it waits at a
 * gate (see `limits.ts`). Either way nothing of the command runs outside them. Session cgroups are made ahead, a few per set of limits, by the
 * cgroup janitor's thread (`cgroup_janitor.ts`), so that no `mkdir` runs on the path of a
 * request. Once a session's cgroups are empty they are reused by a later session of the same
 * agent with the same limits (its usage counted from what the one before left), else removed,
 * also on that thread: making and removing cgroups for every command costs the kernel far more
 * than reusing them. What a session leaves charged to its cgroup (page cache its tree read) thus
 * never reaches another agent's.
 * This module must never move the server itself, never kill outside the cgroups it made (or
 * that a dead instance made), never give a session cgroups that hold anything of another, and
 * never fail open: a session that cannot be contained is an error.
 *
 * @module
 */

import { closeAll, E, errno, O, openFile, OsError, readSmallFile } from "../../ffi/libc.ts";
import { instanceName } from "../instance.ts";
import { cloneIntoCgroupWorks, type Placement } from "../../pty/clone_into_cgroup.ts";
import type { DescriptorReserve } from "../../io/descriptor_reserve.ts";
import type { Reactor } from "../../io/reactor.ts";
import { type Baseline, type CgroupPlan, makeCgroups, rmdir, writeFile } from "./cgroup_fs.ts";
import { CgroupJanitor } from "./cgroup_janitor.ts";
import { SandboxUnavailableError } from "../errors.ts";
import type { ResourceLimits } from "../policy/policy.ts";
import {
  type EmptyWatch,
  enableControllers,
  killTree,
  mkdirs,
  PARENT,
  v1Own,
  watchEmpty,
} from "./hierarchy.ts";
import { FRESH, SessionCgroup } from "./session_cgroup.ts";
import { ScreenCpuGroup } from "./screen_cpu.ts";
import { forgetInstance, recordInstance } from "./instance_records.ts";

/**
 * Session cgroups kept made ahead per set of limits: enough for a burst of starts to find
 * theirs ready, each holding its few open `cgroup.procs` files.
 */
export const SPARES = 4;
/**
 * Emptied session cgroups kept per set of limits for reuse (made-ahead ones included); beyond
 * that they are removed.
 */
export const KEPT = 2 * SPARES;
/**
 * Emptied cgroups are reused only when at most this much memory (page cache their tree read) is
 * still charged to them: the next session's peak is counted above it, so it bounds the error.
 */
const REUSE_MAX_LEFT_BYTES = 1 << 20;
/**
 * How long after the server began to shut down (see {@link CgroupHost.closing})
 * {@link CgroupHost.close} waits at most for the removal of every session's directories (the
 * sweep, begun on the janitor's thread once {@link CgroupHost.killAll} emptied them all, while
 * the main thread records the sessions' ends). 10,000 sessions have 30,000 of them on a hybrid
 * host, a second or more of `rmdir`s on two busy cores: what is left then is removed by the
 * next server's start (the instance's record says where), so that the exit stays within the
 * 3 s the shutdown has.
 */
const SWEEP_DEADLINE_MS = 2000;

/** How a limit is enforced by the kernel on this host. */
export type Enforcement = "cgroup-v2" | "cgroup-v1" | "rlimit" | "none";

/** What `/healthz` reports about containment. */
export interface ContainmentReport {
  containment: "cgroup" | "process-group";
  /** The directory holding this instance's session cgroups. */
  cgroup?: string;
  /** Why sessions are not in cgroups (process-group containment only). */
  reason?: string;
  /** How each kind of profile limit is enforced for a session's whole tree. */
  limits: { pids: Enforcement; memory: Enforcement; cpu: Enforcement };
}

/** A v1 hierarchy this server uses: where our own cgroup is in it. */
interface V1 {
  controller: "pids" | "memory";
  /** `<mount><our cgroup>/uexec/<instance>`. */
  dir: string;
  /** `<mount><our cgroup>`: where a spawning thread returns to (see {@link Placement}). */
  home: string;
}

/**
 * Session cgroups ready for a session: made ahead (no owner yet), or emptied by a session of
 * `owner` and readied for the next one of that owner.
 */
interface Spare {
  name: string;
  /** Its `cgroup.procs` files, opened for writing. */
  procs: number[];
  /** Its v2 cgroup was killed once (`cgroup.kill`): see {@link SessionCgroup.placeable}. */
  killed?: boolean;
  baseline: Baseline;
  owner?: string;
}

/** This server's instance of session cgroups. */
export class CgroupHost {
  readonly reactor: Reactor;
  /** `<root>/uexec/<instance>`. */
  readonly dir: string;
  readonly #v1: V1[];
  /** The controllers the v2 hierarchy has. */
  readonly #v2: Set<string>;
  #next = 0;
  /** Session cgroups made ahead or readied for reuse by the janitor, by limits, oldest first. */
  #spares = new Map<string, Spare[]>();
  /** Spares being made, by limits. */
  #making = new Map<string, number>();
  /** Emptied cgroups being readied for reuse, by limits. */
  #reusing = new Map<string, number>();
  /** How often each owner's spares were dropped (see {@link forget}). */
  #forgotten = new Map<string, number>();
  #janitor = new CgroupJanitor();
  /** Shutting down: no cgroup is made ahead or kept for reuse any more. */
  #closed = false;
  /** The removal of every session's directories, once {@link killAll} emptied them all. */
  #sweep?: Promise<void>;
  /** At shutdown (see {@link closing}): resolves once {@link killAll} emptied every cgroup. */
  #killedAll?: PromiseWithResolvers<void>;
  /** When the sweep is given up at the latest (`performance.now()`), from {@link closing}. */
  #sweepDeadline = Infinity;
  /** This server's own v1 `tasks` files, opened for the first placement (see placementOf). */
  #home?: number[];
  /**
   * Whether children can be started inside their cgroups on this host (`CLONE_INTO_CGROUP`);
   * else they wait at a gate.
   */
  readonly direct = cloneIntoCgroupWorks();
  /** Descriptors ran short: no spare is kept or made until a start finds enough again. */
  #short = false;
  /** The memory cap of all sessions together, in bytes (see {@link open}). */
  memoryMax?: number;
  /** The screen worker's CPU weight, where a v1 `cpu` hierarchy is mounted (screen_cpu.ts). */
  readonly screenCpu = ScreenCpuGroup.open(instanceName());

  readonly #descriptors?: DescriptorReserve;

  private constructor(
    reactor: Reactor,
    dir: string,
    v2: Set<string>,
    v1: V1[],
    descriptors?: DescriptorReserve,
  ) {
    this.reactor = reactor;
    this.#descriptors = descriptors;
    this.dir = dir;
    this.#v2 = v2;
    this.#v1 = v1;
  }

  /**
   * Make this instance's cgroup directory beneath `root` (the v2 hierarchy) and the session
   * parents in the v1 `pids` and `memory` hierarchies where they exist; throws when `root` is
   * not a writable cgroup v2 hierarchy. A kill that finds no descriptor free spends
   * `descriptors` (the process's reserve) and the spares' files (see {@link makeRoom}).
   * `memoryMax` (bytes) caps the memory of all sessions together: it is the limit of the
   * instance's memory cgroup, the parent of every session's (the kernel's OOM killer then picks
   * its victim among the sessions, never the server); throws when it cannot be set.
   */
  static open(
    reactor: Reactor,
    root: string,
    descriptors?: DescriptorReserve,
    memoryMax?: number,
  ): CgroupHost {
    if (readSmallFile(`${root}/cgroup.controllers`) === undefined) {
      throw new SandboxUnavailableError(`${root} is not a cgroup v2 hierarchy`);
    }
    const instance = instanceName();
    const dir = `${root}/${PARENT}/${instance}`;
    mkdirs(dir);
    const v2 = enableControllers([root, `${root}/${PARENT}`, dir], ["pids", "memory"]);
    const v1: V1[] = [];
    for (const controller of ["pids", "memory"] as const) {
      if (v2.has(controller)) continue;
      const own = v1Own(controller);
      if (own === undefined) continue;
      const vdir = `${own}/${PARENT}/${instance}`;
      try {
        mkdirs(vdir);
        v1.push({ controller, dir: vdir, home: own });
      } catch {
        // Not writable here: that limit falls back to its rlimit.
      }
    }
    recordInstance(instance, v1.map((v) => v.dir));
    const host = new CgroupHost(reactor, dir, v2, v1, descriptors);
    if (memoryMax !== undefined) host.#capMemory(memoryMax);
    if (!host.direct) {
      console.error(
        "uexec: this host cannot start a child inside its cgroup (clone3 with CLONE_INTO_CGROUP " +
          "needs Linux 5.7 on x86-64): each child waits at a gate until it is placed",
      );
    }
    return host;
  }

  /** Limit the memory of all sessions together to `bytes` (see {@link open}). */
  #capMemory(bytes: number): void {
    const v1 = this.#v1.find((v) => v.controller === "memory");
    const writes: CgroupPlan["writes"] = this.#v2.has("memory")
      ? [{ path: `${this.dir}/memory.max`, text: `${bytes}` }, {
        path: `${this.dir}/memory.swap.max`,
        text: "0",
        ifPresent: true,
      }]
      : v1
      ? [{ path: `${v1.dir}/memory.limit_in_bytes`, text: `${bytes}` }, {
        path: `${v1.dir}/memory.memsw.limit_in_bytes`,
        text: `${bytes}`,
        ifPresent: true,
      }]
      : [];
    if (writes.length === 0) {
      throw new SandboxUnavailableError(
        "no memory controller to cap the sessions' memory with (UEXEC_MEMORY_MAX)",
      );
    }
    for (const w of writes) writeFile(w.path, w.text, w.ifPresent);
    this.memoryMax = bytes;
  }

  /** See {@link SessionCgroup.openPlacement}. */
  placementOf(name: string): Placement {
    const room = () => this.makeRoom();
    const opened: number[] = [];
    const open = (path: string, flags: number) => {
      const fd = openFile(path, flags | O.CLOEXEC, room);
      if (fd < 0) {
        const code = errno();
        closeAll(opened);
        throw new OsError(`open(${path})`, code);
      }
      opened.push(fd);
      return fd;
    };
    if (this.#home === undefined) {
      this.#home = this.#v1.map((v) => open(`${v.home}/tasks`, O.WRONLY));
      opened.length = 0;
    }
    const cgroup = open(`${this.dir}/${name}`, O.PATH | O.DIRECTORY);
    const tasks = this.#v1.map((v) => open(`${v.dir}/${name}/tasks`, O.WRONLY));
    return { cgroup, tasks, home: this.#home };
  }

  /** Every directory of session `name`: the v2 one first. */
  dirsOf(name: string): string[] {
    return [`${this.dir}/${name}`, ...this.#v1.map((v) => `${v.dir}/${name}`)];
  }

  /** Session `name`'s directory in the v1 hierarchy of `controller`, when one is used. */
  v1Dir(controller: V1["controller"], name: string): string | undefined {
    const v = this.#v1.find((v) => v.controller === controller);
    return v && `${v.dir}/${name}`;
  }

  /** How each limit is enforced for a session's tree here. */
  limits(): ContainmentReport["limits"] {
    const by = (c: "pids" | "memory" | "cpu", fallback: Enforcement): Enforcement =>
      this.#v2.has(c)
        ? "cgroup-v2"
        : this.#v1.some((v) => v.controller === c)
        ? "cgroup-v1"
        : fallback;
    return { pids: by("pids", "rlimit"), memory: by("memory", "rlimit"), cpu: "rlimit" };
  }

  /**
   * The cgroups of a new session of `owner`, limited by `limits`: the oldest that one of its
   * sessions emptied, else one made ahead (see {@link SPARES}), else made now. Without `ahead`
   * (descriptors are short, see {@link shed}) none is made ahead or kept until a start has
   * `ahead` again; the spares used are made again by {@link refill}.
   */
  create(limits: ResourceLimits, owner: string, ahead: boolean): SessionCgroup {
    this.#short = !ahead;
    const key = keyOf(limits);
    const ready = this.#ready(key);
    let at = ready.findIndex((s) => s.owner === owner);
    if (at < 0) at = ready.findIndex((s) => s.owner === undefined);
    const spare = at < 0 ? undefined : ready.splice(at, 1)[0];
    const cgroup = spare
      ? new SessionCgroup(
        this,
        spare.name,
        limits,
        owner,
        spare.procs,
        spare.baseline,
        spare.killed,
      )
      : this.#make(limits, owner);
    return cgroup;
  }

  /**
   * Have the janitor make spares with `limits` ahead again: called once a start's child is
   * spawned, so that the spares' files never take the descriptors that start needs. Nothing
   * while descriptors are short.
   */
  refill(limits: ResourceLimits): void {
    if (!this.#closed && !this.#short) this.#refill(keyOf(limits), limits);
  }

  /**
   * Take back the emptied cgroups of session `name` of `owner` (limited by `limits`; `killed`
   * once with `cgroup.kill`, which the next session's cgroup remembers): kept for
   * the next session of that owner with the same limits while fewer than {@link KEPT} wait and
   * nothing of the session is left in them (see `reuseCgroups`), else removed; both off the main
   * thread. Where memory is accounted by v2, whose peak cannot be reset, they are always removed.
   */
  retire(name: string, limits: ResourceLimits, owner: string, killed = false): Promise<void> {
    // Shutting down: the sweep after killAll removes every session's directories at once.
    if (this.#closed) return Promise.resolve();
    const key = keyOf(limits);
    const ready = this.#ready(key);
    const waiting = ready.length + (this.#reusing.get(key) ?? 0);
    if (this.#short || this.#v2.has("memory") || waiting >= KEPT) {
      return this.remove(this.dirsOf(name));
    }
    add(this.#reusing, key, 1);
    const forgotten = this.#forgotten.get(owner) ?? 0;
    const plan = {
      ...this.#plan(name, limits),
      memory: this.v1Dir("memory", name),
      maxLeftBytes: REUSE_MAX_LEFT_BYTES,
    };
    return this.#janitor.reuse(plan).then(
      (reused) => {
        if (!reused) return;
        if (this.#closed || this.#short || (this.#forgotten.get(owner) ?? 0) !== forgotten) {
          return this.#discard({ name, procs: reused.procs });
        }
        ready.push({ name, ...reused, owner, killed });
      },
      () => this.remove(this.dirsOf(name)),
    ).finally(() => add(this.#reusing, key, -1));
  }

  /**
   * Drop the spares `owner`'s sessions emptied, and those being readied (its credential was
   * revoked: a later agent of the same name is another party); resolves once they are removed.
   */
  async forget(owner: string): Promise<void> {
    add(this.#forgotten, owner, 1);
    await this.#drop((spare) => spare.owner === owner);
  }

  /**
   * Descriptors ran short: drop every spare, made ahead or kept, so that their open files go
   * back to the process (spares only save a start time; they must never cost one a start), and
   * keep or make none (also those on their way) until a start `create`s `ahead` again; resolves
   * once they are removed.
   */
  async shed(): Promise<void> {
    this.#short = true;
    await this.#drop(() => true);
  }

  /**
   * The process has no descriptor free, and a kill needs one: give it the reserve and the spares'
   * files at once (their removal follows; one that fails leaves an empty cgroup, removed by the
   * next server's start).
   */
  makeRoom(): void {
    this.#descriptors?.spend();
    this.shed().catch(() => {});
  }

  /** The `cgroup.procs` files of session `name`. */
  procsOf(name: string): string[] {
    return this.dirsOf(name).map((d) => `${d}/cgroup.procs`);
  }

  /** Remove the emptied directories `dirs` of a session, off the main thread. */
  remove(dirs: string[]): Promise<void> {
    return this.#janitor.remove(dirs);
  }

  /** The spares with limits `key` (a list kept for good). */
  #ready(key: string): Spare[] {
    let ready = this.#spares.get(key);
    if (!ready) this.#spares.set(key, ready = []);
    return ready;
  }

  /** Have the janitor make spares with `limits` until {@link SPARES} of them have no owner. */
  #refill(key: string, limits: ResourceLimits): void {
    const ready = this.#ready(key);
    const fresh = ready.filter((s) => s.owner === undefined).length;
    for (let n = fresh + (this.#making.get(key) ?? 0); n < SPARES; n++) {
      const name = `s${++this.#next}`;
      add(this.#making, key, 1);
      this.#janitor.make(this.#plan(name, limits)).then(
        (procs) => {
          if (this.#closed || this.#short) this.#discard({ name, procs }).catch(() => {});
          else ready.push({ name, procs, baseline: FRESH });
        },
        // The session that finds no spare makes its own (and reports why it cannot).
        () => {},
      ).finally(() => add(this.#making, key, -1));
    }
  }

  /** Make the cgroups of a session of `owner`, limited by `limits`, on this thread. */
  #make(limits: ResourceLimits, owner: string): SessionCgroup {
    const name = `s${++this.#next}`;
    return new SessionCgroup(this, name, limits, owner, makeCgroups(this.#plan(name, limits)));
  }

  /** Discard the spares `which` picks; resolves once they are removed. */
  async #drop(which: (spare: Spare) => boolean): Promise<void> {
    const dropped: Spare[] = [];
    for (const ready of this.#spares.values()) {
      for (let i = ready.length - 1; i >= 0; i--) {
        if (which(ready[i])) dropped.push(...ready.splice(i, 1));
      }
    }
    await Promise.all(dropped.map((spare) => this.#discard(spare)));
  }

  /** Kill (should anything have got in) and remove a spare's cgroups, closing its files. */
  async #discard(spare: Pick<Spare, "name" | "procs">): Promise<void> {
    closeAll(spare.procs);
    await killTree(this.reactor, `${this.dir}/${spare.name}`);
    await this.remove(this.dirsOf(spare.name));
  }

  /** What making session `name`'s cgroups, limited by `limits`, takes. */
  #plan(name: string, limits: ResourceLimits): CgroupPlan {
    const dirs = this.dirsOf(name);
    const v2 = dirs[0];
    const writes: CgroupPlan["writes"] = [];
    const pids = this.#v2.has("pids") ? v2 : this.v1Dir("pids", name);
    if (pids && limits.maxProcesses !== undefined) {
      writes.push({ path: `${pids}/pids.max`, text: `${limits.maxProcesses}` });
    }
    const memory = treeMemory(limits);
    if (memory !== undefined) {
      if (this.#v2.has("memory")) {
        writes.push({ path: `${v2}/memory.max`, text: `${memory}` });
        writes.push({ path: `${v2}/memory.swap.max`, text: "0" });
      } else {
        const m = this.v1Dir("memory", name);
        if (m) {
          writes.push({ path: `${m}/memory.limit_in_bytes`, text: `${memory}` });
          // No swapping past the limit either, where swap is accounted.
          writes.push({
            path: `${m}/memory.memsw.limit_in_bytes`,
            text: `${memory}`,
            ifPresent: true,
          });
        }
      }
    }
    return { dirs, writes, procs: this.procsOf(name) };
  }

  /**
   * The server shuts down: from now on no cgroup is made ahead or kept for reuse, and those
   * retired are left to the sweep after {@link killAll}.
   */
  closing(): void {
    if (this.#killedAll) return;
    this.#closed = true;
    this.#killedAll = Promise.withResolvers();
    this.#killedAll.promise.catch(() => {}); // each session's kill reports a failed one
    this.#sweepDeadline = performance.now() + SWEEP_DEADLINE_MS;
  }

  /**
   * A watch on this instance's cgroup until nothing runs in any session cgroup (see
   * `hierarchy.ts` watchEmpty); undefined when it is gone.
   */
  watchAll(): EmptyWatch | undefined {
    return watchEmpty(this.reactor, this.dir, () => this.makeRoom());
  }

  /**
   * SIGKILL everything in every session cgroup of this instance with one `cgroup.kill`;
   * resolves once all of them are empty (server shutdown, after {@link closing}). Their
   * directories are then removed together on the janitor's thread (see {@link close}); a
   * session's `kill` has nothing left to do.
   */
  async killAll(): Promise<void> {
    this.closing();
    const all = this.#killedAll!;
    try {
      await killTree(this.reactor, this.dir, () => this.makeRoom());
    } catch (err) {
      all.reject(err);
      throw err;
    }
    this.#sweep ??= this.remove([this.dir, ...this.#v1.map((v) => v.dir)]).catch(() => {});
    all.resolve();
  }

  /**
   * Once the server shuts down (see {@link closing}): resolves once {@link killAll} emptied
   * every session cgroup. A session's kill then waits for that instead of killing its own.
   */
  get killedAll(): Promise<void> | undefined {
    return this.#killedAll?.promise;
  }

  /**
   * SIGKILL everything in this instance's cgroups now, without waiting for it to die (a
   * shutdown past its time limit, about to exit); false if the kill could not be written.
   */
  killAllNow(): boolean {
    try {
      writeFile(`${this.dir}/cgroup.kill`, "1");
      return true;
    } catch {
      return false;
    }
  }

  /**
   * Remove this instance's (empty) directories (server shutdown, after every session): waits
   * for the sweep {@link killAll} began until {@link SWEEP_DEADLINE_MS} after {@link closing}
   * at most; what it has not removed by then, and anything still draining, is removed by the
   * next start (by the instance's record).
   */
  async close(): Promise<void> {
    this.#closed = true;
    closeAll(this.#home ?? []);
    this.#home = undefined;
    const left = this.#sweepDeadline - performance.now();
    if (this.#sweep && !await settlesWithin(this.#sweep, left)) this.#janitor.abandon();
    await this.#janitor.close();
    await this.shed();
    try {
      this.screenCpu?.close();
    } catch {
      // Its thread could not be moved out: the cgroup is left, removed at the next start.
    }
    let removed = true;
    for (const d of [this.dir, ...this.#v1.map((v) => v.dir)]) {
      try {
        rmdir(d);
      } catch (err) {
        // Gone (swept), else a session cgroup still draining or left by an abandoned sweep.
        if (!(err instanceof OsError && err.errno === E.ENOENT)) removed = false;
      }
    }
    if (removed) forgetInstance(instanceName());
  }
}

/** Whether `promise` settles within `ms` milliseconds (Infinity: waits for it). */
async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  if (ms === Infinity) return await promise.then(() => true, () => true);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<false>((r) => timer = setTimeout(() => r(false), Math.max(0, ms)));
  try {
    return await Promise.race([promise.then(() => true, () => true), late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Add `by` to the count kept for `key` in `counts` (none kept counts as 0). */
function add(counts: Map<string, number>, key: string, by: number): void {
  counts.set(key, (counts.get(key) ?? 0) + by);
}

/** Spares are kept by the limits they were made with. */
function keyOf(limits: ResourceLimits): string {
  return `${limits.maxProcesses}/${treeMemory(limits)}`;
}

/** The memory limit of a session's tree: the smaller of `memoryBytes` and its address space. */
function treeMemory(limits: ResourceLimits): number | undefined {
  const given = [limits.memoryBytes, limits.addressSpaceBytes].filter((n) => n !== undefined);
  return given.length === 0 ? undefined : Math.min(...given);
}
