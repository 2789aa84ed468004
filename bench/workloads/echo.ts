/**
 * Spawn round trip: `exec_command` of `echo hi` until its exit and output are back, unsandboxed and
 * under `workspace-write`, next to `sh -c true` spawned directly; also what the default login shell
 * costs here, and whether the HTTP client reused its connection. The `echo` goal's floor is shown
 * beside it: the raw spawn plus what no request through uexec can skip, an HTTP round trip
 * (`GET /healthz` without a token, which answers `ok` alone) and the session's cgroup (the cgroup
 * cost row).
 * @module
 */

import { rawSpawn } from "../baselines.ts";
import { type ExecRequest, HttpError, UexecClient } from "../client.ts";
import { log, ticker } from "../log.ts";
import { tcpSockets } from "../procs.ts";
import { noFigure, type Row, row } from "../report.ts";
import { SH } from "../sessions.ts";
import { summarize, type Summary } from "../stats.ts";
import { connect, type Context, type Outcome, peerFigure, startServer } from "../workload.ts";
import { healthzLatency } from "./idle.ts";

const WORKLOAD = "exec echo hi";
const SANDBOXED = "exec echo hi, workspace-write";
const WARMUP = 10;

/** Times `n` exec_command calls of `echo hi` (after `warmup` more), checking each exited 0 with "hi"; also summarises the server's own wall_time_seconds. */
async function timeEcho(
  client: UexecClient,
  n: number,
  extra: Partial<ExecRequest>,
  label: string,
  warmup = WARMUP,
): Promise<{ summary: Summary; serverWall: Summary; sample: unknown; samples: number[] }> {
  const samples: number[] = [];
  const serverWall: number[] = [];
  const tick = ticker(label, n);
  let sample: unknown;
  for (let i = 0; i < n + warmup; i++) {
    const t0 = performance.now();
    const res = await client.exec({ cmd: "echo hi", yield_time_ms: 10_000, ...extra });
    const ms = performance.now() - t0;
    if (res.exit_code !== 0 || !res.output.includes("hi") || res.session_id !== undefined) {
      throw new Error(`${label}: unexpected answer ${JSON.stringify(res).slice(0, 300)}`);
    }
    sample = res;
    if (i >= warmup) {
      samples.push(ms);
      serverWall.push(res.wall_time_seconds * 1000);
    }
    tick(i + 1 - warmup);
  }
  return { summary: summarize(samples), serverWall: summarize(serverWall), sample, samples };
}

/**
 * Rounds of a same-run comparison of two servers: many short ones, so that each round's two
 * medians see the machine at nearly the same moment (a shared host's speed drifts by more than
 * the costs compared).
 */
const ROUNDS = 20;

/**
 * `echo hi` (with `extra`) p50 on `client`'s server and on `other`, in alternating rounds of
 * the same run (each goes first in every other round), after warming `other` up with `warmup`
 * runs; also the runs per round, and `diff`: the mean over rounds of the round's median on
 * `client`'s server minus its median on `other` (paired, so drift between rounds cancels).
 */
export async function alternatingP50(
  client: UexecClient,
  other: UexecClient,
  n: number,
  warmup: number,
  extra: Partial<ExecRequest>,
  labels: [string, string],
  otherExtra: Partial<ExecRequest> = extra,
): Promise<{ p50: number; otherP50: number; per: number; diff: number }> {
  const mine: number[] = [];
  const theirs: number[] = [];
  let diffs = 0;
  const per = Math.max(1, Math.round(n / ROUNDS));
  if (warmup > 0) await timeEcho(other, warmup, otherExtra, `${labels[1]}, warm-up`);
  for (let round = 0; round < ROUNDS; round++) {
    const first = round % 2 === 0;
    let mineRound: number[] = [];
    const run = async () =>
      mineRound = (await timeEcho(client, per, extra, `${labels[0]} ${round + 1}`)).samples;
    if (first) await run();
    const theirsRound = (await timeEcho(other, per, otherExtra, `${labels[1]} ${round + 1}`))
      .samples;
    if (!first) await run();
    mine.push(...mineRound);
    theirs.push(...theirsRound);
    diffs += summarize(mineRound).p50 - summarize(theirsRound).p50;
  }
  return {
    p50: summarize(mine).p50,
    otherP50: summarize(theirs).p50,
    per,
    diff: Math.round((diffs / ROUNDS) * 1000) / 1000,
  };
}

/**
 * What using the agents' front-door features costs the `echo hi` p50 against not using them,
 * on the same server in alternating rounds: `output_mode: "plain"` with `until_idle_ms` and
 * `until_input` (issue 12: within 10%).
 */
async function featureCost(client: UexecClient, n: number): Promise<Row> {
  const used = { ...SH, output_mode: "plain", until_idle_ms: 5_000, until_input: true } as const;
  const { p50, otherP50 } = await alternatingP50(client, client, n, 0, used, [
    "plain + waits",
    "raw, no waits",
  ], SH);
  return row({
    workload: "exec echo hi, output_mode plain + until_idle_ms + until_input",
    metric: "p50",
    unit: "ms",
    uexec: p50,
    baseline: { value: otherP50, label: "same, features unused" },
    goal: { op: "<=", value: 1.1, on: "ratio", text: "<= 1.1x unused" },
    note: "alternating rounds on one server, same run",
  });
}

