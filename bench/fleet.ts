/**
 * The fleet's costs (issue 33), each against its single-host counterpart in the same run: the
 * router's (the `write_stdin` round trip to a `cat` through nginx with the shipped
 * deploy/nginx/uexec.conf, against the same session called directly, in alternating rounds) and
 * the store's (`exec_command` `echo hi` on a node whose store is PostgreSQL, against one on
 * SQLite, alternating). It must never leave nginx or PostgreSQL running: both stop when the
 * workload ends, however it ends.
 * @module
 */

import { UexecClient } from "./client.ts";
import { log } from "./log.ts";
import { row } from "./report.ts";
import { closeSessions, openCat, roundTrip, SH } from "./sessions.ts";
import { summarize } from "./stats.ts";
import { connect, type Context, type Outcome, startServer } from "./workload.ts";
import { alternatingP50 } from "./workloads/echo.ts";
import { startCluster } from "../src/fleet/launch/postgres.ts";
import { startRouter } from "../src/fleet/launch/router.ts";

const ROUNDS = 10;
const WARMUP = 20;

/** p50 of round trips through the router and direct, on one session, alternating rounds. */
async function routerCost(ctx: Context, dir: string) {
  await using node = await startServer(ctx);
  const router = await startRouter(`${dir}/router`, 0, [new URL(node.url).host]);
  const direct = connect(ctx, node);
  const routed = new UexecClient(router.url, node.token, ctx.signal, ctx.transport);
  const id = await openCat(direct);
  try {
    const n = ctx.sizes.writeRuns;
    log(
      `write_stdin to cat through nginx and direct, ${ROUNDS} alternating rounds of ${n / ROUNDS}`,
    );
    for (let i = 0; i < WARMUP; i++) {
      await roundTrip(routed, id, `warm-routed${i}`);
      await roundTrip(direct, id, `warm-direct${i}`);
    }
    const through: number[] = [];
    const straight: number[] = [];
    let diffs = 0;
    for (let round = 0; round < ROUNDS; round++) {
      const order = round % 2 === 0 ? [routed, direct] : [direct, routed];
      const samples = new Map<UexecClient, number[]>([[routed, []], [direct, []]]);
      for (const client of order) {
        for (let i = 0; i < n / ROUNDS; i++) {
          samples.get(client)!.push(await roundTrip(client, id, `r${round}i${i}`));
        }
      }
      through.push(...samples.get(routed)!);
      straight.push(...samples.get(direct)!);
      diffs += summarize(samples.get(routed)!).p50 - summarize(samples.get(direct)!).p50;
    }
    return {
      routed: summarize(through).p50,
      direct: summarize(straight).p50,
      diff: Math.round((diffs / ROUNDS) * 1000) / 1000,
    };
  } finally {
    await closeSessions(direct, [id]);
    await router.stop();
  }
}

/** `echo hi` p50 on a PostgreSQL-backed node against a SQLite one, alternating rounds. */
async function storeCost(ctx: Context, dir: string) {
  const cluster = await startCluster(`${dir}/postgres`);
  try {
    await using pg = await startServer(ctx, { UEXEC_STORE: cluster.url, UEXEC_NODE_ID: "bench" });
    await using lite = await startServer(ctx);
    const n = ctx.sizes.echoRuns;
    // The PostgreSQL one is warmed up with n runs first (the SQLite one's first rounds are its
    // warm-up: the p50 over all rounds is what counts).
    const r = await alternatingP50(connect(ctx, lite), connect(ctx, pg), n, n, SH, [
      "store sqlite",
      "store postgres",
    ]);
    return { postgres: r.otherP50, sqlite: r.p50, diff: -r.diff };
  } finally {
    await cluster.stop();
  }
}

export async function fleetCosts(ctx: Context): Promise<Outcome> {
  const dir = await Deno.makeTempDir({ prefix: "uexec-bench-fleet-" });
  // nginx's workers and the postgres user reach their directories beneath it.
  await Deno.chmod(dir, 0o711);
  try {
    const router = await routerCost(ctx, dir);
    const store = await storeCost(ctx, dir);
    return {
      rows: [
        row({
          workload: "fleet router: write_stdin ping -> cat through nginx",
          metric: "p50",
          unit: "ms",
          uexec: router.routed,
          baseline: { value: router.direct, label: "same session, direct" },
        }),
        row({
          workload: "fleet router cost (round trip p50, nginx - direct)",
          metric: "p50",
          unit: "ms",
          uexec: router.diff,
          goal: { op: "<=", value: 0.3, text: "<= +0.3 ms" },
          note: `mean over ${ROUNDS} alternating rounds of the round's p50 difference; ` +
            "deploy/nginx/uexec.conf, keep-alive to the node",
        }),
        row({
          workload: "fleet store: exec echo hi on PostgreSQL",
          metric: "p50",
          unit: "ms",
          uexec: store.postgres,
          baseline: { value: store.sqlite, label: "SQLite (single host)" },
          note: `store cost ${store.diff} ms: mean over alternating rounds of the round's p50 ` +
            "difference; a local throwaway cluster (fsync on), so a network's round trip adds",
        }),
      ],
      details: { router, store },
    };
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}
