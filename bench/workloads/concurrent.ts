/**
 * Many agents at once: N `cat` sessions, each doing R sequential write -> echo round trips, all
 * sessions concurrently over the pooled keep-alive connections. One untimed pass of the same
 * round trips warms the server (JIT, connection pool) first; then the workload is timed
 * `concurrentPasses` times and the median pass is reported (one pass lasts a quarter of a second, so a
 * single one mostly measures noise on a shared 2-core machine).
 * @module
 */

import { log } from "../log.ts";
import { inParallel } from "../pool.ts";
import { cpuSeconds } from "../procs.ts";
import { row } from "../report.ts";
import { closeSessions, openCat, roundTrip } from "../sessions.ts";
import { summarize } from "../stats.ts";
import { connect, type Context, type Outcome, peerColumns, startServer } from "../workload.ts";

/** Sessions opened at once while setting up. */
const OPEN_WIDTH = 10;

export async function concurrentCats(ctx: Context): Promise<Outcome> {
  const { concurrentSessions: n, concurrentRounds: rounds } = ctx.sizes;
  const workload = `${n} concurrent cat sessions x ${rounds} round trips`;
  await using server = await startServer(ctx);
  const client = connect(ctx, server);
  log(`opening ${n} cat sessions`);
  const t0 = performance.now();
  const ids: number[] = [];
  try {
    await inParallel(n, OPEN_WIDTH, async () => ids.push(await openCat(client)));
    const openMs = performance.now() - t0;
    log(`${n} sessions open in ${openMs.toFixed(0)} ms; ${rounds} round trips each, all at once`);
    await Promise.all(ids.map(async (id, si) => {
      for (let r = 0; r < rounds; r++) await roundTrip(client, id, `w${si}r${r}z`);
    }));
    const passes: { rate: number; latencies: number[]; wallS: number }[] = [];
    const cpu0 = server.cpuSeconds();
    const benchCpu0 = cpuSeconds(Deno.pid);
    for (let pass = 0; pass < ctx.sizes.concurrentPasses; pass++) {
      const latencies: number[] = [];
      const t1 = performance.now();
      await Promise.all(ids.map(async (id, si) => {
        for (let r = 0; r < rounds; r++) {
          latencies.push(await roundTrip(client, id, `p${pass}s${si}r${r}z`));
        }
      }));
      const wallS = (performance.now() - t1) / 1000;
      passes.push({ rate: Math.round(latencies.length / wallS), latencies, wallS });
    }
    const serverCpuS = server.cpuSeconds() - cpu0;
    const benchCpuS = cpuSeconds(Deno.pid) - benchCpu0;
    const median = [...passes].sort((a, b) => a.rate - b.rate)[passes.length >> 1];
    const { rate, latencies, wallS } = median;
    const s = summarize(latencies);
    const roundTrips = passes.length * n * rounds;
    return {
      rows: [
        row({
          workload,
          metric: "round trips/s",
          unit: "/s",
          uexec: rate,
          ...peerColumns(ctx, (p) => p.concurrentRoundTripsPerS),
          goal: { op: ">=", value: 10_000, text: ">= 10,000/s" },
        }),
        row({
          workload,
          metric: "p99",
          unit: "ms",
          uexec: s.p99,
          ...peerColumns(ctx, (p) => p.concurrentP99),
          goal: { op: "<=", value: 25, text: "<= 25 ms" },
        }),
      ],
      details: {
        open_all_ms: Math.round(openMs),
        wall_s: wallS,
        round_trip_ms: s,
        server_cpu_s: serverCpuS,
        passes: passes.map((p) => p.rate),
        server_cpu_ms_per_round_trip: Math.round((serverCpuS * 1e6) / roundTrips) / 1000,
        bench_client_cpu_s: benchCpuS,
      },
    };
  } finally {
    await closeSessions(client, ids);
  }
}
