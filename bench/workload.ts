/**
 * The contract between bench.ts and the workload modules: what a workload gets (sizes, the
 * peer's figures, a workspace, an abort signal), what it returns (rows and raw details), and
 * how it starts its own fresh server.
 * @module
 */

import { UexecClient } from "./client.ts";
import type { TransportFactory } from "./http1.ts";
import type { PeerFigures } from "./peer.ts";
import type { Row } from "./report.ts";
import { register } from "./cleanup.ts";
import { UexecServer } from "./server.ts";

/** How much each workload does: issue 4's sizes, or a quick smoke run. */
export interface Sizes {
  echoRuns: number;
  loginShellRuns: number;
  writeRuns: number;
  throughputBytes: number;
  throughputRuns: number;
  concurrentSessions: number;
  concurrentRounds: number;
  /** Timed passes of the concurrent workload; the median is reported. */
  concurrentPasses: number;
  /** Sessions of the soak workload (each does `concurrentRounds` checked round trips). */
  soakSessions: number;
  idleSessions: number;
  /** Idle sessions opened over one WebSocket. */
  wsIdleSessions: number;
  healthzRuns: number;
  floodBytes: number;
  truncationRuns: number;
}

export const FULL: Sizes = {
  echoRuns: 500,
  loginShellRuns: 20,
  writeRuns: 1000,
  throughputBytes: 50_000_000,
  throughputRuns: 3,
  concurrentSessions: 100,
  concurrentRounds: 20,
  concurrentPasses: 5,
  soakSessions: 200,
  idleSessions: 1000,
  wsIdleSessions: 10_000,
  healthzRuns: 500,
  floodBytes: 1024 ** 3,
  truncationRuns: 5,
};

export const QUICK: Sizes = {
  echoRuns: 50,
  loginShellRuns: 3,
  writeRuns: 100,
  throughputBytes: 5_000_000,
  throughputRuns: 1,
  concurrentSessions: 20,
  concurrentRounds: 20,
  concurrentPasses: 1,
  soakSessions: 40,
  idleSessions: 100,
  wsIdleSessions: 200,
  healthzRuns: 100,
  floodBytes: 64 * 1024 ** 2,
  truncationRuns: 2,
};

/** What every workload gets. */
export interface Context {
  /** Project root (the server's cwd). */
  root: string;
  /** Server entry module, relative to root. */
  entry: string;
  /** A scratch directory the bench owns: the server's UEXEC_WORKSPACE. */
  workspace: string;
  sizes: Sizes;
  /** The Codex peer's figures, or "skipped" when CODEX_PEER_DIR is unset or the peer failed. */
  peer: PeerFigures | "skipped";
  /** Aborted when the workload runs out of time. */
  signal: AbortSignal;
  /** When `signal` aborts, on the `performance.now()` clock. */
  deadline: number;
  /** Servers this workload started (their output tails go into error reports). */
  servers: UexecServer[];
  /** The HTTP transport clients use (raw HTTP/1.1 by default, fetch with --fetch). */
  transport: TransportFactory;
}

/** What every workload returns. */
export interface Outcome {
  rows: Row[];
  details: Record<string, unknown>;
}

/** One of the peer's figures, or "skipped" without the peer. */
export function peerFigure(ctx: Context, pick: (p: PeerFigures) => number): number | "skipped" {
  return ctx.peer === "skipped" ? "skipped" : pick(ctx.peer);
}

/** The peer's figure as the row's baseline, for workloads with no kernel-level one. */
function peerBaseline(
  ctx: Context,
  pick: (p: PeerFigures) => number,
): { value: number; label: string } | undefined {
  return ctx.peer === "skipped" ? undefined : { value: pick(ctx.peer), label: "codex peer" };
}

/** The peer's figure as both the baseline and the peer column of a row. */
export function peerColumns(ctx: Context, pick: (p: PeerFigures) => number) {
  return { baseline: peerBaseline(ctx, pick), peer: peerFigure(ctx, pick) };
}

function benchToken(): string {
  return `bench_${crypto.randomUUID().replaceAll("-", "")}`;
}

/**
 * Starts a fresh server for one workload: unsandboxed by default (UEXEC_PROFILE=full-access;
 * requests opt into a sandbox with `profile`), room for 1,100 sessions, the bench's workspace;
 * `env` adds settings (such as `UEXEC_HISTORY=off`).
 */
export async function startServer(
  ctx: Context,
  env: Record<string, string> = {},
): Promise<UexecServer> {
  ctx.signal.throwIfAborted();
  const state = await Deno.makeTempDir({ prefix: "uexec-bench-state-" });
  // Removed when the bench ends (after the servers: the newest stop runs first).
  register(() => Deno.remove(state, { recursive: true }));
  const server = await UexecServer.start(ctx.root, ctx.entry, {
    UEXEC_PROFILE: "full-access",
    UEXEC_MAX_SESSIONS: "1100",
    UEXEC_WORKSPACE: ctx.workspace,
    UEXEC_STATE_DIR: state,
    UEXEC_OPERATOR_TOKEN: benchToken(),
    UEXEC_AGENT_TOKEN: benchToken(),
    UEXEC_DASHBOARD: "off",
    ...env,
  });
  ctx.servers.push(server);
  return server;
}

/** A client for `server` on the workload's transport and abort signal. */
export function connect(ctx: Context, server: UexecServer): UexecClient {
  return new UexecClient(server.url, server.token, ctx.signal, ctx.transport);
}
