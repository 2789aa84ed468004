/**
 * The standard Prometheus process metrics of the server (`process_cpu_seconds_total`,
 * `process_resident_memory_bytes`, `process_virtual_memory_bytes`, `process_open_fds`,
 * `process_max_fds`, `process_start_time_seconds`), named and computed as the official clients
 * do, read from `/proc/self` when scraped. prom-client's `collectDefaultMetrics` cannot serve
 * them under Deno: it reports 0 for memory and descriptors, no descriptor limit and a start time
 * in whole seconds. The files are read through libc, so no Deno read permission is involved.
 *
 * It reads only the server's own process and must never fail a scrape over a file it cannot
 * read: such a metric keeps its last value.
 *
 * @module
 */

import { Counter, Gauge, type Registry } from "prom-client";
import { listDir, OsError, readSmallFile } from "../ffi/libc.ts";

/**
 * Clock ticks a second in `/proc` times (USER_HZ, what `sysconf(_SC_CLK_TCK)` answers): the
 * kernel's ABI fixes it at 100 on x86_64, the one architecture uexec runs on.
 */
const USER_HZ = 100;

/** The fields of `/proc/self/stat` after the command name (field 3, `state`, is index 0). */
function ownStat(): string[] | undefined {
  const stat = readSmallFile("/proc/self/stat", 1024);
  // The command name is in parentheses and may hold spaces or parentheses itself.
  return stat?.slice(stat.lastIndexOf(")") + 2).split(" ");
}

/** `/proc/<pid>/stat` field `n` (as proc(5) numbers them) of `fields` from {@link ownStat}. */
function field(fields: string[], n: number): number {
  return Number(fields[n - 3]);
}

/** The soft limit on open descriptors, from `/proc/self/limits` (undefined when unlimited). */
function maxFds(): number | undefined {
  const limits = readSmallFile("/proc/self/limits", 4096) ?? "";
  const soft = /^Max open files\s+(\d+)/m.exec(limits)?.[1];
  return soft === undefined ? undefined : Number(soft);
}

/** When the process started, in seconds since the epoch (to the clock tick). */
function startTime(): number | undefined {
  const fields = ownStat();
  const uptime = Number.parseFloat(readSmallFile("/proc/uptime", 128) ?? "");
  if (!fields || !Number.isFinite(uptime)) return undefined;
  // starttime counts ticks since boot; uptime is seconds since boot, now.
  return Date.now() / 1000 - uptime + field(fields, 22) / USER_HZ;
}

/** Register the process metrics in `registry`. */
export function registerProcessMetrics(registry: Registry): void {
  const registers = [registry];
  new Counter({
    name: "process_cpu_seconds_total",
    help: "Total user and system CPU time spent in seconds.",
    registers,
    collect() {
      const fields = ownStat();
      if (!fields) return;
      this.reset();
      this.inc((field(fields, 14) + field(fields, 15)) / USER_HZ);
    },
  });
  new Gauge({
    name: "process_resident_memory_bytes",
    help: "Resident memory size in bytes.",
    registers,
    collect() {
      this.set(Deno.memoryUsage().rss);
    },
  });
  new Gauge({
    name: "process_virtual_memory_bytes",
    help: "Virtual memory size in bytes.",
    registers,
    collect() {
      const fields = ownStat();
      if (fields) this.set(field(fields, 23));
    },
  });
  new Gauge({
    name: "process_open_fds",
    help: "Number of open file descriptors.",
    registers,
    collect() {
      // Counting the directory's own descriptor, as the official clients do.
      try {
        this.set(listDir("/proc/self/fd").filter((name) => !name.startsWith(".")).length);
      } catch (err) {
        if (!(err instanceof OsError)) throw err; // no descriptor free to open it: as it was
      }
    },
  });
  new Gauge({
    name: "process_max_fds",
    help: "Maximum number of open file descriptors.",
    registers,
    collect() {
      const max = maxFds();
      if (max !== undefined) this.set(max);
    },
  });
  const started = startTime();
  if (started !== undefined) {
    new Gauge({
      name: "process_start_time_seconds",
      help: "Start time of the process since unix epoch in seconds.",
      registers,
    }).set(started);
  }
}
