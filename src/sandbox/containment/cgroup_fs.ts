/**
 * The cgroup file system operations of session cgroups, through libc (Deno's own file APIs
 * want every permission for anything beneath /sys), usable on any thread: making a session's
 * directories from a {@link CgroupPlan}, readying emptied ones for the next session
 * ({@link reuseCgroups}) and removing them. Both the main thread and the cgroup janitor worker
 * run them.
 *
 * It must never touch a path it was not given (or a cgroup a command made beneath one), never
 * leave half a session's cgroups behind (a plan that fails is undone), and never hand on a
 * cgroup that still holds anything of the session before.
 *
 * @module
 */

import {
  closeAll,
  cString,
  E,
  errno,
  libc,
  listDir,
  O,
  openFile,
  OsError,
  readSmallFile,
} from "../../ffi/libc.ts";

const ENOENT = 2;
const EBUSY = 16;
/** How many times a write a signal interrupted is tried in all. */
const MAX_INTERRUPTED_WRITES = 100;

/** What making one session's cgroups takes. */
export interface CgroupPlan {
  /** Directories to make, in order (the v2 one first). */
  dirs: string[];
  /** Files to write, in order; one marked `ifPresent` is skipped where the kernel lacks it. */
  writes: { path: string; text: string; ifPresent?: boolean }[];
  /** The `cgroup.procs` files to open for writing once all is made. */
  procs: string[];
}

/**
 * Carry out `plan`: make its directories, write its files and open its `cgroup.procs` files
 * for writing (returned; the caller closes them). Whoever writes a pid to those moves that
 * process in with the opener's credentials, which the kernel checks at open. On failure what
 * was made is removed and the error thrown.
 */
export function makeCgroups(plan: CgroupPlan): number[] {
  const made: string[] = [];
  const fds: number[] = [];
  try {
    for (const d of plan.dirs) {
      mkdir(d);
      made.push(d);
    }
    for (const w of plan.writes) writeFile(w.path, w.text, w.ifPresent);
    for (const p of plan.procs) {
      const fd = libc().open(cString(p), O.WRONLY | O.CLOEXEC);
      if (fd < 0) throw new OsError(`open(${p})`, errno());
      fds.push(fd);
    }
    return fds;
  } catch (err) {
    closeAll(fds);
    removeDirs(made.reverse());
    throw err;
  }
}

/** What the session before left in cgroups that are reused: the next one's usage starts there. */
export interface Baseline {
  /** `usage_usec` of the v2 `cpu.stat`. */
  cpuUsec: number;
  /** Memory still charged to the v1 memory cgroup (page cache the tree read), in bytes. */
  memoryBytes: number;
  /** Processes the kernel's OOM killer killed in it so far (see {@link oomKills}). */
  oomKills: number;
}

/** What readying an emptied session's cgroups for another session takes. */
export interface ReusePlan {
  /** Its directories, the v2 one first. */
  dirs: string[];
  /** Its v1 memory directory, where its memory is accounted there. */
  memory?: string;
  /** Reuse only when at most this much memory is left charged to it. */
  maxLeftBytes: number;
  /** Its limits, written again, and its `cgroup.procs` files to open (as in a make). */
  writes: CgroupPlan["writes"];
  procs: string[];
}

/**
 * Ready the emptied cgroups of `plan` for another session: when no cgroup was made beneath them,
 * no process is left in any of them and at most `maxLeftBytes` of memory is still charged,
 * reset the memory high-water mark, write the limits again and open the `cgroup.procs` files
 * (returned, with the baseline the next session's usage is counted from). Otherwise, or on any
 * failure, remove them and return undefined.
 */
