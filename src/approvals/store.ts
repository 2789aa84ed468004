/**
 * The approval store: pending approval records, their decisions, timeouts, and the
 * `approved_for_session` memory.
 *
 * `request()` creates a pending record and returns a promise that settles once: when someone
 * calls `decide()`, or when its own timer fires (one `setTimeout` per approval, no polling), which
 * counts as denied. `approved_for_session` is remembered for the store's lifetime per
 * (command, workdir, tty, sandbox_permissions); a later request with the same key settles at
 * once as approved, without a record or an event.
 *
 * This module holds no HTTP and never runs commands. It must never settle an approval twice,
 * never leave a timer behind a settled approval, and never let a failing event listener break a
 * decision.
 *
 * @module
 */

import { z } from "zod";
import type { SandboxPermissions } from "./policy.ts";

/** Every decision a user can post. */
export const APPROVAL_DECISIONS = ["approved", "approved_for_session", "denied"] as const;

/** A user's decision on one approval. */
export type ApprovalDecision = (typeof APPROVAL_DECISIONS)[number];

/** Validates the `decision` of `POST /v1/approvals/{id}`. */
export const approvalDecisionSchema = z.enum(APPROVAL_DECISIONS);

/** Where an approval stands; `timed_out` counts as denied. */
export type ApprovalStatus = "pending" | ApprovalDecision | "timed_out";

/** An approval as the API shows it. */
export interface ApprovalRecord {
  id: string;
  session_id?: string;
  command: string;
  workdir: string;
  profile: string;
  reason: string;
  justification: string | null;
  created_at: string;
  status: ApprovalStatus;
}

/** What a caller asks approval for. `tty` and `sandboxPermissions` complete the session key. */
export interface ApprovalRequest {
  sessionId?: string;
  command: string;
  workdir: string;
  profile: string;
  reason: string;
  justification?: string;
  tty: boolean;
  sandboxPermissions: SandboxPermissions;
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
  /** A sentence for the agent. */
  message: string;
}

/** Events for `GET /v1/events`; `approval` is a snapshot of the record. */
export type ApprovalEvent =
  | { type: "approval_requested"; approval: ApprovalRecord }
  | { type: "approval_decided"; approval: ApprovalRecord };

/** `decide()` on an id the store does not know. */
export class ApprovalNotFoundError extends Error {
  readonly code = "not_found";
  readonly status = 404;
  constructor(readonly id: string) {
    super(`no approval with id ${JSON.stringify(id)}`);
    this.name = "ApprovalNotFoundError";
  }
}

/** `decide()` on an approval that is no longer pending. */
export class ApprovalAlreadyDecidedError extends Error {
  readonly code = "already_decided";
  readonly status = 409;
  constructor(readonly approval: ApprovalRecord) {
    super(`approval ${approval.id} is already ${approval.status}`);
    this.name = "ApprovalAlreadyDecidedError";
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
  timer: ReturnType<typeof setTimeout>;
  settle: (decision: Decision) => void;
}

function sessionKey(request: ApprovalRequest): string {
  return JSON.stringify([
    request.command,
    request.workdir,
    request.tty,
    request.sandboxPermissions,
  ]);
}

/** Holds pending approvals for one server. */
export class ApprovalStore {
  readonly #pending = new Map<string, Pending>();
  readonly #settled = new Map<string, ApprovalRecord>();
  readonly #approvedForSession = new Set<string>();
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
    if (this.#approvedForSession.has(key)) {
      return Promise.resolve({
        approved: true,
        decision: "approved_for_session",
        approvalId: null,
        timedOut: false,
        remembered: true,
        message: "approved earlier for this session (same command, workdir, tty and permissions)",
      });
    }
    const record: ApprovalRecord = {
      id: this.#newId(),
      ...(request.sessionId === undefined ? {} : { session_id: request.sessionId }),
      command: request.command,
      workdir: request.workdir,
      profile: request.profile,
      reason: request.reason,
      justification: request.justification ?? null,
      created_at: this.#now().toISOString(),
      status: "pending",
    };
    return new Promise<Decision>((resolve) => {
      const timer = setTimeout(() => {
        this.#settle(record.id, "timed_out", {
          approved: false,
          decision: "denied",
          approvalId: record.id,
          timedOut: true,
          remembered: false,
          message:
            `approval ${record.id} timed out after ${timeoutMs} ms without a decision; treated as denied`,
        });
      }, timeoutMs);
      this.#pending.set(record.id, { record, key, timer, settle: resolve });
      this.#emit({ type: "approval_requested", approval: { ...record } });
    });
  }

  /** Pending approvals, oldest first (copies). */
  list(): ApprovalRecord[] {
    return [...this.#pending.values()].map((p) => ({ ...p.record }));
  }

  /** Decides a pending approval and returns its settled record. */
  decide(id: string, decision: ApprovalDecision): ApprovalRecord {
    if (!this.#pending.has(id)) {
      const settled = this.#settled.get(id);
      if (settled) throw new ApprovalAlreadyDecidedError({ ...settled });
      throw new ApprovalNotFoundError(id);
    }
    const messages: Record<ApprovalDecision, string> = {
      approved: `approved by the user (approval ${id})`,
      approved_for_session: `approved by the user for this session (approval ${id})`,
      denied: `denied by the user (approval ${id})`,
    };
    return this.#settle(id, decision, {
      approved: decision !== "denied",
      decision,
      approvalId: id,
      timedOut: false,
      remembered: false,
      message: messages[decision],
    });
  }

  /** Settles every pending approval as denied (server shutdown) and clears their timers. */
  close(): void {
    for (const id of [...this.#pending.keys()]) {
      this.#settle(id, "denied", {
        approved: false,
        decision: "denied",
        approvalId: id,
        timedOut: false,
        remembered: false,
        message: `approval ${id} was cancelled because the server is shutting down`,
      });
    }
  }

  #settle(id: string, status: ApprovalStatus, decision: Decision): ApprovalRecord {
    const pending = this.#pending.get(id)!;
    clearTimeout(pending.timer);
    this.#pending.delete(id);
    const record = { ...pending.record, status };
    this.#settled.set(id, record);
    if (this.#settled.size > this.#historyLimit) {
      this.#settled.delete(this.#settled.keys().next().value!);
    }
    if (status === "approved_for_session") this.#approvedForSession.add(pending.key);
    pending.settle(decision);
    this.#emit({ type: "approval_decided", approval: { ...record } });
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
