/**
 * The fleet's approvals in the store (`uexec_approvals`): each node writes a record of every
 * approval it raises and of its decision (the approval store on the node that raised it stays
 * the one that decides and wakes the waiting command), so the operator lists the fleet's pending
 * approvals on any node and a decision posted on any node is passed to the one that raised it.
 * A lost node's pending approvals end with it (see nodes.ts). It must never decide an approval.
 *
 * @module
 */

import type postgres from "postgres";
import type { ApprovalEvent, ApprovalRecord } from "../approvals/store.ts";
import type { FleetStore } from "./store.ts";

/** Where an approval was raised, and where it stands. */
export interface ApprovalPlace {
  node: string;
  status: string;
}

/** The store's side of the fleet's approvals, for node `node`. */
export class FleetApprovals {
  readonly #store: FleetStore;
  readonly #node: string;

  constructor(store: FleetStore, node: string) {
    this.#store = store;
    this.#node = node;
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