export function reuseCgroups(
  plan: ReusePlan,
): { procs: number[]; baseline: Baseline } | undefined {
  const [v2, ...v1] = plan.dirs;
  try {
    const bare = /^nr_descendants 0$/m.test(readSmallFile(`${v2}/cgroup.stat`) ?? "") &&
      v1.every((d) => readSmallFile(`${d}/cgroup.procs`) === "");
    const left = plan.memory === undefined
      ? 0
      : Number(readSmallFile(`${plan.memory}/memory.usage_in_bytes`)?.trim() ?? NaN);
    if (bare && left <= plan.maxLeftBytes) {
      if (plan.memory !== undefined) writeFile(`${plan.memory}/memory.max_usage_in_bytes`, "0");
      const cpuUsec = usageUsec(v2);
      if (cpuUsec !== undefined) {
        const procs = makeCgroups({ dirs: [], writes: plan.writes, procs: plan.procs });
        const killed = plan.memory === undefined ? 0 : oomKills(plan.memory, false) ?? 0;
        return { procs, baseline: { cpuUsec, memoryBytes: left, oomKills: killed } };
      }
    }
  } catch {
    // Not reusable: removed below, as a session's cgroups are when they are not kept.
  }
  removeDirs(plan.dirs);
  return undefined;
}

/** The CPU time the v2 cgroup `dir`'s tree used (`usage_usec` of its `cpu.stat`), in µs. */
export function usageUsec(dir: string): number | undefined {
  const usec = /^usage_usec (\d+)$/m.exec(readSmallFile(`${dir}/cpu.stat`) ?? "")?.[1];
  return usec === undefined ? undefined : Number(usec);
}

/**
 * How many processes of the memory cgroup `dir` the kernel's OOM killer killed (`oom_kill` of
 * the v1 `memory.oom_control`, or of the v2 `memory.events` when `v2`), whether its own limit
 * or an ancestor's (the aggregate cap) ran out; undefined where the kernel does not say.
 */
export function oomKills(dir: string, v2: boolean): number | undefined {
  const text = readSmallFile(`${dir}/${v2 ? "memory.events" : "memory.oom_control"}`);
  const count = /^oom_kill (\d+)$/m.exec(text ?? "")?.[1];
  return count === undefined ? undefined : Number(count);
}

/**
 * Remove each of the emptied cgroup directories `dirs`, with any cgroups a command made beneath
 * them; those already gone (or never made in that hierarchy) are skipped.
 */
export function removeDirs(dirs: string[]): void {
  for (const d of dirs) removeTree(d);
}

function removeTree(dir: string): void {
  const c = libc();
  if (c.rmdir(cString(dir)) === 0 || errno() !== EBUSY) return;
  // Cgroups beneath it (its interface files are not directories: their rmdir fails, harmlessly).
  try {
    for (const name of listDir(dir)) {
      if (name !== "." && name !== "..") removeTree(`${dir}/${name}`);
    }
  } catch {
    return;
  }
  c.rmdir(cString(dir));
}

/**
 * Write `text` to the cgroup file `path` (when `ifPresent`, nothing if it does not exist);
 * `room` as for `openFile`.
 */
export function writeFile(path: string, text: string, ifPresent = false, room?: () => void): void {
  const c = libc();
  const fd = openFile(path, O.WRONLY | O.CLOEXEC, room);
  if (fd < 0) {
    const code = errno();
    if (ifPresent && code === ENOENT) return;
    throw new OsError(`open(${path})`, code);
  }
  try {
    const bytes = new TextEncoder().encode(text);
    // A caught signal (the reaper's SIGCHLD, a profiler's SIGPROF) fails some writes with EINTR,
    // not restarting them (a memory limit's, while it reclaims): written again, a bounded number
    // of times.
    for (let tries = 1; c.write(fd, bytes, BigInt(bytes.length)) !== bytes.length; tries++) {
      const code = errno();
      if (code !== E.EINTR || tries === MAX_INTERRUPTED_WRITES) {
        throw new OsError(`write(${path})`, code);
      }
    }
  } finally {
    c.close(fd);
  }
}

/** Make the directory `path`. */
export function mkdir(path: string): void {
  if (libc().mkdir(cString(path), 0o755) < 0) throw new OsError(`mkdir(${path})`, errno());
}

/** Remove the (empty) cgroup directory `path`. */
export function rmdir(path: string): void {
  if (libc().rmdir(cString(path)) < 0) throw new OsError(`rmdir(${path})`, errno());
}
