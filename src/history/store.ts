/**
 * The command history database: one SQLite file (`history.db`, 0600, WAL) in the state
 * directory holding a row per command with its approvals and the tail of its output, the
 * queries behind `GET /v1/history`, and retention by age and, per agent, by rows and bytes (so
 * no agent's commands ever evict another's).
 *
 * Every call is synchronous (`node:sqlite`) and may throw (a full disk, a database another
 * process holds locked): the caller decides what a failure means. The server reads through one
 * connection on its own thread and writes through another on a worker (writer.ts). It never waits on a lock
 * (`busy_timeout` 0), so it can never stall the event loop behind another process.
 *
 * @module
 */

import { DatabaseSync, type SQLInputValue, type StatementSync } from "node:sqlite";
import type { Denial } from "../sandbox/policy/denial.ts";

/** Where a command stands; see "History" in docs/operations.md for each one. */
export const HISTORY_STATUSES = ["running", "exited", "failed", "killed", "denied"] as const;

/** A command's status. */
export type HistoryStatus = (typeof HISTORY_STATUSES)[number];

/** One command as written. */
export interface CommandRow {
  id: string;
  agent: string;
  command: string;
  workdir: string;
  profile: string;
  tty: boolean;
  session_id: number | null;
  status: HistoryStatus;
  started_ms: number;
  ended_ms: number | null;
  exit_code: number | null;
  end_reason: string | null;
  duration_ms: number | null;
  output_bytes: number;
  cpu_ms: number | null;
  peak_memory_bytes: number | null;
  denial: Denial | null;
  /** The connections its sessions made through the egress proxy (the first 256). */
  egress: EgressConnection[];
  /** The output's last bytes; undefined leaves the stored tail as it is. */
  tail?: Uint8Array;
}

/** One approval of a command as written. */
export interface ApprovalRow {
  id: string;
  command_id: string;
  status: string;
  reason: string;
  runs: string;
  escalation: unknown;
  denial: Denial | null;
  created_at: string;
  decided_at: string | null;
  /** `operator`, `timeout` or `cancelled`; null while pending. */
  decided_by: string | null;
  granted: unknown;
}

/** An approval as the history API shows it. */
export type HistoryApproval = Omit<ApprovalRow, "command_id">;

/** A command as the history API shows it. */
export interface HistoryItem {
  id: string;
  agent: string;
  command: string;
  workdir: string;
  profile: string;
  tty: boolean;
  session_id: number | null;
  status: HistoryStatus;
  started_at: string;
  ended_at: string | null;
  exit_code: number | null;
  end_reason: string | null;
  duration_seconds: number | null;
  output_bytes: number;
  usage: { cpu_seconds: number | null; peak_memory_bytes: number | null };
  denial: Denial | null;
  egress: EgressConnection[];
  approvals: HistoryApproval[];
  /** The fleet node it ran on (with `UEXEC_STORE`; absent on one host). */
  node?: string;
}

/** One connection through the egress proxy, as the history keeps it. */
export interface EgressConnection {
  session_id: number | null;
  host: string;
  port: number;
  address: string | null;
  method: string;
  decision: string;
  rule: string;
  bytes_up: number;
  bytes_down: number;
  duration_ms: number;
}

/** A command with its output tail (`GET /v1/history/{id}`). */
export interface HistoryDetail extends HistoryItem {
  /** The last 64 KiB of its output, decoded as UTF-8. */
  output_tail: string;
}

/** Where the history is read from: this host's database, or the fleet's store. */
export interface HistoryReads {
  /** Where it is, for a warning (never a secret). */
  readonly path: string;
  /** Mark commands a previous run of this server (node) left running as killed. */
  closeOrphans(nowMs: number): void | Promise<void>;
  /** Delete what is past the retention. */
  prune(nowMs: number): unknown;
  list(filter: HistoryFilter): Page | Promise<Page>;
  get(id: string, scope?: HistoryScope):
    | HistoryDetail
    | undefined
    | Promise<
      HistoryDetail | undefined
    >;
  close(): void | Promise<void>;
}

