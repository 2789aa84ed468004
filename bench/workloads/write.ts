/**
 * Keystroke round trip: `write_stdin` of a line to an interactive `cat` in a PTY, returning
 * (via `until`) once cat has echoed it back, compared with the Codex peer's write -> echo.
 * @module
 */

import { libc } from "../../src/ffi/libc.ts";
import { spawnChild } from "../../src/pty/spawn.ts";
import { TerminalProbe } from "../../src/pty/terminal_input.ts";
import { log, ticker } from "../log.ts";
import { type Row, row } from "../report.ts";
import { closeSessions, openCat, roundTrip } from "../sessions.ts";
import { summarize } from "../stats.ts";
import { connect, type Context, type Outcome, peerColumns, startServer } from "../workload.ts";
import type { UexecClient } from "../client.ts";

const WORKLOAD = "write_stdin ping -> cat";
const WARMUP = 20;
const PROBE_ASKS = 20_000;

/**
 * Microseconds of one `waiting_for_input` check (what every answer for a live PTY session
 * pays, asked or not), on a `cat` of this process's own blocked reading its terminal: the
 * same probe the server runs, timed over many asks.
 */
async function probeMicros(): Promise<number> {
  const child = spawnChild({
    argv: ["cat"],
    env: ["PATH=/usr/bin:/bin"],
    cwd: "/",
    stdio: { kind: "pty", size: { cols: 80, rows: 24 } },
  });
  const probe = new TerminalProbe(child.master!, child.pid);
  try {
    // Nothing tells when cat has blocked in read: ask, briefly apart, until it has (bounded).
    for (let i = 0; i < 400 && !probe.ask()?.waiting; i++) {
      await new Promise((r) => setTimeout(r, 5));
    }
    if (!probe.ask()?.waiting) throw new Error("cat never read as waiting for input");
    const t0 = performance.now();
    for (let i = 0; i < PROBE_ASKS; i++) probe.ask();
    return ((performance.now() - t0) * 1000) / PROBE_ASKS;
  } finally {
    probe.close();
    libc().kill(child.pid, 9);
    libc().waitpid(child.pid, new Uint8Array(4), 0);
    libc().close(child.master!);
  }
}

/**
 * The round trip with the agents' front-door features used (`output_mode: "plain"`, and
 * `until_idle_ms` beside the `until` that ends it) against the same round trip without them,
 * on one cat in alternating rounds (issue 12: within 10%).
 */
async function featureCost(client: UexecClient, n: number): Promise<Row> {
  const id = await openCat(client);
  const used: number[] = [];
  const unused: number[] = [];
  const per = Math.max(1, Math.round(n / 10));
  try {
    for (let i = 0; i < WARMUP; i++) await roundTrip(client, id, `warm${i}`);
    for (let round = 0; round < 10; round++) {
      const plain = round % 2 === 0;
      for (let i = 0; i < per; i++) {
        const marker = `r${round}x${i}`;
        const ms = plain
          ? await roundTrip(client, id, marker, { output_mode: "plain", until_idle_ms: 5_000 })
          : await roundTrip(client, id, marker);
        (plain ? used : unused).push(ms);
      }
    }
  } finally {
    await closeSessions(client, [id]);
  }
  return row({
    workload: "write_stdin ping -> cat, output_mode plain + until_idle_ms",
    metric: "p50",
    unit: "ms",
    uexec: summarize(used).p50,
    baseline: { value: summarize(unused).p50, label: "same, features unused" },
    goal: { op: "<=", value: 1.1, on: "ratio", text: "<= 1.1x unused" },
    note: "alternating rounds on one cat, same run",
  });
}

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
  const cpuPerTripUs = (serverCpuMs * 1000) / (n + WARMUP);
  const probeUs = await probeMicros();
  const features = await featureCost(client, n);
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
        goal: { op: "<=", value: 1.1, on: "ratio", text: "<= 1.1x codex over HTTP" },
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
      features,
      row({
        workload: "waiting_for_input check (every live PTY answer)",
        metric: "share of server CPU per round trip",
        unit: "%",
        uexec: Math.round((probeUs / cpuPerTripUs) * 1000) / 10,
        goal: { op: "<=", value: 10, text: "<= 10%" },
        note: `${probeUs.toFixed(1)} us per check (${PROBE_ASKS} on a blocked cat) against ` +
          `${cpuPerTripUs.toFixed(0)} us of server CPU per round trip above, same run`,
      }),
    ],
    details: {
      round_trip_ms: s,
      server_cpu_ms_per_round_trip: Math.round((serverCpuMs / (n + WARMUP)) * 1000) / 1000,
      waiting_for_input_check_us: probeUs,
    },
  };
}
