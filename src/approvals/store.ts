/**
 * The approval store: pending approval records, their decisions, timeouts, and the
 * `approved_for_session` memory.
 *
 * `request()` creates a pending record and returns a promise that settles once: when someone
 * calls `decide()`, or when its own timer fires (one `setTimeout` per approval, no polling), which
 * counts as denied. A record binds everything that decides what runs (command, shell, login,
 * workdir, tty, profile, the added environment and the escalation) and shows it with hidden
 * characters escaped. `approved_for_session` is remembered for the store's lifetime per agent
 * and all of those fields, with what was granted; a later identical request from the same
 * agent settles at once with that grant, without a record or an event.
 *
 * This module holds no HTTP and never runs commands. It must never settle an approval twice,
 * never leave a timer behind a settled approval, and never let a failing event listener break a
 * decision.
 *
 * @module
 */

import { z } from "zod";
import type { Denial } from "../sandbox/policy/denial.ts";
import { canonical, describe, type Widening } from "../sandbox/policy/widening.ts";
import { ApiError, InvalidRequestError } from "../errors.ts";
import { visible } from "./visible.ts";

/** Every decision a user can post. */
export const APPROVAL_DECISIONS = ["approved", "approved_for_session", "denied"] as const;

/** A user's decision on one approval. */
export type ApprovalDecision = (typeof APPROVAL_DECISIONS)[number];

/** Validates the `decision` of `POST /v1/approvals/{id}`. */
export const approvalDecisionSchema = z.enum(APPROVAL_DECISIONS);

/** Where an approval stands; `timed_out` counts as denied. */
export type ApprovalStatus = "pending" | ApprovalDecision | "timed_out";

/**
 * The command an approval is about, as asked and as shown: everything that decides what runs.
 * The request and the record share it, so what is asked is what is shown.
 */
interface ApprovalSubject {
  /** The agent that asked. */
  agent: string;
  command: string;
  shell: string;
  login: boolean;
  workdir: string;
  tty: boolean;
  /** The profile the command was asked under. */
  profile: string;
  /** The whole environment the request adds to the base environment. */
  env: Record<string, string>;
  /** What approving adds beyond the profile (`{}`: nothing, run it as asked). */
  escalation: Widening;
  reason: string;
}

/** An approval as the API shows it: every text with its hidden characters escaped. */
export interface ApprovalRecord extends ApprovalSubject {
  id: string;
  /** One sentence: how the command runs once approved. */
  runs: string;
  justification: string | null;
  /** The sandbox denial that led to this question (on-failure retries). */
  denial: Denial | null;
  /** True when the approver may pick an unsandboxed run instead of `escalation`. */
  can_choose_unsandboxed: boolean;
  created_at: string;
  /** When an undecided request times out as denied (`created_at` plus the timeout). */
  expires_at: string;
  status: ApprovalStatus;
  /** Set once decided: when, and what was granted. */
  decided_at?: string;
  granted?: Widening;
  /** Set once decided: the operator, the approval's own timeout, or a cancellation. */
  decided_by?: "operator" | "timeout" | "cancelled";
  /** The `exec_command` that asked (its history id); null when the caller gave none. */
  exec_id: string | null;
}

/** What a caller asks approval for. */
export interface ApprovalRequest extends ApprovalSubject {
  justification?: string;
  denial?: Denial;
  /** Offer an unsandboxed run as an alternative to `escalation`. */
  allowUnsandboxed?: boolean;
  /** The `exec_command` asking (its history id). */
  execId?: string;
}

/** How a request settled. */
export interface Decision {
  approved: boolean;
  /** A timeout or shutdown reads `denied`. */
  decision: ApprovalDecision;
  /** Null when settled from an earlier `approved_for_session`. */
  approvalId: string | null;
  timedOut: boolean;
  /** True when settled from an earlier `approved_for_session`, without asking. */
  remembered: boolean;
  /** What was granted (when approved): the request's escalation, or no sandbox. */
  granted: Widening;
  /** A sentence for the agent. */
  message: string;
}

/** The options of a decision beyond its verdict. */
export interface DecideOptions {
  /** Grant an unsandboxed run instead of the proposed widening (only where offered). */
  unsandboxed?: boolean;
}

/** Events for `GET /v1/events`; `approval` is a snapshot of the record. */
export type ApprovalEvent =
  | { type: "approval_requested"; agent: string; approval: ApprovalRecord }
  | { type: "approval_decided"; agent: string; approval: ApprovalRecord };