/** Where the history is written: this host's writer thread, or the fleet's store. */
export interface HistoryWrites {
  write(commands: CommandRow[], approvals: ApprovalRow[]): Promise<void>;
  /** Resolves once every write handed over so far has settled. */
  idle(): Promise<void>;
  close(): Promise<void>;
}

/** One page of commands, newest first, and the position after its last one if more remain. */
export interface Page {
  items: HistoryItem[];
  next?: { startedMs: number; id: string };
}

/** What of the history an agent may read: what it ran itself, from its minting on. */
export interface HistoryScope {
  agent: string;
  sinceMs: number;
}

/** A history query, validated. */
export interface HistoryFilter {
  /** Only this agent's commands. */
  agent?: string;
  status?: HistoryStatus;
  /** A case-insensitive substring of the command. */
  q?: string;
  /** Only commands started at or after this time (ms since the epoch). */
  sinceMs?: number;
  limit: number;
  /** Only commands older than this position (from a previous page's cursor). */
  after?: { startedMs: number; id: string };
}

/** How long and how much history is kept. */
export interface Retention {
  days: number;
  /** The newest this many rows of each agent are kept. */
  maxRows: number;
  /** The newest rows of each agent whose sizes ({@link ROW_BYTES}) add up to at most this. */
  maxBytes: number;
}

/**
 * What a row weighs against its agent's byte budget: its command and output tail, plus this
 * much for the rest of the row and its approvals.
 */
export const ROW_OVERHEAD_BYTES = 512;
const ROW_BYTES = `length(command) + coalesce(length(output_tail), 0) + ${ROW_OVERHEAD_BYTES}`;

/** Rows one pruning pass deletes at most, so no pass holds the event loop long. */
const PRUNE_BATCH = 1000;

const SCHEMA = `
CREATE TABLE IF NOT EXISTS commands (
  id TEXT PRIMARY KEY,
  agent TEXT NOT NULL,
  command TEXT NOT NULL,
  workdir TEXT NOT NULL,
  profile TEXT NOT NULL,
  tty INTEGER NOT NULL,
  session_id INTEGER,
  status TEXT NOT NULL,
  started_ms INTEGER NOT NULL,
  ended_ms INTEGER,
  exit_code INTEGER,
  end_reason TEXT,
  duration_ms REAL,
  output_bytes INTEGER NOT NULL,
  cpu_ms REAL,
  peak_memory_bytes INTEGER,
  denial TEXT,
  output_tail BLOB,
  egress TEXT
);
CREATE INDEX IF NOT EXISTS commands_by_time ON commands (started_ms, id);
CREATE INDEX IF NOT EXISTS commands_by_agent ON commands (agent, started_ms, id);
CREATE TABLE IF NOT EXISTS approvals (
  id TEXT PRIMARY KEY,
  command_id TEXT NOT NULL REFERENCES commands (id) ON DELETE CASCADE,
  status TEXT NOT NULL,
  reason TEXT NOT NULL,
  runs TEXT NOT NULL,
  escalation TEXT NOT NULL,
  denial TEXT,
  created_at TEXT NOT NULL,
  decided_at TEXT,
  decided_by TEXT,
  granted TEXT
);
CREATE INDEX IF NOT EXISTS approvals_by_command ON approvals (command_id);
`;

const COMMAND_COLUMNS =
  "id, agent, command, workdir, profile, tty, session_id, status, started_ms, ended_ms, " +
  "exit_code, end_reason, duration_ms, output_bytes, cpu_ms, peak_memory_bytes, denial, egress";

const decoder = new TextDecoder();

/** The history database. */
export class HistoryStore {
  readonly path: string;
  #db: DatabaseSync;
  #retention: Retention;
  #upsertCommand: StatementSync;
  #upsertApproval: StatementSync;
  #pruneAgent: StatementSync;

