/**
 * The cgroup file system operations of session cgroups, through libc (Deno's own file APIs
 * want every permission for anything beneath /sys), usable on any thread: making a session's
 * directories from a {@link CgroupPlan} and removing them. Both the main thread and the cgroup
 * janitor worker run them.
 *
 * It must never touch a path it was not given, and never leave half a session's cgroups
 * behind: a plan that fails is undone.
 *
 * @module
 */

import { closeAll, cString, errno, libc, O, OsError } from "../ffi/libc.ts";

const O_WRONLY = 1;
const ENOENT = 2;

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
      const fd = libc().open(cString(p), O_WRONLY | O.CLOEXEC);
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

/** Remove each of the (empty) cgroup directories `dirs`; those already gone are skipped. */
export function removeDirs(dirs: string[]): void {
  for (const d of dirs) {
    try {
      rmdir(d);
    } catch {
      // Never made in that hierarchy, or gone already.
    }
  }
}

/** Write `text` to the cgroup file `path` (when `ifPresent`, nothing if it does not exist). */
export function writeFile(path: string, text: string, ifPresent = false): void {
  const c = libc();
  const fd = c.open(cString(path), O_WRONLY | O.CLOEXEC);
  if (fd < 0) {
    const code = errno();
    if (ifPresent && code === ENOENT) return;
    throw new OsError(`open(${path})`, code);
  }
  try {
    const bytes = new TextEncoder().encode(text);
    if (Number(c.write(fd, bytes, BigInt(bytes.length))) !== bytes.length) {
      throw new OsError(`write(${path})`, errno());
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
