/**
 * The concurrent cat workload with stock clients, one transport after another on one server:
 * Deno's built-in `WebSocket` and Node's `ws` over `GET /v1/ws` (a connection per session,
 * subscribed, writes with `yield_time_ms: 0`), and Node's `http` with a keep-alive agent over
 * the JSON API. For each: round trips/s and p99 (median of the timed passes, next to the Codex
 * peer's stdio figure) and the server's CPU per round trip (utime + stime from /proc over the
 * timed passes). The clients are bench/stock_clients.mjs, in a subprocess each; the Node
 * clients need `node` on PATH, and `ws` is installed with npm into a scratch directory.
 * @module
 */

import { register } from "../cleanup.ts";
import { log } from "../log.ts";
import { inParallel } from "../pool.ts";
import { noFigure, type Row, row } from "../report.ts";
import { closeSessions, openCat } from "../sessions.ts";
import { summarize } from "../stats.ts";
import { connect, type Context, type Outcome, peerColumns, startServer } from "../workload.ts";

const WS_VERSION = "8.23.0";
const OPEN_WIDTH = 10;
const CLIENT = new URL("../stock_clients.mjs", import.meta.url).pathname;

type Transport = "deno-ws" | "ws" | "http";
const LABEL: Record<Transport, string> = {
  "deno-ws": "Deno WebSocket",
  ws: "Node ws",
  http: "Node http (JSON API)",
};
/** Issue 34's goals: round trips/s as a multiple of the peer's, and server CPU per round trip. */
const RATE_GOAL: Record<Transport, number> = { "deno-ws": 1.5, ws: 1.5, http: 1.2 };
const CPU_GOAL_MS: Record<Transport, number> = { "deno-ws": 0.05, ws: 0.05, http: 0.08 };
/** Sequential round trips of the one-session WebSocket figure. */
const ONE_SESSION_ROUNDS = 500;

async function hasNode(): Promise<boolean> {
  try {
    return (await new Deno.Command("node", { args: ["--version"], stdout: "null" }).output())
      .success;
  } catch {
    return false;
  }
}

/** Installs npm `ws` into a scratch directory; returns the module's path. */
async function installWs(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "uexec-bench-ws-" });
  register(() => Deno.remove(dir, { recursive: true }));
  const res = await new Deno.Command("npm", {
    args: ["install", "--silent", "--no-audit", "--no-fund", "--prefix", dir, `ws@${WS_VERSION}`],
    stdout: "null",
    stderr: "piped",
  }).output();
  if (!res.success) throw new Error(`npm install ws: ${new TextDecoder().decode(res.stderr)}`);
  return `${dir}/node_modules/ws/index.js`;
}

interface Pass {
  wall_s: number;
  latencies_ms: number[];
}

