/**
 * One session's cgroups, as the session manager holds them: opening the files that move its
 * child in, what its tree used, signalling and killing everything in it. The host that made
 * them (`cgroups.ts`' CgroupHost) lends the rest: where they are, the spare files, and what to
 * do with them once emptied. An object serves one session only: a reused cgroup is a new object,
 * so a late kill or signal through this one never reaches the next session.
 *
 * @module
 */

import { closeAll, libc, readSmallFile } from "../../ffi/libc.ts";
import type { Placement } from "../../pty/clone_into_cgroup.ts";
import type { Reactor } from "../../io/reactor.ts";
import { type Baseline, makeCgroups, oomKills, usageUsec } from "./cgroup_fs.ts";
import { killTree } from "./hierarchy.ts";
import type { ResourceLimits } from "../policy/policy.ts";

/** The counters of a cgroup no session used yet. */
export const FRESH: Baseline = { cpuUsec: 0, memoryBytes: 0, oomKills: 0 };

/** What a session's whole process tree used. */
export interface Usage {
  cpu_seconds: number;
  /** Null where no memory accounting is available. */
  peak_memory_bytes: number | null;
  /**
   * `memory` when the kernel's OOM killer killed a process of the tree: its own memory limit
   * or the aggregate cap of all sessions (`UEXEC_MEMORY_MAX`) ran out. Absent otherwise.
   */
  killed_by?: "memory";
}

/** What a session's cgroups need of the host that made them (see `cgroups.ts`' CgroupHost). */
export interface CgroupOwner {
  readonly reactor: Reactor;
  /** The instance's v2 directory. */
  readonly dir: string;
  /** Whether children can be started inside their cgroups on this host. */
  readonly direct: boolean;
  procsOf(name: string): string[];
  placementOf(name: string): Placement;
  v1Dir(controller: "pids" | "memory", name: string): string | undefined;
  makeRoom(): void;
  /** At shutdown: resolves once one kill of the instance emptied every session cgroup. */
  readonly killedAll: Promise<void> | undefined;
  retire(name: string, limits: ResourceLimits, owner: string, killed?: boolean): Promise<void>;
}

/**
 * A session's cgroups, for one session: when reused, the next session gets a new object, so
 * that nothing done through this one (a late kill or signal) reaches it.
 */
export class SessionCgroup {
  #host: CgroupOwner;
  readonly name: string;
  readonly limits: ResourceLimits;
  /** The agent (or operator) whose session it is. */
  readonly owner: string;
  #killed?: Promise<void>;
  /** Its `cgroup.procs` files, opened when it was made, until `openProcs` hands them over. */
  #procs?: number[];
  /** What sessions before this one left in its counters. */
  #baseline: Baseline;
  /**
   * Whether a child can be started inside it (see {@link openPlacement}): its host can, and it
   * was never killed. Linux 6.18 SIGKILLs at once a child that `clone3` puts into a cgroup that
   * was killed before with `cgroup.kill` (seen here: a reused cgroup killed every first command
   * of its next session; the fork appears to compare the target's kill sequence number with the
   * parent cgroup's). A reused cgroup that was killed gets its children through the gate, which
   * is not affected.
   */
  readonly placeable: boolean;

  constructor(
    host: CgroupOwner,
    name: string,
    limits: ResourceLimits,
    owner: string,
    procs: number[],
    baseline = FRESH,
    killed = false,
  ) {
    this.placeable = host.direct && !killed;
    this.#host = host;
    this.name = name;
    this.limits = limits;
    this.owner = owner;
    this.#procs = procs;
    this.#baseline = baseline;
  }

  /** The v2 directory. */
  get dir(): string {
    return `${this.#host.dir}/${this.name}`;
  }

  /**
   * The `cgroup.procs` file of every cgroup of the session, opened for writing when it was
   * made (close them after use; asked again, they are opened again): whoever writes a pid there
   * moves that process in with our credentials, which the kernel checks at open.
   */
  openProcs(): number[] {
    const held = this.#procs;
    this.#procs = undefined;
    return held ?? makeCgroups({ dirs: [], writes: [], procs: this.#host.procsOf(this.name) });
  }

  /**
   * What a child needs to be started inside the session's cgroups (see
   * `pty/clone_into_cgroup.ts`): its v2 directory and v1 `tasks` files, opened now (close them
   * after use), and the server's own `tasks` files, which the host keeps. The `cgroup.procs`
   * files opened ahead are closed: nothing is written there.
   */
  openPlacement(): Placement {
    closeAll(this.#procs ?? []);
    this.#procs = undefined;
    return this.#host.placementOf(this.name);
  }

  /** What the session's tree used so far (exited processes included). */
  usage(): Usage {
    const usec = (usageUsec(this.dir) ?? 0) - this.#baseline.cpuUsec;
    const memory = this.#host.v1Dir("memory", this.name);
    const peak = memory === undefined
      ? readSmallFile(`${this.dir}/memory.peak`)
      : readSmallFile(`${memory}/memory.max_usage_in_bytes`);
    const killed = oomKills(memory ?? this.dir, memory === undefined) ?? 0;
    return {
      cpu_seconds: Math.max(0, usec) / 1e6,
      peak_memory_bytes: peak === undefined
        ? null
        : Math.max(0, Number(peak.trim()) - this.#baseline.memoryBytes),
      ...(killed > this.#baseline.oomKills ? { killed_by: "memory" as const } : {}),
    };
  }

  /** Send each of `signals`, in order, to every process in the session's cgroup now. */
  signal(...signals: number[]): void {
    if (this.#killed) return;
    const room = () => this.#host.makeRoom();
    const procs = (readSmallFile(`${this.dir}/cgroup.procs`, 1 << 20, room) ?? "").split("\n");
    for (const sig of signals) for (const pid of procs) if (pid) libc().kill(Number(pid), sig);
  }

  /**
   * SIGKILL everything in the session's cgroup; resolves once it is empty and either kept for
   * reuse (as a new object) or removed.
   */
  kill(): Promise<void> {
    if (!this.#killed) {
      closeAll(this.#procs ?? []);
      this.#procs = undefined;
      // At shutdown the instance's one kill empties them all (no file of its own is read).
      const all = this.#host.killedAll;
      const tree = all
        ? all.then(() => true)
        : killTree(this.#host.reactor, this.dir, () => this.#host.makeRoom());
      const killed = tree.then((wrote) =>
        this.#host.retire(this.name, this.limits, this.owner, wrote || !this.placeable)
      );
      // One that failed (no descriptor even then) is tried again by the next kill.
      killed.catch(() => {
        if (this.#killed === killed) this.#killed = undefined;
      });
      this.#killed = killed;
    }
    return this.#killed;
  }
}