  /**
   * Open the database at `path`; unless `existing`, create it first (0600, its WAL files too)
   * with its schema. `existing` is for a second connection (the writer's worker), which must
   * not touch the process-wide umask.
   */
  constructor(path: string, retention: Retention, existing = false) {
    this.path = path;
    this.#retention = retention;
    if (existing) {
      this.#db = new DatabaseSync(path);
      this.#configure();
    } else {
      const file = Deno.openSync(path, { create: true, read: true, write: true, mode: 0o600 });
      file.close();
      Deno.chmodSync(path, 0o600);
      const umask = Deno.umask(0o077);
      try {
        this.#db = new DatabaseSync(path);
        this.#configure();
        this.#db.exec(SCHEMA);
        // A database made before the egress audit existed gets its column.
        const columns = this.#db.prepare("PRAGMA table_info(commands)").all() as { name: string }[];
        if (!columns.some((c) => c.name === "egress")) {
          this.#db.exec("ALTER TABLE commands ADD COLUMN egress TEXT");
        }
      } finally {
        Deno.umask(umask);
      }
    }
    this.#upsertCommand = this.#db.prepare(
      `INSERT INTO commands (${COMMAND_COLUMNS}, output_tail)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (id) DO UPDATE SET session_id = excluded.session_id,
         status = excluded.status, ended_ms = excluded.ended_ms, exit_code = excluded.exit_code,
         end_reason = excluded.end_reason, duration_ms = excluded.duration_ms,
         output_bytes = excluded.output_bytes, cpu_ms = excluded.cpu_ms,
         peak_memory_bytes = excluded.peak_memory_bytes, denial = excluded.denial,
         egress = excluded.egress,
         output_tail = coalesce(excluded.output_tail, output_tail)`,
    );
    // Newest first through the (agent, started_ms, id) index: a row goes once it is past the
    // agent's row count or its running total of bytes passes the budget.
    this.#pruneAgent = this.#db.prepare(
      `DELETE FROM commands WHERE rowid IN (
         SELECT rowid FROM (
           SELECT rowid, row_number() OVER newest AS n, sum(${ROW_BYTES}) OVER newest AS total
           FROM commands WHERE agent = ?
           WINDOW newest AS (ORDER BY started_ms DESC, id DESC ROWS UNBOUNDED PRECEDING)
         ) WHERE n > ? OR total > ? LIMIT ?)`,
    );
    this.#upsertApproval = this.#db.prepare(
      `INSERT INTO approvals (id, command_id, status, reason, runs, escalation, denial,
         created_at, decided_at, decided_by, granted)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (id) DO UPDATE SET status = excluded.status,
         decided_at = excluded.decided_at, decided_by = excluded.decided_by,
         granted = excluded.granted`,
    );
  }

  #configure(): void {
    this.#db.exec("PRAGMA busy_timeout = 0");
    this.#db.exec("PRAGMA journal_mode = WAL");
    this.#db.exec("PRAGMA synchronous = NORMAL");
    this.#db.exec("PRAGMA foreign_keys = ON");
  }

  /**
   * Mark commands a previous server left running as killed (`end_reason` `lost`): that server
   * is gone, and its children with it.
   */
  closeOrphans(nowMs: number): void {
    this.#db.prepare(
      `UPDATE commands SET status = 'killed', end_reason = 'lost', ended_ms = ?
       WHERE status = 'running'`,
    ).run(nowMs);
  }

  /** Write `commands` and `approvals` in one transaction. */
  write(commands: Iterable<CommandRow>, approvals: Iterable<ApprovalRow>): void {
    // A failure whose rollback failed too (a full disk) must not block every later write.
    if (this.#db.isTransaction) this.#db.exec("ROLLBACK");
    this.#db.exec("BEGIN IMMEDIATE");
    try {
      for (const c of commands) {
        this.#upsertCommand.run(
          c.id,
          c.agent,
          c.command,
          c.workdir,
          c.profile,
          c.tty ? 1 : 0,
          c.session_id,
          c.status,
          c.started_ms,
          c.ended_ms,
          c.exit_code,
          c.end_reason,
          c.duration_ms,
          c.output_bytes,
          c.cpu_ms,
          c.peak_memory_bytes,
          c.denial === null ? null : JSON.stringify(c.denial),
          c.egress.length === 0 ? null : JSON.stringify(c.egress),
          c.tail ?? null,
        );
      }
      for (const a of approvals) {
        this.#upsertApproval.run(
          a.id,
          a.command_id,
          a.status,
          a.reason,
          a.runs,
          JSON.stringify(a.escalation),
          a.denial === null ? null : JSON.stringify(a.denial),
          a.created_at,
          a.decided_at,
          a.decided_by,
          a.granted === undefined ? null : JSON.stringify(a.granted),
        );
      }
      this.#db.exec("COMMIT");
    } catch (err) {
      try {
        if (this.#db.isTransaction) this.#db.exec("ROLLBACK");
      } catch {
        // Rolled back by the next write; the first error is the one to report.
      }
      throw err;
    }
  }

  /**
   * Delete commands older than the retention's days, and of each agent in `agents` (every
   * agent when absent) those beyond its newest `maxRows` or `maxBytes` (oldest first), at most
   * {@link PRUNE_BATCH} of each per call; returns how many were deleted. One agent's commands
   * never count against another's.
   */
  prune(nowMs: number, agents?: Iterable<string>): number {
    const cutoff = nowMs - this.#retention.days * 86_400_000;
    let deleted = Number(
      this.#db.prepare(
        `DELETE FROM commands WHERE id IN
           (SELECT id FROM commands WHERE started_ms < ? ORDER BY started_ms LIMIT ?)`,
      ).run(cutoff, PRUNE_BATCH).changes,
    );
    const names = agents ??
      this.#db.prepare("SELECT DISTINCT agent FROM commands").all().map((r) => String(r.agent));
    for (const agent of names) {
      deleted += Number(
        this.#pruneAgent.run(
          agent,
          this.#retention.maxRows,
          this.#retention.maxBytes,
          PRUNE_BATCH,
        ).changes,
      );
    }
    return deleted;
  }

  /** One page of commands, newest first, and the position after its last one if more remain. */
  list(filter: HistoryFilter): { items: HistoryItem[]; next?: { startedMs: number; id: string } } {
    const where: string[] = [];
    const args: SQLInputValue[] = [];
    if (filter.agent !== undefined) {
      where.push("agent = ?");
      args.push(filter.agent);
    }
    if (filter.status !== undefined) {
      where.push("status = ?");
      args.push(filter.status);
    }
    if (filter.q !== undefined && filter.q !== "") {
      where.push("command LIKE ? ESCAPE '\\'");
      args.push(`%${filter.q.replace(/[\\%_]/g, (c) => `\\${c}`)}%`);
    }
    if (filter.sinceMs !== undefined) {
      where.push("started_ms >= ?");
      args.push(filter.sinceMs);
    }
    if (filter.after !== undefined) {
      where.push("(started_ms < ? OR (started_ms = ? AND id < ?))");
      args.push(filter.after.startedMs, filter.after.startedMs, filter.after.id);
    }
    const rows = this.#db.prepare(
      `SELECT ${COMMAND_COLUMNS} FROM commands
       ${where.length ? `WHERE ${where.join(" AND ")}` : ""}
       ORDER BY started_ms DESC, id DESC LIMIT ?`,
    ).all(...args, filter.limit + 1) as unknown as StoredCommand[];
    const page = rows.slice(0, filter.limit);
    const items = this.#withApprovals(page);
    const last = page.at(-1);
    return rows.length > filter.limit && last
      ? { items, next: { startedMs: last.started_ms, id: last.id } }
      : { items };
  }

  /** One command with its output tail; with `agent`, only that agent's. */
  get(id: string, scope?: HistoryScope): HistoryDetail | undefined {
    const row = this.#db.prepare(
      `SELECT ${COMMAND_COLUMNS}, output_tail FROM commands WHERE id = ?`,
    ).get(id) as (StoredCommand & { output_tail: Uint8Array | null }) | undefined;
    if (!row || (scope && (row.agent !== scope.agent || row.started_ms < scope.sinceMs))) {
      return undefined;
    }
    const [item] = this.#withApprovals([row]);
    return { ...item, output_tail: row.output_tail ? decoder.decode(row.output_tail) : "" };
  }

  /** Close the database. */
  close(): void {
    if (this.#db.isOpen) this.#db.close();
  }

  #withApprovals(rows: StoredCommand[]): HistoryItem[] {
    if (rows.length === 0) return [];
    const approvals = this.#db.prepare(
      `SELECT * FROM approvals WHERE command_id IN (${rows.map(() => "?").join(",")})
       ORDER BY created_at, id`,
    ).all(...rows.map((r) => r.id)) as unknown as StoredApproval[];
    const byCommand = Map.groupBy(approvals, (a) => a.command_id);
    return rows.map((r) =>
      historyItem(
        {
          ...r,
          tty: r.tty === 1,
          denial: r.denial === null ? null : JSON.parse(r.denial),
          egress: r.egress === null ? [] : JSON.parse(r.egress),
        },
        (byCommand.get(r.id) ?? []).map((a) => ({
          ...a,
          escalation: JSON.parse(a.escalation),
          denial: a.denial === null ? null : JSON.parse(a.denial),
          granted: a.granted === null ? null : JSON.parse(a.granted),
        })),
      )
    );
  }
}