/** `decide()` on an id the store does not know. */
export class ApprovalNotFoundError extends ApiError {
  readonly code = "not_found";
  constructor(readonly id: string) {
    super(`no approval with id ${JSON.stringify(id)}`);
  }
}

/** `decide()` on an approval that is no longer pending. */
export class ApprovalAlreadyDecidedError extends ApiError {
  readonly code = "already_decided";
  constructor(readonly approval: ApprovalRecord) {
    super(`approval ${approval.id} is already ${approval.status}`);
  }
}

/** Store options; all optional, injected by tests. */
export interface ApprovalStoreOptions {
  onEvent?: (event: ApprovalEvent) => void;
  now?: () => Date;
  newId?: () => string;
  /** How many settled approvals to remember for `already_decided` (default 1000). */
  historyLimit?: number;
}

interface Pending {
  record: ApprovalRecord;
  key: string;
  escalation: Widening;
  timer: ReturnType<typeof setTimeout>;
  settle: (decision: Decision) => void;
}

/** The `approved_for_session` key: the agent and everything that decides what runs. */
function sessionKey(request: ApprovalRequest): string {
  return JSON.stringify([
    request.agent,
    request.command,
    request.shell,
    request.login,
    request.workdir,
    request.tty,
    request.profile,
    Object.entries(request.env).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
    canonical(request.escalation),
  ]);
}

function visibleDenial(denial: Denial): Denial {
  return {
    ...denial,
    ...(denial.path === undefined ? {} : { path: visible(denial.path) }),
    evidence: visible(denial.evidence),
  };
}

function visibleEnv(env: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(env).map(([k, v]) => [visible(k), visible(v)]));
}

function visibleWidening(w: Widening): Widening {
  return {
    ...w,
    ...(w.write ? { write: w.write.map(visible) } : {}),
    ...(w.read ? { read: w.read.map(visible) } : {}),
  };
}

/** Holds pending approvals for one server. */
export class ApprovalStore {
  readonly #pending = new Map<string, Pending>();
  readonly #settled = new Map<string, ApprovalRecord>();
  /** `approved_for_session` answers by agent: key -> what was granted. */
  readonly #approvedForSession = new Map<string, Map<string, Widening>>();
  readonly #onEvent: (event: ApprovalEvent) => void;
  readonly #now: () => Date;
  readonly #newId: () => string;
  readonly #historyLimit: number;

  constructor(options: ApprovalStoreOptions = {}) {
    this.#onEvent = options.onEvent ?? (() => {});
    this.#now = options.now ?? (() => new Date());
    this.#newId = options.newId ?? (() => crypto.randomUUID());
    this.#historyLimit = options.historyLimit ?? 1000;
  }

