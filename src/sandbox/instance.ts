/**
 * A server instance's name, `i<pid>-<start time>`, under which it keeps what it makes on the
 * host (session cgroups, sandbox domain directories), and whether the instance a name describes
 * still runs: a pid reused later has another start time, so a later server can tell what a dead
 * one left. It only reads `/proc`; it must never call an instance dead that still runs.
 *
 * @module
 */

import { readSmallFile } from "../ffi/libc.ts";

/** What an instance name looks like. */
export const INSTANCE_NAME = /^i(\d+)-(\d+)$/;

/** The instance name of process `pid` (this server's by default). */
export function instanceName(pid = Deno.pid): string {
  return `i${pid}-${startTime(pid)}`;
}

/** Whether the instance called `name` (an {@link INSTANCE_NAME}) still runs. */
export function instanceRuns(name: string): boolean {
  const [, pid, start] = INSTANCE_NAME.exec(name) ?? [];
  return pid !== undefined && startTime(Number(pid)) === Number(start);
}

/** Process `pid`'s start time in clock ticks since boot, or undefined when it is gone. */
function startTime(pid: number): number | undefined {
  const stat = readSmallFile(`/proc/${pid}/stat`);
  if (stat === undefined) return undefined;
  // Fields after the command name (which may hold spaces) start at field 3; starttime is 22.
  const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(rest[19]);
}
