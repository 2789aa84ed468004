/**
 * The server's Prometheus metrics (`GET /metrics`), in a registry of its own (never
 * prom-client's global one): the standard `process_*` metrics (process.ts), and, named
 * `uexec_*`, the build, live sessions, commands started and ended, denials, approvals and their
 * wait, `exec_command` latency, output bytes, spawner workers, event-loop lag, and connections
 * through the egress proxy and their bytes.
 *
 * Counters are fed by the lifecycle bus and by session hooks; gauges are read when scraped.
 * Every labelled counter has a series at 0 for each label value known before its first event
 * (each reason, kind and decision; each agent with each profile), so a dashboard shows 0, not
 * "no data". Event-loop lag is measured by one repeating, unreferenced timer (how late it
 * fires), since `perf_hooks.monitorEventLoopDelay` reports nonsense under Deno. It must never
 * hold a label with a command, a path or output (unbounded and possibly secret).
 *
 * @module
 */

import { Counter, Gauge, Histogram, Registry } from "prom-client";
import type { ApprovalRecord, ApprovalStatus } from "../approvals/store.ts";
import type { EndReason, EventBus } from "../events/bus.ts";
import type { Denial, DenialKind } from "../sandbox/policy/denial.ts";
import type { SessionInfo } from "../sessions/session.ts";
import type { Session } from "../sessions/session.ts";
import { VERSION } from "../version.ts";
import { registerProcessMetrics } from "./process.ts";

/** What the metrics read when scraped. */
export interface MetricsSources {
  bus: EventBus;
  /** Every live session. */
  sessions(): SessionInfo[];
  /** Spawner workers: warm ones and ones bound to a sandbox domain. */
  workers(): { warm: number; bound: number };
  /** The owners sessions can have now: every agent's name, and the operator's own. */
  agents(): string[];
  /** The sandbox profiles a command can run under. */
  profiles: readonly string[];
  /** A fleet node's id: every series is labelled `node` with it (absent on one host). */
  node?: string;
}

/** Every value of a label, as the keys of a record of them all (the compiler checks it). */
function values<T extends string>(all: Record<T, null>): T[] {
  return Object.keys(all) as T[];
}

const END_REASONS = values<EndReason>({
  exit: null,
  kill: null,
  prune: null,
  timeout: null,
  shutdown: null,
  revoke: null,
});
const DENIAL_KINDS = values<DenialKind>({
  "fs-read": null,
  "fs-write": null,
  network: null,
  signal: null,
  syscall: null,
});
const DECISIONS = values<Exclude<ApprovalStatus, "pending">>({
  approved: null,
  approved_for_session: null,
  denied: null,
  timed_out: null,
});

/** How often the event-loop lag is sampled. */
const LAG_INTERVAL_MS = 500;

/** The metrics of one server. */
export class Metrics {
  readonly registry = new Registry();
  #started: Counter<"agent" | "profile">;
  #ended: Counter<"reason">;
  #denials: Counter<"kind">;
  #approvals: Counter<"decision">;
  #approvalWait: Histogram<"decision">;
  #execSeconds: Histogram;
  #egress: Counter<"decision">;
  #egressBytes: Counter<"direction">;
  /** Output bytes read since the counter was last collected (added to it when scraped). */
  readonly #output = { pending: 0 };
  #lag: Gauge;
  #lagTimer: ReturnType<typeof setInterval>;
  #unsubscribe: () => void;

