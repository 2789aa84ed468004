/**
 * The Codex peer: runs `codex_exec_client.mjs --transport stdio` from `CODEX_PEER_DIR` (set up
 * per shared/peers/README.md), forwards its progress, and extracts the figures the table
 * compares against. SIGINT stops it (it then stops its own exec-server), SIGKILL if it lingers.
 * @module
 */

import { register } from "./cleanup.ts";
import { eachLine } from "./lines.ts";
import { log } from "./log.ts";
import { TIMED_OUT, within } from "./time.ts";

const TIMEOUT_MS = 120_000;
const KILL_GRACE_MS = 5_000;

/** The peer's figures, in ms unless named otherwise. */
export interface PeerFigures {
  echoP50: number;
  echoP99: number;
  catP50: number;
  catP99: number;
  throughputMBps: number;
  concurrentRoundTripsPerS: number;
  concurrentP99: number;
  /** p50 of `true` start-to-closed, unsandboxed and under its workspace-write sandbox. */
  trueP50: number;
  sandboxedTrueP50: number;
  /** The peer client's whole JSON report. */
  raw: unknown;
}

// Shape of the parts of the peer client's JSON that the bench reads.
interface PeerStats {
  p50_ms: number;
  p99_ms: number;
}
interface PeerSuite {
  ok: boolean;
  error?: string;
  a_echo_latency_pty: { start_to_closed_all_output: PeerStats };
  b_cat_roundtrip: { write_to_cat_output_roundtrip: PeerStats };
  c_pty_throughput: { MB_per_s_payload: number };
  d_concurrent_cats: { roundtrip: PeerStats; roundtrips_per_s: number };
  f_sandbox_start: {
    unsandboxed_true_start_to_closed: PeerStats;
    sandboxed_workspace_write_true_start_to_closed: PeerStats;
  };
}

/** Runs the peer client in `dir`; `quick` passes its --quick (fewer iterations). */
export async function runPeer(dir: string, quick: boolean): Promise<PeerFigures> {
  const child = new Deno.Command("node", {
    args: ["codex_exec_client.mjs", "--transport", "stdio", ...(quick ? ["--quick"] : [])],
    cwd: dir,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const stop = async () => {
    try {
      child.kill("SIGINT");
    } catch {
      return; // already exited
    }
    if (await within(child.status, KILL_GRACE_MS) === TIMED_OUT) {
      child.kill("SIGKILL");
      await child.status;
    }
  };
  const unregister = register(stop);
  const timer = setTimeout(() => {
    log(`peer: no result within ${TIMEOUT_MS} ms, stopping it`);
    stop();
  }, TIMEOUT_MS);
  try {
    const [stdout] = await Promise.all([
      new Response(child.stdout).text(),
      eachLine(child.stderr, (line) => log(`  peer: ${line}`)),
    ]);
    await child.status;
    const report = JSON.parse(stdout);
    const s: PeerSuite = report.stdio;
    if (!s?.ok) throw new Error(`peer run failed: ${s?.error ?? "no stdio suite in its report"}`);
    return {
      echoP50: s.a_echo_latency_pty.start_to_closed_all_output.p50_ms,
      echoP99: s.a_echo_latency_pty.start_to_closed_all_output.p99_ms,
      catP50: s.b_cat_roundtrip.write_to_cat_output_roundtrip.p50_ms,
      catP99: s.b_cat_roundtrip.write_to_cat_output_roundtrip.p99_ms,
      throughputMBps: s.c_pty_throughput.MB_per_s_payload,
      concurrentRoundTripsPerS: s.d_concurrent_cats.roundtrips_per_s,
      concurrentP99: s.d_concurrent_cats.roundtrip.p99_ms,
      trueP50: s.f_sandbox_start.unsandboxed_true_start_to_closed.p50_ms,
      sandboxedTrueP50: s.f_sandbox_start.sandboxed_workspace_write_true_start_to_closed.p50_ms,
      raw: report,
    };
  } finally {
    clearTimeout(timer);
    unregister();
    await stop();
  }
}
