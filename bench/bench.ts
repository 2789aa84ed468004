/**
 * `deno task bench`: issue 4's workloads against a uexec server this bench starts itself, over
 * real HTTP on loopback, each next to its baseline measured in the same run (raw spawn, the
 * kernel PTY under `script`, the Codex peer when CODEX_PEER_DIR is set). Prints the table on
 * stdout, progress on stderr, and writes the same to bench/results/latest.json, and the goal rows
 * as a chart of ratios (bench/chart.ts) to bench/results/bench-<time>.svg and latest.svg.
 *
 * Flags: `--quick` (small sizes, a smoke run), `--only <name part>` (run matching workloads
 * only), `--fetch` (HTTP through fetch instead of the lean
 * HTTP/1.1 client), `--entry <file>` (server entry, default main.ts). `BENCH_SERVER_FLAGS` adds
deno flags to every server it starts (e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof` to profile it).
 * Everything started is stopped on failure, time-out and SIGINT/SIGTERM.
 * @module
 */

import { register, stopAll, stopOnSignals } from "./cleanup.ts";
import { fetchTransport, rawTransport } from "./http1.ts";
import { log } from "./log.ts";
import { type PeerFigures, runPeer } from "./peer.ts";
import { readProcText } from "./procfs.ts";
import { chartSvg } from "./chart.ts";
import { formatTable, noFigure, type Row, writeJson, writeText } from "./report.ts";
import { shutdownRows, type Stop } from "./shutdown.ts";
import { type Context, FULL, type Outcome, QUICK } from "./workload.ts";
import { echoLatency } from "./workloads/echo.ts";
import { writeLatency } from "./workloads/write.ts";
import { ptyThroughput } from "./workloads/throughput.ts";
import { concurrentCats } from "./workloads/concurrent.ts";
import { soak } from "./workloads/soak.ts";
import { truncation } from "./workloads/truncation.ts";
import { idleSessions } from "./workloads/idle.ts";
import { unpolledFlood } from "./workloads/flood.ts";
import { outputModes } from "./workloads/output_modes.ts";
import { stockClients } from "./workloads/transports.ts";
import { wsIdleSessions } from "./workloads/ws_idle.ts";
import { egressProxy } from "./workloads/egress.ts";
import { fleetCosts } from "./fleet.ts";
import { scale } from "./workloads/scale.ts";

/** The whole bench stays under 5 minutes: workloads not started by then are skipped. */
const BUDGET_MS = 280_000;

/** Each workload with its own time limit (cut to what is left of the budget). */
const WORKLOADS: { name: string; run: (ctx: Context) => Promise<Outcome>; limitMs: number }[] = [
  { name: "exec echo hi", run: echoLatency, limitMs: 150_000 },
  { name: "write_stdin ping -> cat", run: writeLatency, limitMs: 30_000 },
  { name: "PTY throughput", run: ptyThroughput, limitMs: 60_000 },
  { name: "concurrent cat sessions", run: concurrentCats, limitMs: 30_000 },
  { name: "soak", run: soak, limitMs: 60_000 },
  { name: "stock clients: WebSocket and Node http", run: stockClients, limitMs: 90_000 },
  { name: "truncation", run: truncation, limitMs: 30_000 },
  { name: "live idle sessions", run: idleSessions, limitMs: 60_000 },
  { name: "WebSocket idle sessions", run: wsIdleSessions, limitMs: 120_000 },
  { name: "output no one polls", run: unpolledFlood, limitMs: 120_000 },
  { name: "output modes", run: outputModes, limitMs: 90_000 },
  { name: "egress proxy", run: egressProxy, limitMs: 60_000 },
  { name: "fleet: router and store", run: fleetCosts, limitMs: 90_000 },
  { name: "scale: parallel starts, a flood's neighbour", run: scale, limitMs: 120_000 },
];

function parseArgs(
  args: string[],
): { quick: boolean; entry: string; fetch: boolean; only?: string } {
  let quick = false;
  let fetch = false;
  let entry = "main.ts";
  let only: string | undefined;
  for (let i = 0; i < args.length; i++) {
    if (args[i] === "--quick") quick = true;
    else if (args[i] === "--fetch") fetch = true;
    else if (args[i] === "--entry" && i + 1 < args.length) entry = args[++i];
    else if (args[i] === "--only" && i + 1 < args.length) only = args[++i];
    else {
      throw new Error(
        `unknown argument ${
          args[i]
        } (flags: --quick, --fetch, --entry <file>, --only <workload name part>)`,
      );
    }
  }
  return { quick, entry, fetch, only };
}

function machine() {
  const cpuinfo = readProcText("/proc/cpuinfo");
  return {
    cpus: navigator.hardwareConcurrency,
    cpu_model: cpuinfo.match(/^model name\s*:\s*(.*)$/m)?.[1] ?? "unknown",
    memory_gib: Math.round(Deno.systemMemoryInfo().total / 1024 ** 3),
    kernel: Deno.osRelease(),
    deno: Deno.version.deno,
  };
}

function message(e: unknown): string {
  if (e instanceof SuppressedError) {
    return `${message(e.error)} (then, while stopping: ${message(e.suppressed)})`;
  }
  return e instanceof Error ? e.message : String(e);
}

async function peerFigures(quick: boolean): Promise<PeerFigures | "skipped"> {
  const dir = Deno.env.get("CODEX_PEER_DIR");
  if (!dir) {
    log("peer: skipped (CODEX_PEER_DIR is not set)");
    return "skipped";
  }
  log(`peer: running codex_exec_client.mjs --transport stdio in ${dir}`);
  try {
    return await runPeer(dir, quick);
  } catch (e) {
    log(`peer: failed, reported as skipped: ${message(e)}`);
    return "skipped";
  }
}

