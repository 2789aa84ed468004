/**
 * Keystroke round trip: `write_stdin` of a line to an interactive `cat` in a PTY, returning
 * (via `until`) once cat has echoed it back, compared with the Codex peer's write -> echo.
 * @module
 */

import { log, ticker } from "../log.ts";
import { row } from "../report.ts";
import { closeSessions, openCat, roundTrip } from "../sessions.ts";
import { summarize } from "../stats.ts";
import { connect, type Context, type Outcome, peerColumns, startServer } from "../workload.ts";

const WORKLOAD = "write_stdin ping -> cat";
const WARMUP = 20;

export async function writeLatency(ctx: Context): Promise<Outcome> {
  const n = ctx.sizes.writeRuns;
  await using server = await startServer(ctx);
  const client = connect(ctx, server);
  const id = await openCat(client);
  log(`write_stdin "ping<i>\\n" to cat x${n}, until both echoes are back`);
  const samples: number[] = [];
  const tick = ticker("write_stdin", n);
  const cpu0 = server.cpuSeconds();
  try {
    for (let i = 0; i < n + WARMUP; i++) {
      const ms = await roundTrip(client, id, `ping${i}`);
      if (i >= WARMUP) samples.push(ms);
      tick(i + 1 - WARMUP);
    }
  } finally {
    await closeSessions(client, [id]);
  }
  const serverCpuMs = (server.cpuSeconds() - cpu0) * 1000;
  const s = summarize(samples);
  const note = 'chars "ping<i>\\n", until /ping<i>[\\s\\S]*ping<i>/: returns when cat\'s own ' +
    "output is back, not just the line discipline's echo (like the peer's figure)";
  return {
    rows: [
      row({
        workload: WORKLOAD,
        metric: "p50",
        unit: "ms",
        uexec: s.p50,
        ...peerColumns(ctx, (p) => p.catP50),
        goal: { op: "<=", value: 1, text: "<= 1 ms" },
        note,
      }),
      row({
        workload: WORKLOAD,
        metric: "p99",
        unit: "ms",
        uexec: s.p99,
        ...peerColumns(ctx, (p) => p.catP99),
        goal: { op: "<=", value: 5, text: "<= 5 ms" },
      }),
    ],
    details: {
      round_trip_ms: s,
      server_cpu_ms_per_round_trip: Math.round((serverCpuMs / (n + WARMUP)) * 1000) / 1000,
    },
  };
}
