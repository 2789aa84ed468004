/**
 * The command history in the fleet's store (`uexec_history`, `uexec_history_approvals`): the
 * history recorder (src/history/recorder.ts) writes and reads through it exactly as through this
 * host's SQLite database, so every node reads every node's commands, each row carrying the
 * `node` it ran on. A write is retried while the store is away (within its bound; the recorder
 * keeps a failed batch, written when the store is reached again: runtime.ts). A node's commands left running when it stopped or was
 * lost are marked killed (`end_reason` `lost`, or `node_lost` by whichever node found it lost).
 * It must never store a token.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import type postgres from "postgres";
import {
  type ApprovalRow,
  type CommandRow,
  type HistoryDetail,
  type HistoryFilter,
  historyItem,
  type HistoryReads,
  type HistoryScope,
  type HistoryWrites,
  type Page,
  type Retention,
} from "../history/store.ts";
import type { FleetStore } from "./store.ts";

const decoder = new TextDecoder();

/** A command row as kept in the store's `row` column (the tail apart). */
type StoredRow = Omit<CommandRow, "tail">;

/** The history of the whole fleet, written and read by node `node`. */
export class FleetHistory implements HistoryReads, HistoryWrites {
  readonly path = "the fleet's store (uexec_history)";
  readonly #store: FleetStore;
  readonly #node: string;
  readonly #retention: Retention;
  #writes: Promise<unknown> = Promise.resolve();

  constructor(store: FleetStore, node: string, retention: Retention) {
    this.#store = store;
    this.#node = node;
    this.#retention = retention;
  }

  /** This node's commands a previous run of it left running: killed (it is gone, and they). */
  async closeOrphans(nowMs: number): Promise<void> {
    await this.#store.retry(
      "close orphaned history",
      () =>
        this.#store.sql`UPDATE uexec_history SET status = 'killed',
          row = row || jsonb_build_object('status', 'killed', 'end_reason', 'lost',
            'ended_ms', ${nowMs}::bigint)
        WHERE node = ${this.#node} AND status = 'running'`,
    );
  }

  /** Rows older than the retention's days go (the per-agent row and byte caps are this host's). */
  async prune(nowMs: number): Promise<void> {
    const before = nowMs - this.#retention.days * 86_400_000;
    await this.#store.retry(
      "prune history",
      () => this.#store.sql`DELETE FROM uexec_history WHERE started_ms < ${before}`,
    );
  }

  write(commands: CommandRow[], approvals: ApprovalRow[]): Promise<void> {
    const sql = this.#store.sql;
    const done = this.#store.retry("write history", () =>
      sql.begin(async (tx) => {
        for (const c of commands) {
          const { tail, ...row } = c;
          const json = row as unknown as postgres.JSONValue;
          await tx`INSERT INTO uexec_history
              (id, node, agent, command, status, started_ms, row, output_tail)
            VALUES (${c.id}, ${this.#node}, ${c.agent}, ${c.command}, ${c.status},
              ${c.started_ms}, ${tx.json(json)}, ${tail ? Buffer.from(tail) : null})
            ON CONFLICT (id) DO UPDATE SET status = excluded.status, row = excluded.row,
              output_tail = coalesce(excluded.output_tail, uexec_history.output_tail)`;
        }
        for (const a of approvals) {
          const json = a as unknown as postgres.JSONValue;
          await tx`INSERT INTO uexec_history_approvals (id, command_id, row)
            VALUES (${a.id}, ${a.command_id}, ${tx.json(json)})
            ON CONFLICT (id) DO UPDATE SET row = excluded.row`;
        }
      }));
    // Every write handed over, not only the last: an earlier one may still be retrying.
    this.#writes = Promise.all([this.#writes, done.catch(() => {})]);
    return done.then(() => {});
  }

  idle(): Promise<void> {
    return this.#writes.then(() => {});
  }

  async close(): Promise<void> {
    await this.idle();
  }

  async list(filter: HistoryFilter): Promise<Page> {
    const sql = this.#store.sql;
    const where = [sql`true`];
    if (filter.agent !== undefined) where.push(sql`agent = ${filter.agent}`);
    if (filter.status !== undefined) where.push(sql`status = ${filter.status}`);
    if (filter.q !== undefined && filter.q !== "") {
      const pattern = `%${filter.q.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
      where.push(sql`command ILIKE ${pattern}`);
    }
    if (filter.sinceMs !== undefined) where.push(sql`started_ms >= ${filter.sinceMs}`);
    if (filter.after !== undefined) {
      const { startedMs, id } = filter.after;
      where.push(sql`(started_ms < ${startedMs} OR (started_ms = ${startedMs} AND id < ${id}))`);
    }
    const condition = where.reduce((all, one) => sql`${all} AND ${one}`);
    const rows = await this.#store.retry(
      "read history",
      () =>
        sql`SELECT id, node, row FROM uexec_history WHERE ${condition}
        ORDER BY started_ms DESC, id DESC LIMIT ${filter.limit + 1}`,
    );
    const page = rows.slice(0, filter.limit);
    const items = await this.#items(
      page as unknown as { id: string; node: string; row: StoredRow }[],
    );
    const last = page.at(-1);
    return rows.length > filter.limit && last
      ? { items, next: { startedMs: Number(last.row.started_ms), id: last.id } }
      : { items };
  }

  async get(id: string, scope?: HistoryScope): Promise<HistoryDetail | undefined> {
    const [found] = await this.#store.retry(
      "read history",
      () => this.#store.sql`SELECT id, node, row, output_tail FROM uexec_history WHERE id = ${id}`,
    );
    if (!found) return undefined;
    const row = found.row as StoredRow;
    if (scope && (row.agent !== scope.agent || row.started_ms < scope.sinceMs)) return undefined;
    const [item] = await this.#items([
      found as unknown as { id: string; node: string; row: StoredRow },
    ]);
    const tail = found.output_tail as Uint8Array | null;
    return { ...item, output_tail: tail ? decoder.decode(tail) : "" };
  }

  /** Items of `rows` with their approvals, each saying the node it ran on. */
  async #items(rows: { id: string; node: string; row: StoredRow }[]) {
    if (rows.length === 0) return [];
    const ids = rows.map((r) => r.id);
    const approvals = await this.#store.retry(
      "read history",
      () =>
        this.#store.sql`SELECT command_id, row FROM uexec_history_approvals
        WHERE command_id IN ${this.#store.sql(ids)} ORDER BY row->>'created_at', id`,
    );
    const byCommand = Map.groupBy(approvals, (a) => a.command_id as string);
    return rows.map((r) => ({
      ...historyItem(r.row, (byCommand.get(r.id) ?? []).map((a) => a.row as ApprovalRow)),
      node: r.node,
    }));
  }
}