  /** Asks for approval; settles when decided, or as denied after `timeoutMs`. */
  request(request: ApprovalRequest, timeoutMs: number): Promise<Decision> {
    if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
      throw new RangeError(`approval timeout must be a positive number of ms, got ${timeoutMs}`);
    }
    const key = sessionKey(request);
    const escalation = canonical(request.escalation);
    const remembered = this.#approvedForSession.get(request.agent)?.get(key);
    if (remembered) {
      return Promise.resolve({
        approved: true,
        decision: "approved_for_session",
        approvalId: null,
        timedOut: false,
        remembered: true,
        granted: remembered,
        message: "approved earlier for this session (the same request from the same agent)",
      });
    }
    const now = this.#now();
    const record: ApprovalRecord = {
      id: this.#newId(),
      agent: request.agent,
      command: visible(request.command),
      shell: visible(request.shell),
      login: request.login,
      workdir: visible(request.workdir),
      tty: request.tty,
      profile: request.profile,
      env: visibleEnv(request.env),
      escalation: visibleWidening(escalation),
      runs: visible(describe(request.profile, escalation)),
      reason: visible(request.reason),
      justification: request.justification === undefined ? null : visible(request.justification),
      denial: request.denial ? visibleDenial(request.denial) : null,
      can_choose_unsandboxed: !escalation.unsandboxed && request.allowUnsandboxed === true,
      created_at: now.toISOString(),
      expires_at: new Date(now.getTime() + timeoutMs).toISOString(),
      status: "pending",
      exec_id: request.execId ?? null,
    };
    return new Promise<Decision>((resolve) => {
      const timer = setTimeout(() => {
        this.#settle(record.id, "timed_out", "timeout", {
          approved: false,
          decision: "denied",
          approvalId: record.id,
          timedOut: true,
          remembered: false,
          granted: {},
          message:
            `approval ${record.id} timed out after ${timeoutMs} ms without a decision; treated as denied`,
        });
      }, timeoutMs);
      this.#pending.set(record.id, { record, key, escalation, timer, settle: resolve });
      this.#emit({ type: "approval_requested", agent: record.agent, approval: { ...record } });
    });
  }

  /** Pending approvals, oldest first (copies): all, or those `agent` asked for. */
  list(agent?: string): ApprovalRecord[] {
    return [...this.#pending.values()]
      .filter((p) => agent === undefined || p.record.agent === agent)
      .map((p) => ({ ...p.record }));
  }

  /** Decides a pending approval and returns its settled record. */
  decide(id: string, decision: ApprovalDecision, options: DecideOptions = {}): ApprovalRecord {
    const pending = this.#pending.get(id);
    if (!pending) {
      const settled = this.#settled.get(id);
      if (settled) throw new ApprovalAlreadyDecidedError({ ...settled });
      throw new ApprovalNotFoundError(id);
    }
    if (options.unsandboxed && !pending.record.can_choose_unsandboxed) {
      throw new InvalidRequestError(
        `unsandboxed: approval ${id} does not offer an unsandboxed run; it grants ${pending.record.runs}`,
      );
    }
    const granted: Widening = decision === "denied"
      ? {}
      : options.unsandboxed
      ? { unsandboxed: true }
      : pending.escalation;
    const messages: Record<ApprovalDecision, string> = {
      approved: `approved by the user (approval ${id})`,
      approved_for_session: `approved by the user for this session (approval ${id})`,
      denied: `denied by the user (approval ${id})`,
    };
    return this.#settle(id, decision, "operator", {
      approved: decision !== "denied",
      decision,
      approvalId: id,
      timedOut: false,
      remembered: false,
      granted,
      message: messages[decision],
    });
  }

  /**
   * `agent`'s credential was revoked: settle every pending approval it asked for as denied and
   * forget what it was approved for the session (an agent minted under its name later is another
   * party and asks again).
   */
  revokeAgent(agent: string): void {
    for (const [id, p] of [...this.#pending]) {
      if (p.record.agent === agent) this.#cancel(id, `the agent ${agent} was revoked`);
    }
    this.#approvedForSession.delete(agent);
  }

  /** Settles every pending approval as denied (server shutdown) and clears their timers. */
  close(): void {
    for (const id of [...this.#pending.keys()]) this.#cancel(id, "the server is shutting down");
  }

  #cancel(id: string, why: string): void {
    this.#settle(id, "denied", "cancelled", {
      approved: false,
      decision: "denied",
      approvalId: id,
      timedOut: false,
      remembered: false,
      granted: {},
      message: `approval ${id} was cancelled because ${why}`,
    });
  }

  #settle(
    id: string,
    status: ApprovalStatus,
    by: NonNullable<ApprovalRecord["decided_by"]>,
    decision: Decision,
  ): ApprovalRecord {
    const pending = this.#pending.get(id)!;
    clearTimeout(pending.timer);
    this.#pending.delete(id);
    const record: ApprovalRecord = {
      ...pending.record,
      status,
      decided_at: this.#now().toISOString(),
      decided_by: by,
      ...(decision.approved ? { granted: visibleWidening(decision.granted) } : {}),
    };
    this.#settled.set(id, record);
    if (this.#settled.size > this.#historyLimit) {
      this.#settled.delete(this.#settled.keys().next().value!);
    }
    if (status === "approved_for_session") {
      const agent = pending.record.agent;
      const granted = this.#approvedForSession.get(agent) ?? new Map<string, Widening>();
      this.#approvedForSession.set(agent, granted.set(pending.key, decision.granted));
    }
    pending.settle(decision);
    this.#emit({ type: "approval_decided", agent: record.agent, approval: { ...record } });
    return { ...record };
  }

  #emit(event: ApprovalEvent): void {
    try {
      this.#onEvent(event);
    } catch (err) {
      console.error(`approval event listener failed on ${event.type}:`, err);
    }
  }
}
