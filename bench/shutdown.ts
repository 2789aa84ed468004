/**
 * Every server the bench started is stopped with SIGTERM; issue 2 wants an exit within 3 s and
 * no orphans. This turns the stop reports into two rows.
 * @module
 */

import { type Row, row } from "./report.ts";
import type { StopReport } from "./server.ts";

/** A server's stop report and the workload that ran it. */
export interface Stop extends StopReport {
  workload: string;
  pid: number;
}

/** The slowest exit after SIGTERM, and the orphans left, over all servers. */
export function shutdownRows(stops: Stop[]): Row[] {
  if (stops.length === 0) return [];
  const slowest = stops.reduce((a, b) => (b.exitMs > a.exitMs ? b : a));
  const orphans = stops.filter((s) => s.orphans.length > 0);
  const killed = stops.filter((s) => s.killed).map((s) => s.workload);
  return [
    row({
      workload: "server exit on SIGTERM",
      metric: "slowest of all servers",
      unit: "ms",
      uexec: slowest.exitMs,
      goal: { op: "<=", value: 3000, text: "<= 3 s (issue 2)" },
      note: `${stops.length} servers; slowest after "${slowest.workload}"` +
        (killed.length > 0 ? `; SIGKILL needed after ${killed.join(", ")}` : ""),
    }),
    row({
      workload: "server exit on SIGTERM",
      metric: "processes left behind",
      unit: "",
      uexec: orphans.reduce((n, s) => n + s.orphans.length, 0),
      goal: { op: "==", value: 0, text: "0" },
      ...(orphans.length > 0
        ? { note: `after ${orphans.map((s) => s.workload).join(", ")} (the bench killed them)` }
        : {}),
    }),
  ];
}