/** Runs the stock client on `ids`; the server's CPU is read around the timed passes. */
async function drive(
  transport: Transport,
  cfg: Record<string, unknown>,
  cpu: () => number,
): Promise<{ passes: Pass[]; cpuS: number }> {
  const [cmd, args] = transport === "deno-ws"
    ? [Deno.execPath(), ["run", "--allow-net", CLIENT]]
    : ["node", [CLIENT]];
  const child = new Deno.Command(cmd, {
    args: [...args, JSON.stringify({ ...cfg, transport })],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = "";
  const line = async (): Promise<string> => {
    for (;;) {
      const nl = buffered.indexOf("\n");
      if (nl >= 0) {
        const got = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        return got;
      }
      const { value, done } = await lines.read();
      if (done) throw new Error(`${transport} client ended early`);
      buffered += value;
    }
  };
  if ((await line()) !== "warm") throw new Error(`${transport} client: no warm-up`);
  const cpu0 = cpu();
  const stdin = child.stdin.getWriter();
  await stdin.write(new TextEncoder().encode("go\n"));
  const result = JSON.parse(await line()) as { passes: Pass[] };
  const cpuS = cpu() - cpu0;
  await stdin.close();
  await lines.cancel();
  await child.status;
  return { passes: result.passes, cpuS };
}

export async function stockClients(ctx: Context): Promise<Outcome> {
  const { concurrentSessions: n, concurrentRounds: rounds, concurrentPasses: passes } = ctx.sizes;
  await using server = await startServer(ctx);
  const client = connect(ctx, server);
  const node = await hasNode();
  const wsModule = node ? await installWs() : undefined;
  const wsUrl = (await (await fetch(`${server.url}/healthz`, {
    headers: { authorization: `Bearer ${server.token}` },
  })).json())
    .websocket as string;
  const rows: Row[] = [];
  const details: Record<string, unknown> = { node: node ? "node" : "absent" };
  for (const transport of ["deno-ws", "ws", "http"] as Transport[]) {
    const workload = `${n} cat sessions x ${rounds} round trips, ${LABEL[transport]}`;
    if (transport !== "deno-ws" && !node) {
      rows.push(noFigure(workload, "skipped", "no node on PATH"));
      continue;
    }
    const ids: number[] = [];
    try {
      await inParallel(n, OPEN_WIDTH, async () => ids.push(await openCat(client)));
      log(`${LABEL[transport]}: ${n} sessions x ${rounds} round trips, ${passes} passes`);
      const got = await drive(transport, {
        url: server.url,
        wsUrl,
        token: server.token,
        ids,
        rounds,
        passes,
        wsModule,
      }, () => server.cpuSeconds());
      const rates = got.passes.map((p) => Math.round(p.latencies_ms.length / p.wall_s));
      const median = [...got.passes].sort((a, b) =>
        a.latencies_ms.length / a.wall_s - b.latencies_ms.length / b.wall_s
      )[got.passes.length >> 1];
      const s = summarize(median.latencies_ms);
      const roundTrips = passes * n * rounds;
      const cpuMs = Math.round((got.cpuS * 1e6) / roundTrips) / 1000;
      rows.push(
        row({
          workload,
          metric: "round trips/s",
          unit: "/s",
          uexec: Math.round(median.latencies_ms.length / median.wall_s),
          ...peerColumns(ctx, (p) =>
            p.concurrentRoundTripsPerS),
          goal: ctx.peer === "skipped" ? undefined : {
            op: ">=",
            value: RATE_GOAL[transport],
            on: "ratio",
            text: `>= ${RATE_GOAL[transport]}x codex`,
          },
        }),
        row({
          workload,
          metric: "p99",
          unit: "ms",
          uexec: s.p99,
          ...peerColumns(ctx, (p) => p.concurrentP99),
        }),
        row({
          workload,
          metric: "server CPU per round trip",
          unit: "ms",
          uexec: cpuMs,
          goal: {
            op: "<=",
            value: CPU_GOAL_MS[transport],
            text: `<= ${CPU_GOAL_MS[transport]} ms`,
          },
        }),
      );
      details[transport] = { passes: rates, round_trip_ms: s, server_cpu_s: got.cpuS };
    } finally {
      await closeSessions(client, ids);
    }
  }
  rows.push(await oneSessionOverWebSocket(ctx, server, wsUrl, client));
  return { rows, details };
}

/**
 * The write -> echo round trip of one session over Deno's WebSocket (the write workload's
 * figure over HTTP has its own row), next to the peer's one-session figure (over stdio).
 */
async function oneSessionOverWebSocket(
  ctx: Context,
  server: Awaited<ReturnType<typeof startServer>>,
  wsUrl: string,
  client: ReturnType<typeof connect>,
): Promise<Row> {
  const id = await openCat(client);
  try {
    log(`Deno WebSocket: one session x ${ONE_SESSION_ROUNDS} round trips`);
    const got = await drive("deno-ws", {
      url: server.url,
      wsUrl,
      token: server.token,
      ids: [id],
      rounds: ONE_SESSION_ROUNDS,
      passes: 1,
    }, () => server.cpuSeconds());
    return row({
      workload: "write_stdin ping -> cat, one session, Deno WebSocket",
      metric: "p50",
      unit: "ms",
      uexec: summarize(got.passes[0].latencies_ms).p50,
      ...peerColumns(ctx, (p) => p.catP50),
      goal: { op: "<=", value: 1, on: "ratio", text: "<= 1.0x codex" },
      note: "pushed output over the session's subscribed WebSocket; the peer over stdio",
    });
  } finally {
    await closeSessions(client, [id]);
  }
}
