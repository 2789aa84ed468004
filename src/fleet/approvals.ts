/**
 * The fleet's approvals in the store (`uexec_approvals`): each node writes a record of every
 * approval it raises and of its decision (the approval store on the node that raised it stays
 * the one that decides and wakes the waiting command), so the operator lists the fleet's pending
 * approvals on any node. A decision posted on another node is passed to the raising node with
 * `NOTIFY uexec_decide`; that node decides (waking the command) and answers on
 * `uexec_decided` once the decided record is in the store, where the posting node reads it.
 * A lost node's pending approvals end with it (see nodes.ts). Only the operator's decision,
 * checked by the posting node, is ever passed on.
 *
 * @module
 */

import type postgres from "postgres";
import type { ApprovalDecision, ApprovalEvent, ApprovalRecord } from "../approvals/store.ts";
import type { FleetStore } from "./store.ts";
import { ApiError, RelayedError } from "../errors.ts";

const DECIDE_CHANNEL = "uexec_decide";
const DECIDED_CHANNEL = "uexec_decided";
/** How long a decision waits for the raising node's answer before 503 `node_unreachable`. */
const ANSWER_MS = 15_000;
/** NOTIFY payloads are at most 8000 bytes: an error's message is cut well below that. */
const MESSAGE_CHARS = 2000;

/** A decision passed to the raising node. */
interface DecideRequest {
  id: string;
  to: string;
  reply: string;
  decision: ApprovalDecision;
  unsandboxed: boolean;
}

/** The raising node's answer: decided (the record is in the store), or the error it gave. */
interface DecideAnswer {
  reply: string;
  error?: { status: number; code: string; message: string };
}

/** The raising node did not answer a passed decision in time (503 `node_unreachable`). */
export class DecisionUnansweredError extends ApiError {
  readonly code = "node_unreachable";
}

/** Where an approval was raised, and where it stands. */
export interface ApprovalPlace {
  node: string;
  status: string;
}

/** The store's side of the fleet's approvals, for node `node`. */
export class FleetApprovals {
  readonly #store: FleetStore;
  readonly #node: string;
  /** Decisions passed to other nodes, waiting for their answer, by reply id. */
  readonly #waiting = new Map<string, (answer: DecideAnswer) => void>();

  constructor(store: FleetStore, node: string) {
    this.#store = store;
    this.#node = node;
  }

  /**
   * Take the decisions other nodes pass to this one: `decide` decides on this node's approval
   * store (it throws its usual errors). Also follows the answers to the ones this node passes.
   */
  async follow(decide: (id: string, decision: ApprovalDecision, unsandboxed: boolean) => void) {
    await this.#store.listen(DECIDED_CHANNEL, (payload) => {
      const answer = JSON.parse(payload) as DecideAnswer;
      this.#waiting.get(answer.reply)?.(answer);
    });
    await this.#store.listen(DECIDE_CHANNEL, (payload) => {
      const asked = JSON.parse(payload) as DecideRequest;
      if (asked.to !== this.#node) return;
      let answer: DecideAnswer = { reply: asked.reply };
      try {
        decide(asked.id, asked.decision, asked.unsandboxed);
      } catch (err) {
        const e = err as Error & { status?: number; code?: string };
        answer = {
          reply: asked.reply,
          error: {
            status: typeof e.status === "number" ? e.status : 500,
            code: typeof e.code === "string" ? e.code : "internal",
            message: String(e.message).slice(0, MESSAGE_CHARS),
          },
        };
      }
      // Queued behind the decided record's write, so the asker reads it from the store.
      this.#store.background(
        `answer decision ${asked.id}`,
        () => this.#store.sql`SELECT pg_notify(${DECIDED_CHANNEL}, ${JSON.stringify(answer)})`,
      );
    });
  }

  /**
   * Pass the operator's decision on approval `id` to `node`, which raised it; resolves with the
   * decided record, or throws the error that node answered.
   */
  async decideOn(
    node: string,
    id: string,
    decision: ApprovalDecision,
    unsandboxed: boolean,
  ): Promise<ApprovalRecord> {
    const request: DecideRequest = {
      id,
      to: node,
      reply: crypto.randomUUID(),
      decision,
      unsandboxed,
    };
    let timer: ReturnType<typeof setTimeout> | undefined;
    const answered = new Promise<DecideAnswer | undefined>((resolve) => {
      this.#waiting.set(request.reply, resolve);
      timer = setTimeout(() => resolve(undefined), ANSWER_MS);
    });
    try {
      await this.#store.retry(
        "pass a decision",
        () => this.#store.sql`SELECT pg_notify(${DECIDE_CHANNEL}, ${JSON.stringify(request)})`,
      );
      const answer = await answered;
      if (answer === undefined) {
        throw new DecisionUnansweredError(
          `node ${node}, which raised approval ${id}, did not answer within ${ANSWER_MS} ms`,
        );
      }
      if (answer.error) {
        throw new RelayedError(answer.error.code, answer.error.message);
      }
      const [row] = await this.#store.retry(
        "read a decided approval",
        () => this.#store.sql`SELECT record FROM uexec_approvals WHERE id = ${id}`,
      );
      return row.record as ApprovalRecord;
    } finally {
      clearTimeout(timer);
      this.#waiting.delete(request.reply);
    }
  }

  /**
   * Record an approval's request or decision; resolves once written (or given up past the
   * store's retry bound, then logged), so an event published after it finds the row there.
   */
  record(event: ApprovalEvent): Promise<void> {
    const record = event.approval;
    const json = record as unknown as postgres.JSONValue;
    return this.#store.background(
      `approval ${record.id}`,
      () =>
        this.#store.sql`INSERT INTO uexec_approvals (id, node, agent, status, record)
        VALUES (${record.id}, ${this.#node}, ${record.agent}, ${record.status},
          ${this.#store.sql.json(json)})
        ON CONFLICT (id) DO UPDATE SET status = excluded.status, record = excluded.record`,
    );
  }

  /** Pending approvals of live nodes, oldest first: all, or those `agent` asked for. */
  async pending(agent?: string): Promise<ApprovalRecord[]> {
    const rows = await this.#store.retry(
      "list approvals",
      () =>
        this.#store.sql`SELECT a.record FROM uexec_approvals a
        JOIN uexec_nodes n ON n.id = a.node
        WHERE a.status = 'pending' AND n.lost_at IS NULL
          AND (${agent ?? null}::text IS NULL OR a.agent = ${agent ?? null})
        ORDER BY a.created_at, a.id`,
    );
    return rows.map((row) => row.record as ApprovalRecord);
  }

  /** Where approval `id` was raised and where it stands; undefined when the store has none. */
  async place(id: string): Promise<ApprovalPlace | undefined> {
    const [row] = await this.#store.retry(
      "find an approval",
      () => this.#store.sql`SELECT node, status FROM uexec_approvals WHERE id = ${id}`,
    );
    return row ? { node: row.node, status: row.status } : undefined;
  }
}
