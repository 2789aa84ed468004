/**
 * A server's open descriptors, and its limit on them set from outside (`prlimit`), for tests of
 * what it does when it has none to spare.
 *
 * @module
 */

import assert from "node:assert/strict";

/**
 * The descriptors process `pid` has open, by number: whether each is a `cgroup.procs` file.
 * (A limit on open files is a limit on their numbers: what counts is how many are free below.)
 */
export function openFiles(pid: number): Map<number, boolean> {
  const open = new Map<number, boolean>();
  for (const e of Deno.readDirSync(`/proc/${pid}/fd`)) {
    try {
      open.set(
        Number(e.name),
        Deno.readLinkSync(`/proc/${pid}/fd/${e.name}`).endsWith("/cgroup.procs"),
      );
    } catch {
      // Closed meanwhile (the directory's own descriptor).
    }
  }
  return open;
}

/**
 * The highest limit on open files that leaves exactly `free` numbers free below it, counting as
 * taken the open descriptors `taken` picks (by whether each is a `cgroup.procs` file).
 */
export function limitLeaving(
  open: Map<number, boolean>,
  free: number,
  taken: (cgroup: boolean) => boolean,
): number {
  for (let limit = 0, left = 0;; limit++) {
    if (open.has(limit) && taken(open.get(limit)!)) continue;
    if (left++ === free) return limit;
  }
}

/** Set process `pid`'s soft limit of open files (below its hard limit). */
export async function limitFiles(pid: number, soft: number): Promise<void> {
  const args = ["--pid", `${pid}`, `--nofile=${soft}:`];
  const out = await new Deno.Command("prlimit", { args }).output();
  assert.ok(out.success, `prlimit ${args.join(" ")}: ${new TextDecoder().decode(out.stderr)}`);
}

/** Process `pid`'s soft limit of open files. */
export function fileLimit(pid: number): number {
  const line = Deno.readTextFileSync(`/proc/${pid}/limits`).split("\n")
    .find((l) => l.startsWith("Max open files"));
  return Number(line?.split(/\s{2,}/)[1]);
}
