/**
 * Scale: open N idle `cat` sessions and keep them alive; time the opening, read the server's
 * resident memory, and time `/healthz` while they live against `/healthz` on the same server
 * before they existed. The sessions end with the server's SIGTERM shutdown, which bench.ts
 * times for every server.
 * @module
 */

import { UexecClient } from "../client.ts";
import { log, ticker } from "../log.ts";
import { inParallel } from "../pool.ts";
import { row } from "../report.ts";
import { openCat } from "../sessions.ts";
import { summarize, type Summary } from "../stats.ts";
import { connect, type Context, type Outcome, startServer } from "../workload.ts";

/** Sessions opened at once. */
const OPEN_WIDTH = 16;

/** `/healthz` times of `n` sequential calls. */
export async function healthzLatency(client: UexecClient, n: number): Promise<Summary> {
  const samples: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await client.healthz();
    samples.push(performance.now() - t0);
  }
  return summarize(samples);
}

export async function idleSessions(ctx: Context): Promise<Outcome> {
  const n = ctx.sizes.idleSessions;
  const workload = `${n.toLocaleString("en-US")} live idle sessions`;
  await using server = await startServer(ctx);
  const client = connect(ctx, server);
  const healthzBefore = await healthzLatency(client, ctx.sizes.healthzRuns);
  const memBefore = server.memory();
  log(`opening ${n} idle cat sessions, ${OPEN_WIDTH} at a time`);
  let open = 0;
  const tick = ticker("sessions open", n);
  const t0 = performance.now();
  await inParallel(n, OPEN_WIDTH, async () => {
    await openCat(client);
    tick(++open);
  });
  const openS = (performance.now() - t0) / 1000;
  const memAfter = server.memory();
  log(`all open in ${openS.toFixed(2)} s, server RSS ${memAfter.rssMiB} MiB`);
  log(`/healthz x${ctx.sizes.healthzRuns} while they live`);
  const healthzDuring = await healthzLatency(client, ctx.sizes.healthzRuns);
  return {
    rows: [
      row({
        workload,
        metric: "time to open all",
        unit: "s",
        uexec: Math.round(openS * 100) / 100,
        goal: { op: "<=", value: 10, text: "<= 10 s" },
        note: `${OPEN_WIDTH} exec_command calls in flight; each session is ` +
          `\`echo cat-ready; exec cat\` returned by until`,
      }),
      row({
        workload,
        metric: "server RSS",
        unit: "MiB",
        uexec: memAfter.rssMiB,
        baseline: { value: memBefore.rssMiB, label: "no sessions" },
        goal: { op: "<=", value: 3072, text: "<= 3 GiB" },
      }),
      row({
        workload,
        metric: "/healthz p99",
        unit: "ms",
        uexec: healthzDuring.p99,
        baseline: { value: healthzBefore.p99, label: "no sessions" },
        goal: { op: "<=", value: 10, text: "<= 10 ms" },
      }),
    ],
    details: {
      open_seconds: openS,
      memory_before: memBefore,
      memory_after: memAfter,
      healthz_before_ms: healthzBefore,
      healthz_during_ms: healthzDuring,
    },
  };
}
