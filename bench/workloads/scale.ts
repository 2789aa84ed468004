/**
 * Scale (issue 34): many starts at once, and one session's share of the machine beside another
 * session's flood.
 *
 * - Parallel starts: 1,000 `cat` sessions opened 50 at a time (each returns once cat's first line
 *   is out), on a warmed server; goal <= 2 s. Its same-run baseline: the bench itself starting as
 *   many `sh -c 'echo cat-ready; exec cat'` under `script` (a PTY each), 50 at a time, each
 *   waited for until its first line is out (on a shared machine the absolute time moves 2x).
 * - The neighbour of a flood: a raw session's PTY throughput (`head -c N /dev/zero | base64`,
 *   exec to exit) while a screen session floods the same server (4x as much base64, followed by
 *   the terminal emulator) against the same run alone, alternately, the median pair's ratio;
 *   goal >= 0.7x.
 *
 * The 10,000 idle sessions are ws_idle.ts's.
 * @module
 */

import type { UexecClient } from "../client.ts";
import { log } from "../log.ts";
import { besideScreenFlood, ptyRate } from "../pty_rate.ts";
import { inParallel } from "../pool.ts";
import { type Row, row } from "../report.ts";
import { closeSessions, openCat } from "../sessions.ts";
import { connect, type Context, type Outcome, startServer } from "../workload.ts";

/** Starts in flight at once. */
const WIDTH = 50;
/** Alternating alone/beside pairs of the flood workload (the median pair is reported). */
const FLOOD_PAIRS = 3;

/**
 * The kernel's part of the same starts, without uexec: `n` cats in PTYs of their own (`script`),
 * `WIDTH` at a time, each until its first line is out; ms for all. They are killed after.
 */
async function rawStarts(n: number): Promise<number> {
  const children: Deno.ChildProcess[] = [];
  const t0 = performance.now();
  try {
    await inParallel(n, WIDTH, async () => {
      const child = new Deno.Command("script", {
        args: ["-qfc", "echo cat-ready; exec cat", "/dev/null"],
        stdin: "piped",
        stdout: "piped",
        stderr: "null",
      }).spawn();
      children.push(child);
      const reader = child.stdout.getReader();
      let text = "";
      const decoder = new TextDecoder();
      while (!text.includes("cat-ready")) {
        const { value, done } = await reader.read();
        if (done) throw new Error("a raw cat ended before its first line");
        text += decoder.decode(value, { stream: true });
      }
      reader.releaseLock();
    });
    return performance.now() - t0;
  } finally {
    for (const child of children) {
      try {
        child.kill("SIGKILL");
      } catch { /* gone */ }
    }
    await Promise.all(children.map((c) => Promise.all([c.status, c.stdout.cancel()])));
  }
}

/** `n` cat sessions opened `WIDTH` at a time: wall time and each start's time. */
async function openMany(client: UexecClient, n: number): Promise<{ ms: number; ids: number[] }> {
  const t0 = performance.now();
  const ids = await inParallel(n, WIDTH, () => openCat(client));
  return { ms: performance.now() - t0, ids };
}

async function parallelStarts(ctx: Context): Promise<{ rows: Row[]; details: object }> {
  const n = ctx.sizes.idleSessions;
  const workload = `${n.toLocaleString("en-US")} cat sessions opened, ${WIDTH} at a time`;
  await using server = await startServer(ctx);
  const client = connect(ctx, server);
  // Warm: the JIT, the connection pool and the spare cgroups, with as many starts in flight.
  log(`warming with ${WIDTH * 2} starts, ${WIDTH} at a time`);
  const warm = await openMany(client, WIDTH * 2);
  await closeSessions(client, warm.ids);
  const cpu0 = server.cpuSeconds();
  log(`opening ${n} cat sessions, ${WIDTH} at a time`);
  const { ms, ids } = await openMany(client, n);
  const cpuS = server.cpuSeconds() - cpu0;
  log(`${n} open in ${ms.toFixed(0)} ms (server CPU ${cpuS.toFixed(2)} s)`);
  await closeSessions(client, ids);
  log(`the same ${n} starts without uexec (script, a PTY each), ${WIDTH} at a time`);
  const rawMs = await rawStarts(n);
  log(`${n} raw starts in ${rawMs.toFixed(0)} ms`);
  const s = Math.round(ms / 10) / 100;
  return {
    rows: [row({
      workload,
      metric: "time to open all",
      unit: "s",
      uexec: s,
      baseline: { value: Math.round(rawMs / 10) / 100, label: "script, a PTY each" },
      goal: { op: "<=", value: 2, text: "<= 2 s" },
      note: `server CPU ${cpuS.toFixed(2)} s over ${
        (ms / 1000).toFixed(2)
      } s of wall time (2 cores: at most ${(2 * ms / 1000).toFixed(2)})`,
    })],
    details: { open_ms: ms, raw_open_ms: rawMs, server_cpu_s: cpuS, warm_ms: warm.ms },
  };
}

async function floodNeighbour(ctx: Context): Promise<{ rows: Row[]; details: object }> {
  const bytes = Math.min(ctx.sizes.throughputBytes, 20_000_000);
  const workload = "a raw session beside a screen session's flood";
  await using server = await startServer(ctx);
  const client = connect(ctx, server);
  await ptyRate(client, bytes / 4);
  const pairs: { alone: number; beside: number; ratio: number }[] = [];
  for (let i = 0; i < FLOOD_PAIRS; i++) {
    const alone = await ptyRate(client, bytes);
    const beside = await besideScreenFlood(client, bytes);
    pairs.push({ alone, beside, ratio: beside / alone });
    log(`  alone ${alone.toFixed(1)} MB/s, beside the flood ${beside.toFixed(1)} MB/s`);
  }
  const median = [...pairs].sort((a, b) => a.ratio - b.ratio)[pairs.length >> 1];
  const round = (x: number) => Math.round(x * 10) / 10;
  return {
    rows: [row({
      workload,
      metric: "PTY throughput beside the flood",
      unit: "MB/s",
      uexec: round(median.beside),
      baseline: { value: round(median.alone), label: "alone, same run" },
      goal: { op: ">=", value: 0.7, on: "ratio", text: ">= 0.7x alone" },
      note: `${bytes / 1e6} MB of base64 in a raw session, exec to exit, while a screen session ` +
        `prints 4x as much; median of ${FLOOD_PAIRS} alternating pairs (ratios ${
          pairs.map((p) => p.ratio.toFixed(2)).join(", ")
        })`,
    })],
    details: { pairs },
  };
}

export async function scale(ctx: Context): Promise<Outcome> {
  const starts = await parallelStarts(ctx);
  const flood = await floodNeighbour(ctx);
  return {
    rows: [...starts.rows, ...flood.rows],
    details: { parallel_starts: starts.details, flood_neighbour: flood.details },
  };
}