/**
 * `echo hi` p50 with the history on (`client`'s server) and off (a second server with
 * `UEXEC_HISTORY=off`), in alternating rounds of the same run.
 */
async function historyCost(ctx: Context, client: UexecClient, n: number): Promise<Row[]> {
  await using off = await startServer(ctx, { UEXEC_HISTORY: "off" });
  // The history-on server has run 2n commands by now: warm the other one up as much.
  const { p50: p50On, otherP50: p50Off, per, diff } = await alternatingP50(
    client,
    connect(ctx, off),
    n,
    2 * n,
    SH,
    ["history on", "history off"],
  );
  return [
    row({
      workload: "exec echo hi, history off",
      metric: "p50",
      unit: "ms",
      uexec: p50Off,
      note: `${ROUNDS} rounds of ${per} after ${2 * n} warm-up runs, alternating with ` +
        "the history-on server (which goes first in every other round)",
    }),
    row({
      workload: "history cost (echo p50, history on - off)",
      metric: "p50",
      unit: "ms",
      uexec: diff,
      goal: { op: "<=", value: 0.2, text: "<= 0.2 ms" },
      note: `mean over ${ROUNDS} rounds of the round's p50 difference; whole-run p50 on ` +
        `${p50On} ms, off ${p50Off} ms`,
    }),
  ];
}

/**
 * The least an `echo hi` through uexec can take on this host in this run: the raw spawn, an HTTP
 * round trip and the session's cgroup, each measured in the same run; shown against the raw
 * spawn, so that the `<= 1.3x raw spawn` goal can be read against what is reachable at all.
 */
function echoFloor(rawP50: number, httpP50: number, cgroupCost: Row["uexec"]): Row {
  const cgroup = typeof cgroupCost === "number" ? Math.max(0, cgroupCost) : 0;
  return row({
    workload: `${WORKLOAD}: its floor through an HTTP front door`,
    metric: "raw spawn + GET /healthz + cgroup cost (p50s)",
    unit: "ms",
    uexec: Math.round((rawP50 + httpP50 + cgroup) * 1000) / 1000,
    baseline: { value: rawP50, label: "sh -c true" },
    note: `sh -c true ${rawP50} ms + GET /healthz ${httpP50} ms + cgroup ${cgroup} ms: ` +
      "what any exec through uexec pays before its own work",
  });
}

/**
 * What a cgroup per session adds to the `echo hi` p50, unsandboxed and sandboxed: `client`'s
 * server (cgroups where the host allows) against one with `UEXEC_CONTAINMENT=process-group`,
 * in alternating rounds of the same run.
 */
async function containmentCost(ctx: Context, client: UexecClient, n: number): Promise<Row[]> {
  // Sandboxed sessions of a second server need uids of their own.
  await using groups = await startServer(ctx, {
    UEXEC_CONTAINMENT: "process-group",
    UEXEC_UID_RANGE: "2100000000-2100065535",
  });
  const other = connect(ctx, groups);
  const rows: Row[] = [];
  for (
    const [what, extra] of [
      ["unsandboxed", SH],
      ["workspace-write", { ...SH, profile: "workspace-write" }],
    ] as const
  ) {
    const { p50, otherP50, diff } = await alternatingP50(client, other, n, n, extra, [
      `${what}, cgroup`,
      `${what}, process group`,
    ]);
    rows.push(row({
      workload: `cgroup cost (echo p50, ${what})`,
      metric: "p50",
      unit: "ms",
      uexec: diff,
      goal: { op: "<=", value: 0.3, text: "<= 0.3 ms" },
      note: `mean over ${ROUNDS} rounds of the round's p50 difference; whole-run p50 cgroup ` +
        `${p50} ms, process group ${otherP50} ms`,
    }));
  }
  return rows;
}

