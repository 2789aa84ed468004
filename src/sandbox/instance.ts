/**
 * A server instance's name, `i<pid>-<start time>`, under which it keeps what it makes on the
 * host (session cgroups, sandbox domain directories, the HTTP listener's private socket), whether
 * the instance a name describes still runs (a pid reused later has another start time, so a later
 * server can tell what a dead one left), and which directories dead ones left. It only reads; it
 * must never call an instance dead that still runs.
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

/** The temporary directory, as Deno's own temporary files find it. */
export function tempRoot(): string {
  return Deno.env.get("TMPDIR") || "/tmp";
}

/**
 * The directories in `root` that instances no longer running left there: entries whose name
 * `pattern` matches with an instance's name as its first group, and only real directories of
 * this process's uid (never a link, a file, or a look-alike another user made).
 */
export async function* deadInstanceDirs(root: string, pattern: RegExp): AsyncGenerator<string> {
  for await (const entry of Deno.readDir(root)) {
    const instance = pattern.exec(entry.name)?.[1];
    if (!entry.isDirectory || instance === undefined || instanceRuns(instance)) continue;
    const path = `${root}/${entry.name}`;
    const info = await Deno.lstat(path).catch(() => undefined);
    if (info?.isDirectory && info.uid === Deno.uid()) yield path;
  }
}

/** Process `pid`'s start time in clock ticks since boot, or undefined when it is gone. */
function startTime(pid: number): number | undefined {
  const stat = readSmallFile(`/proc/${pid}/stat`);
  if (stat === undefined) return undefined;
  // Fields after the command name (which may hold spaces) start at field 3; starttime is 22.
  const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(rest[19]);
}