  constructor(sources: MetricsSources) {
    const registers = [this.registry];
    if (sources.node !== undefined) this.registry.setDefaultLabels({ node: sources.node });
    registerProcessMetrics(this.registry);
    new Gauge({
      name: "uexec_build_info",
      help: "Always 1; its labels say which uexec and which Deno run.",
      labelNames: ["version", "deno"] as const,
      registers,
    }).set({ version: VERSION, deno: Deno.version.deno }, 1);
    /** Each known owner with each profile: the series that exist before any session. */
    const owners = () =>
      sources.agents().flatMap((agent) => sources.profiles.map((profile) => ({ agent, profile })));
    new Gauge({
      name: "uexec_sessions_live",
      help: "Live sessions, by profile and agent.",
      labelNames: ["profile", "agent"] as const,
      registers,
      collect() {
        this.reset();
        for (const labels of owners()) this.set(labels, 0);
        for (const s of sources.sessions()) this.inc({ profile: s.profile, agent: s.agent });
      },
    });
    this.#started = new Counter({
      name: "uexec_commands_started_total",
      help: "Commands started (each run of a command, retries included), by agent and profile.",
      labelNames: ["agent", "profile"] as const,
      registers,
      collect() {
        for (const labels of owners()) this.inc(labels, 0); // agents come and go: each scrape
      },
    });
    this.#ended = new Counter({
      name: "uexec_commands_ended_total",
      help: "Commands ended, by reason (exit, kill, prune, timeout, shutdown, revoke).",
      labelNames: ["reason"] as const,
      registers,
    });
    this.#denials = new Counter({
      name: "uexec_denials_total",
      help: "Sandbox denials detected, by kind.",
      labelNames: ["kind"] as const,
      registers,
    });
    this.#approvals = new Counter({
      name: "uexec_approvals_total",
      help: "Approvals decided, by decision (approved, approved_for_session, denied, timed_out).",
      labelNames: ["decision"] as const,
      registers,
    });
    this.#approvalWait = new Histogram({
      name: "uexec_approval_wait_seconds",
      help: "How long approvals waited for their decision, by decision.",
      labelNames: ["decision"] as const,
      buckets: [0.1, 0.5, 1, 5, 15, 30, 60, 300, 900, 3600],
      registers,
    });
    this.#execSeconds = new Histogram({
      name: "uexec_exec_command_seconds",
      help: "exec_command latency, until its response (refused and failed calls included).",
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers,
    });
    this.#egress = new Counter({
      name: "uexec_egress_connections_total",
      help: "Connections through the egress proxy, by decision (allowed, denied, failed).",
      labelNames: ["decision"] as const,
      registers,
    });
    this.#egressBytes = new Counter({
      name: "uexec_egress_bytes_total",
      help: "Bytes relayed by the egress proxy, by direction (up: to the destination; down).",
      labelNames: ["direction"] as const,
      registers,
    });
    // Output arrives chunk by chunk on the hot path: a plain sum there, the counter when scraped.
    const output = this.#output;
    new Counter({
      name: "uexec_output_bytes_total",
      help: "Output bytes read from commands.",
      registers,
      collect() {
        this.inc(output.pending);
        output.pending = 0;
      },
    });
    new Gauge({
      name: "uexec_spawner_workers",
      help: "Spawner workers, by state (warm, bound to a sandbox domain).",
      labelNames: ["state"] as const,
      registers,
      collect() {
        const { warm, bound } = sources.workers();
        this.set({ state: "warm" }, warm);
        this.set({ state: "bound" }, bound);
      },
    });
    this.#lag = new Gauge({
      name: "uexec_event_loop_lag_seconds",
      help: `How late a ${LAG_INTERVAL_MS} ms timer last fired (event-loop lag).`,
      registers,
    });
    let expected = performance.now() + LAG_INTERVAL_MS;
    this.#lagTimer = setInterval(() => {
      const now = performance.now();
      this.#lag.set(Math.max(0, now - expected) / 1000);
      expected = now + LAG_INTERVAL_MS;
    }, LAG_INTERVAL_MS);
    Deno.unrefTimer(this.#lagTimer);
    for (const reason of END_REASONS) this.#ended.inc({ reason }, 0);
    for (const kind of DENIAL_KINDS) this.#denials.inc({ kind }, 0);
    for (const decision of DECISIONS) {
      this.#approvals.inc({ decision }, 0);
      this.#approvalWait.zero({ decision });
    }
    this.#unsubscribe = sources.bus.subscribe((event) => {
      if (event.type === "approval_decided") {
        const record = event.approval as ApprovalRecord;
        const decision = record.status;
        this.#approvals.inc({ decision });
        const waited = Date.parse(record.decided_at ?? "") - Date.parse(record.created_at);
        if (Number.isFinite(waited)) this.#approvalWait.observe({ decision }, waited / 1000);
      }
      if (event.type === "egress") {
        this.#egress.inc({ decision: event.decision });
        this.#egressBytes.inc({ direction: "up" }, event.bytes_up);
        this.#egressBytes.inc({ direction: "down" }, event.bytes_down);
      }
    });
  }

  /** A session started: count it, its output and its end. */
  watch(session: Session): void {
    this.#started.inc({ agent: session.owner, profile: session.profile });
    session.listen({
      output: (bytes) => {
        this.#output.pending += bytes.length;
      },
      ended: () => this.#ended.inc({ reason: session.endReason }),
    });
  }

  /** The sandbox denied a run. */
  denied(denial: Denial): void {
    this.#denials.inc({ kind: denial.kind });
  }

  /** One `exec_command` took `seconds`. */
  exec(seconds: number): void {
    this.#execSeconds.observe(seconds);
  }

  /** The exposition text and its content type. */
  async scrape(): Promise<{ text: string; contentType: string }> {
    return { text: await this.registry.metrics(), contentType: this.registry.contentType };
  }

  /** Stop the lag timer and the bus subscription. */
  close(): void {
    clearInterval(this.#lagTimer);
    this.#unsubscribe();
  }
}