export async function echoLatency(ctx: Context): Promise<Outcome> {
  const n = ctx.sizes.echoRuns;
  log(`raw spawn baseline: sh -c true x${n}`);
  const raw = await rawSpawn(n);
  await using server = await startServer(ctx);
  const client = connect(ctx, server);
  const port = Number(new URL(server.url).port);

  log(`exec echo hi x${n} (sh -c, unsandboxed)`);
  const sockets0 = tcpSockets(port);
  const plain = await timeEcho(client, n, SH, "unsandboxed");
  const sockets1 = tcpSockets(port);
  // Loopback shows each connection twice (client and server ends).
  const keepAlive = {
    requests: n + WARMUP,
    connections_open: sockets1.established / 2,
    closed_connections: sockets1.timeWait - sockets0.timeWait,
  };
  log(`keep-alive: ${JSON.stringify(keepAlive)}`);
  // Without a valid token /healthz answers `ok` alone: a request through the whole front door
  // (relay, Deno.serve, routing, the token's check) that does nothing else.
  log(`GET /healthz x${n}, unauthenticated (an HTTP round trip through the same front door)`);
  const http = await healthzLatency(new UexecClient(server.url, "-", ctx.signal, ctx.transport), n);

  const rows: Row[] = [
    row({
      workload: WORKLOAD,
      metric: "p50",
      unit: "ms",
      uexec: plain.summary.p50,
      baseline: { value: raw.p50, label: "sh -c true" },
      peer: peerFigure(ctx, (p) => p.echoP50),
      goal: { op: "<=", value: 1.3, on: "ratio", text: "<= 1.3x raw spawn" },
    }),
    row({
      workload: WORKLOAD,
      metric: "p99",
      unit: "ms",
      uexec: plain.summary.p99,
      baseline: { value: raw.p99, label: "sh -c true" },
      peer: peerFigure(ctx, (p) => p.echoP99),
      goal: { op: "<=", value: 8, text: "<= 8 ms" },
    }),
    row({
      workload: "HTTP keep-alive",
      metric: "connections closed",
      unit: "",
      uexec: keepAlive.closed_connections,
      goal: { op: "==", value: 0, text: "0" },
      note: `${keepAlive.requests} sequential requests, ${keepAlive.connections_open} ` +
        `connection(s) open afterwards (from /proc/net/tcp)`,
    }),
  ];

  let sandboxed: Awaited<ReturnType<typeof timeEcho>> | "skipped (no sandbox yet)";
  log(`exec echo hi x${n} (sh -c, profile workspace-write)`);
  try {
    sandboxed = await timeEcho(client, n, { ...SH, profile: "workspace-write" }, "workspace-write");
  } catch (e) {
    if (!(e instanceof HttpError && e.status === 400)) throw e;
    log(`  workspace-write refused with 400: ${e.body.slice(0, 200)}`);
    sandboxed = "skipped (no sandbox yet)";
  }
  if (typeof sandboxed === "string") {
    rows.push(noFigure(SANDBOXED, "skipped", sandboxed));
  } else {
    const s = sandboxed.summary;
    rows.push(
      row({
        workload: SANDBOXED,
        metric: "p50",
        unit: "ms",
        uexec: s.p50,
        baseline: { value: plain.summary.p50, label: "uexec unsandboxed" },
        peer: peerFigure(ctx, (p) => p.sandboxedTrueP50),
        goal: { op: "<=", value: 1.2, on: "ratio", text: "<= 1.2x unsandboxed" },
        note: "peer: `true` under its bubblewrap+seccomp workspace-write sandbox",
      }),
      row({
        workload: SANDBOXED,
        metric: "p99",
        unit: "ms",
        uexec: s.p99,
        baseline: { value: raw.p99, label: "sh -c true" },
      }),
      row({
        workload: "sandbox cost (p50 sandboxed - unsandboxed)",
        metric: "p50",
        unit: "ms",
        uexec: Math.round((s.p50 - plain.summary.p50) * 1000) / 1000,
        peer: peerFigure(ctx, (p) => Math.round((p.sandboxedTrueP50 - p.trueP50) * 1000) / 1000),
        goal: { op: "<", value: 1, text: "< 1 ms" },
      }),
    );
  }

  log(`exec echo hi, output_mode plain and waits vs none (x${n} each)`);
  rows.push(await featureCost(client, n));
  log(`exec echo hi, history on vs off (x${n} each)`);
  rows.push(...await historyCost(ctx, client, n));
  log(`exec echo hi, cgroup vs process group (x${n} each, unsandboxed and sandboxed)`);
  const containment = await containmentCost(ctx, client, n);
  rows.push(...containment);
  rows.push(echoFloor(raw.p50, http.p50, containment[0].uexec));

  const m = ctx.sizes.loginShellRuns;
  log(`exec echo hi x${m} with the default shell (login)`);
  // The dotfiles dominate (up to a second a run on some hosts): one warm-up is enough.
  const login = await timeEcho(client, m, {}, "default shell", 1);
  rows.push(row({
    workload: "exec echo hi, default login shell",
    metric: "p50",
    unit: "ms",
    uexec: login.summary.p50,
    baseline: { value: raw.p50, label: "sh -c true" },
    note: `${m} runs with no shell/login fields: $SHELL -lc runs the user's dotfiles on every ` +
      `spawn; the rows above use {shell: "/bin/sh", login: false}`,
  }));

  return {
    rows,
    details: {
      raw_spawn_sh_c_true_ms: raw,
      unsandboxed_ms: plain.summary,
      unsandboxed_wall_time_seconds_as_ms: plain.serverWall,
      unsandboxed_sample_response: plain.sample,
      workspace_write_ms: typeof sandboxed === "string" ? sandboxed : sandboxed.summary,
      workspace_write_wall_time_seconds_as_ms: typeof sandboxed === "string"
        ? null
        : sandboxed.serverWall,
      workspace_write_sample_response: typeof sandboxed === "string" ? null : sandboxed.sample,
      default_login_shell_ms: login.summary,
      keep_alive: keepAlive,
    },
  };
}