/** A workload that gave no result within its time limit. */
class WorkloadTimeout extends Error {}

/**
 * Runs one workload within `limitMs` (on time-out it is aborted) and then stops the servers it
 * started, whatever happened; their stop reports go to `stops`. A failure carries their output
 * tails.
 */
async function runWorkload(
  name: string,
  run: (ctx: Context) => Promise<Outcome>,
  base: Omit<Context, "signal" | "deadline" | "servers">,
  limitMs: number,
  stops: Stop[],
): Promise<Outcome> {
  const controller = new AbortController();
  const deadline = performance.now() + limitMs;
  const timer = setTimeout(
    () => controller.abort(new WorkloadTimeout(`no result within ${Math.round(limitMs / 1000)} s`)),
    limitMs,
  );
  const aborted = new Promise<never>((_, reject) =>
    controller.signal.addEventListener("abort", () => reject(controller.signal.reason))
  );
  const ctx: Context = { ...base, signal: controller.signal, deadline, servers: [] };
  try {
    return await Promise.race([run(ctx), aborted]);
  } catch (e) {
    const tails = ctx.servers.map((s) => `\n--- server pid ${s.pid} output tail:\n${s.tail()}`);
    const Failure = e instanceof WorkloadTimeout ? WorkloadTimeout : Error;
    throw new Failure(message(e) + tails.join(""));
  } finally {
    clearTimeout(timer);
    for (const s of ctx.servers) stops.push({ workload: name, pid: s.pid, ...await s.stop() });
  }
}

async function main(): Promise<number> {
  const { quick, entry, fetch, only } = parseArgs(Deno.args);
  stopOnSignals();
  const started = performance.now();
  const loadAtStart = readProcText("/proc/loadavg").split(" ").slice(0, 3).join(" ");
  const root = new URL("..", import.meta.url).pathname;
  const resultsDir = new URL("./results/", import.meta.url).pathname;
  const workspace = await Deno.makeTempDir({ prefix: "uexec-bench-" });
  await Deno.chmod(workspace, 0o755);
  register(() => Deno.remove(workspace, { recursive: true }));
  const rows: Row[] = [];
  const details: Record<string, unknown> = {};
  const stops: Stop[] = [];
  let failed = false;
  try {
    const peer = await peerFigures(quick);
    const transport = fetch ? fetchTransport : rawTransport;
    const base = { root, entry, workspace, sizes: quick ? QUICK : FULL, peer, transport };
    for (const w of WORKLOADS.filter((w) => only === undefined || w.name.includes(only))) {
      const left = BUDGET_MS - (performance.now() - started);
      if (left < 10_000) {
        rows.push(noFigure(w.name, "skipped", "the bench's 5-minute budget ran out"));
        continue;
      }
      log(`== ${w.name}`);
      const limitMs = Math.min(w.limitMs, left);
      try {
        const outcome = await runWorkload(w.name, w.run, base, limitMs, stops);
        rows.push(...outcome.rows);
        details[w.name] = outcome.details;
      } catch (e) {
        if (e instanceof WorkloadTimeout && limitMs < w.limitMs) {
          // Its own limit was not reached: the budget ran out during it (a slow host).
          const note = `the bench's 5-minute budget ran out during it (${
            Math.round(limitMs / 1000)
          } s were left of its ${Math.round(w.limitMs / 1000)} s)`;
          log(`${w.name}: ${note}`);
          rows.push(noFigure(w.name, "skipped", note));
          details[w.name] = { skipped: note, error: message(e) };
          continue;
        }
        failed = true;
        log(`${w.name} failed: ${message(e)}`);
        rows.push(noFigure(w.name, "error", message(e).split("\n")[0]));
        details[w.name] = { error: message(e) };
      }
    }
    rows.push(...shutdownRows(stops));
    details.server_stops = stops;
    details.peer = peer === "skipped" ? "skipped" : peer.raw;
  } finally {
    await stopAll();
  }
  const seconds = Math.round((performance.now() - started) / 100) / 10;
  const host = machine();
  console.log(formatTable(rows));
  console.log(
    `\n${quick ? "quick run" : "full run"} (${
      fetch ? "fetch" : "raw HTTP/1.1"
    } client) in ${seconds} s on ${host.cpus} x ${host.cpu_model}, ` +
      `${host.memory_gib} GiB, Linux ${host.kernel}, Deno ${host.deno}; load average at start ` +
      `${loadAtStart} (other work on the machine skews absolute figures: compare ratios)`,
  );
  await Deno.mkdir(resultsDir, { recursive: true });
  const generatedAt = new Date().toISOString();
  await writeJson(`${resultsDir}latest.json`, {
    generated_at: generatedAt,
    quick,
    http_client: fetch ? "fetch" : "raw HTTP/1.1 keep-alive",
    seconds,
    machine: host,
    load_average_at_start: loadAtStart,
    server_entry: entry,
    rows,
    details,
  });
  log(`wrote ${resultsDir}latest.json`);
  const svg = chartSvg(
    rows,
    `${generatedAt.slice(0, 16).replace("T", " ")} UTC, ${quick ? "quick" : "full"} run, ` +
      `${host.cpus} x ${host.cpu_model}, load average at start ${loadAtStart}`,
  );
  const stamped = `${resultsDir}bench-${generatedAt.replaceAll(":", "").slice(0, 17)}Z.svg`;
  await writeText(stamped, svg);
  await writeText(`${resultsDir}latest.svg`, svg);
  log(`wrote ${stamped} and ${resultsDir}latest.svg`);
  return failed ? 1 : 0;
}

Deno.exit(await main());
