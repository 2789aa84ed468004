/**
 * Linux /proc readers: a process's resident memory and CPU time, its live descendants (to find orphans a
 * server leaves behind), and loopback TCP sockets by port (to check connection reuse).
 * @module
 */

import { listProcDir, readProcText } from "./procfs.ts";

/** Resident set size now and at its peak, in MiB, from /proc/<pid>/status. */
export interface Memory {
  rssMiB: number;
  hwmMiB: number;
}

/** Reads VmRSS and VmHWM of `pid`. */
export function memory(pid: number): Memory {
  const status = readProcText(`/proc/${pid}/status`);
  const kib = (field: string) => {
    const m = status.match(new RegExp(`^${field}:\\s+(\\d+) kB`, "m"));
    if (!m) throw new Error(`no ${field} in /proc/${pid}/status`);
    return Number(m[1]);
  };
  return {
    rssMiB: Math.round(kib("VmRSS") / 102.4) / 10,
    hwmMiB: Math.round(kib("VmHWM") / 102.4) / 10,
  };
}

/**
 * The fields of /proc/<pid>/stat after "pid (comm) " (comm may hold spaces and parentheses):
 * state is 0, ppid 1, utime 11, stime 12 (clock ticks, 100 per second), starttime 19. Throws when
 * the process is gone.
 */
export function statFields(pid: number | string): string[] {
  const stat = readProcText(`/proc/${pid}/stat`);
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
}

/** CPU seconds (user + system) `pid` has used so far, from /proc/<pid>/stat. */
export function cpuSeconds(pid: number): number {
  const f = statFields(pid);
  return (Number(f[11]) + Number(f[12])) / 100;
}

/** Parent pid and state of every process, from /proc/<pid>/stat. */
function processTable(): Map<number, { ppid: number; state: string }> {
  const table = new Map<number, { ppid: number; state: string }>();
  for (const name of listProcDir("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const rest = statFields(name);
      table.set(Number(name), { state: rest[0], ppid: Number(rest[1]) });
    } catch {
      // The process exited while we listed /proc.
    }
  }
  return table;
}

/** Pids of all live (non-zombie) descendants of `pid`. */
export function descendants(pid: number): number[] {
  const table = processTable();
  const found: number[] = [];
  const queue = [pid];
  while (queue.length > 0) {
    const parent = queue.pop()!;
    for (const [child, info] of table) {
      if (info.ppid === parent && info.state !== "Z") {
        found.push(child);
        queue.push(child);
      }
    }
  }
  return found;
}

/** Whether `pid` still exists and is not a zombie. */
export function alive(pid: number): boolean {
  try {
    return statFields(pid)[0] !== "Z";
  } catch {
    return false;
  }
}

/** TCP sockets with `port` on either end, by state (ESTABLISHED and TIME_WAIT), IPv4 and IPv6. */
export function tcpSockets(port: number): { established: number; timeWait: number } {
  const hex = port.toString(16).toUpperCase().padStart(4, "0");
  let established = 0;
  let timeWait = 0;
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text: string;
    try {
      text = readProcText(file);
    } catch {
      continue;
    }
    for (const line of text.split("\n").slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length < 4) continue;
      if (!f[1].endsWith(`:${hex}`) && !f[2].endsWith(`:${hex}`)) continue;
      if (f[3] === "01") established++;
      if (f[3] === "06") timeWait++;
    }
  }
  return { established, timeWait };
}
