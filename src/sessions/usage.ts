/**
 * What a session's processes use: CPU time so far and resident memory now, summed over the
 * session's live process tree as Linux's `/proc` shows it (`stat` utime+stime plus the CPU time
 * of the children each process has reaped, `status` VmRSS, children from
 * `task/<tid>/children`). Read when asked, never sampled in the background, through libc (Deno's
 * own file API refuses other processes' `/proc` entries without `--allow-all`).
 *
 * It only reads `/proc`; it must never signal or otherwise touch a process, and never fail a
 * caller: what cannot be read (a process that just exited, another kernel) is left out, and a
 * tree it cannot read at all has no usage.
 *
 * @module
 */

import { listDir, readSmallFile } from "../ffi/libc.ts";

/** A process tree's usage. */
export interface Usage {
  /** User plus system CPU time, of the live processes and the children they reaped, in s. */
  cpu_seconds: number;
  /** Resident memory, in bytes (shared pages count once per process). */
  rss_bytes: number;
}

/** The `/proc` clock tick: `USER_HZ`, fixed at 100 by the Linux ABI. */
const TICKS_PER_SECOND = 100;

/** At most this many processes are read per tree. */
const MAX_PROCESSES = 1024;

/** The usage of `pid` and its descendants, or undefined when `pid` cannot be read. */
export function treeUsage(pid: number): Usage | undefined {
  let ticks = 0;
  let rssKiB = 0;
  let read = 0;
  const pending = [pid];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const own = processUsage(next);
    if (!own) continue;
    read++;
    ticks += own.ticks;
    rssKiB += own.rssKiB;
    if (read + pending.length < MAX_PROCESSES) pending.push(...children(next));
  }
  if (read === 0) return undefined;
  return { cpu_seconds: ticks / TICKS_PER_SECOND, rss_bytes: rssKiB * 1024 };
}

function processUsage(pid: number): { ticks: number; rssKiB: number } | undefined {
  const stat = readSmallFile(`/proc/${pid}/stat`);
  if (stat === undefined) return undefined;
  // Fields after the command name (which may hold spaces and parentheses): state is field 3,
  // utime, stime, cutime and cstime are fields 14 to 17.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const ticks = fields.slice(11, 15).reduce((sum, field) => sum + Number(field), 0);
  if (!Number.isFinite(ticks)) return undefined;
  const rss = /^VmRSS:\s+(\d+) kB$/m.exec(readSmallFile(`/proc/${pid}/status`, 8192) ?? "");
  return { ticks, rssKiB: rss ? Number(rss[1]) : 0 };
}

function children(pid: number): number[] {
  let tasks: string[];
  try {
    tasks = listDir(`/proc/${pid}/task`).filter((name) => /^\d+$/.test(name));
  } catch {
    return [];
  }
  return tasks.flatMap((tid) =>
    (readSmallFile(`/proc/${pid}/task/${tid}/children`) ?? "").split(" ").filter(Boolean)
      .map(Number)
  );
}