/**
 * A command as the history API shows it, from its row and its approvals' rows (whichever store
 * kept them: this host's database or the fleet's).
 */
export function historyItem(r: Omit<CommandRow, "tail">, approvals: ApprovalRow[]): HistoryItem {
  return {
    id: r.id,
    agent: r.agent,
    command: r.command,
    workdir: r.workdir,
    profile: r.profile,
    tty: r.tty,
    session_id: r.session_id,
    status: r.status,
    started_at: new Date(r.started_ms).toISOString(),
    ended_at: r.ended_ms === null ? null : new Date(r.ended_ms).toISOString(),
    exit_code: r.exit_code,
    end_reason: r.end_reason,
    duration_seconds: r.duration_ms === null ? null : r.duration_ms / 1000,
    output_bytes: r.output_bytes,
    usage: {
      cpu_seconds: r.cpu_ms === null ? null : r.cpu_ms / 1000,
      peak_memory_bytes: r.peak_memory_bytes,
    },
    denial: r.denial,
    egress: r.egress,
    approvals: approvals.map((a) => ({
      id: a.id,
      status: a.status,
      reason: a.reason,
      runs: a.runs,
      escalation: a.escalation,
      denial: a.denial,
      created_at: a.created_at,
      decided_at: a.decided_at,
      decided_by: a.decided_by,
      granted: a.granted,
    })),
  };
}

interface StoredCommand {
  id: string;
  agent: string;
  command: string;
  workdir: string;
  profile: string;
  tty: number;
  session_id: number | null;
  status: HistoryStatus;
  started_ms: number;
  ended_ms: number | null;
  exit_code: number | null;
  end_reason: string | null;
  duration_ms: number | null;
  output_bytes: number;
  cpu_ms: number | null;
  peak_memory_bytes: number | null;
  denial: string | null;
  egress: string | null;
}

interface StoredApproval {
  id: string;
  command_id: string;
  status: string;
  reason: string;
  runs: string;
  escalation: string;
  denial: string | null;
  created_at: string;
  decided_at: string | null;
  decided_by: string | null;
  granted: string | null;
}
