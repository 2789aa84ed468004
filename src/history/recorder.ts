/**
 * The history recorder: turns each `exec_command` (its sessions, output, denials and approvals)
 * into a history row and writes the rows in batches off the request path: changes are queued
 * and handed to the writer's worker thread together, in one transaction, a short while after
 * the first change (one timer, armed only while something is queued) or at once when the queue
 * is full. Reads flush first and wait for the writes, so a caller reads its own commands.
 *
 * A command must never fail because of its history: a write that fails (a full disk, a
 * database another process holds locked) is logged once as a warning and shown on `/healthz`
 * until a later write succeeds; the batch it held is dropped. It copies no output as it arrives:
 * a command's last 64 KiB are read from its session's own output ring when asked for and when
 * the session ends (kept then only until the command is settled, for a retry to continue).
 *
 * @module
 */

import type { ApprovalRecord } from "../approvals/store.ts";
import type { EventBus } from "../events/bus.ts";
import type { Logger } from "../log.ts";
import { concat } from "../output/head_tail.ts";
import type { OutputRing } from "../output/output_ring.ts";
import { nextBoundary } from "../output/utf8.ts";
import type { Denial } from "../sandbox/policy/denial.ts";
import type { Session } from "../sessions/session.ts";
import type {
  ApprovalRow,
  CommandRow,
  HistoryDetail,
  HistoryFilter,
  HistoryItem,
  HistoryReads,
  HistoryScope,
  HistoryWrites,
} from "./store.ts";

/** What a command is started with. */
export interface CommandStart {
  agent: string;
  command: string;
  workdir: string;
  profile: string;
  tty: boolean;
}

/** What `/healthz` shows about the history. */
export interface HistoryHealth {
  ok: boolean;
  error?: string;
}

/**
 * How long changes wait to be written together: one transaction then carries the changes of
 * many commands, so a burst of short commands pays for a few writes, not one each.
 */
const FLUSH_DELAY_MS = 100;
/** Queued rows that trigger a flush at once. */
const FLUSH_ROWS = 256;
/** Rows kept for a retry after failed writes; beyond this a failed batch is dropped. */
const MAX_PENDING = 10_000;
/** Commands kept in memory until their last event; the oldest are forgotten beyond this. */
const MAX_TRACKED = 4096;
/** Egress connections kept per command; the rest are counted in the metrics only. */
const MAX_EGRESS = 256;

interface Entry {
  row: CommandRow;
  /** The exec call has returned (or thrown). */
  settled: boolean;
  /** The live session, if one runs. */
  session?: Session;
  /** The tail of what its ended sessions printed (a retry's session continues it). */
  tail?: Uint8Array;
  /** Output bytes its ended sessions printed. */
  before: number;
}

/** How much of each command's output the history keeps: 64 KiB. */
export const TAIL_BYTES = 64 * 1024;

/**
 * The last `capacity` bytes of `earlier` followed by what `output` holds, starting on a UTF-8
 * character boundary once that much went through (read from the session's own output ring, so
 * nothing is copied per chunk; the ring holds far more than a tail).
 */
export function outputTail(
  earlier: Uint8Array | undefined,
  output: OutputRing,
  capacity = TAIL_BYTES,
): Uint8Array {
  const own = output.read(Math.max(output.start, output.end - capacity)).bytes;
  const all = earlier?.length ? concat([earlier, own], earlier.length + own.length) : own;
  const last = all.subarray(Math.max(0, all.length - capacity));
  const seen = (earlier?.length ?? 0) + output.end;
  return seen < capacity ? last : last.subarray(nextBoundary(last, 0));
}

/** Records commands into a {@link HistoryStore}. */
export class HistoryRecorder {
  #store: HistoryReads;
  /** Orphans closed and old rows pruned, once at start-up (before the first read). */
  #startedUp: Promise<void>;
  #writer: HistoryWrites;
  #log: Logger;
  #entries = new Map<string, Entry>();
  #bySession = new WeakMap<Session, Entry>();
  /**
   * Commands by the id of their sessions, for the egress proxy's records, which come when a
   * connection ended: maybe after its session, and its command, did (a tunnel ends when its
   * origin closes it). Kept past the command, the newest {@link MAX_TRACKED} sessions.
   */
  #bySessionId = new Map<number, Entry>();
  #dirty = new Map<string, CommandRow>();
  #approvals = new Map<string, ApprovalRow>();
  #timer?: ReturnType<typeof setTimeout>;
  /** Batches handed to the writer so far, and the last batch each row went out in. */
  #batch = 0;
  #sentIn = new Map<string, number>();
  #health: HistoryHealth = { ok: true };
  #unsubscribe: () => void;

  /**
   * Record through `writer`, reading through `store` (opened here on the server's thread, where
   * it also closes what a previous server left running and prunes, once at start-up).
   */
  constructor(store: HistoryReads, writer: HistoryWrites, bus: EventBus, log: Logger) {
    this.#store = store;
    this.#writer = writer;
    this.#log = log;
    this.#unsubscribe = bus.subscribe((event) => {
      if (event.type === "approval_requested" || event.type === "approval_decided") {
        this.#approval(event.approval as ApprovalRecord);
      }
      if (event.type === "egress" && event.session_id !== undefined) {
        const entry = this.#bySessionId.get(event.session_id);
        if (!entry || entry.row.egress.length >= MAX_EGRESS) return;
        const { type: _, agent: __, ...connection } = event;
        entry.row.egress.push({
          ...connection,
          session_id: event.session_id,
          address: event.address ?? null,
        });
        this.#queue(entry.row);
      }
    });
    const now = Date.now();
    this.#startedUp = (async () => {
      await store.closeOrphans(now);
      await store.prune(now);
    })().catch((err) => this.#failed(err));
  }

  /** An `exec_command` was accepted: its row appears, running. */
  begin(execId: string, start: CommandStart): void {
    const row: CommandRow = {
      id: execId,
      ...start,
      session_id: null,
      status: "running",
      started_ms: Date.now(),
      ended_ms: null,
      exit_code: null,
      end_reason: null,
      duration_ms: null,
      output_bytes: 0,
      cpu_ms: null,
      peak_memory_bytes: null,
      denial: null,
      egress: [],
    };
    this.#entries.set(execId, { row, settled: false, before: 0 });
    if (this.#entries.size > MAX_TRACKED) {
      this.#entries.delete(this.#entries.keys().next().value!);
    }
    this.#queue(row);
  }

  /** A session of `execId` started (a retry starts a second one): keep its output's tail. */
  watch(session: Session, execId: string | undefined): void {
    const entry = execId === undefined ? undefined : this.#entries.get(execId);
    if (!entry) return;
    entry.before = entry.row.output_bytes;
    entry.session = session;
    this.#bySession.set(session, entry);
    this.#bySessionId.delete(session.id);
    this.#bySessionId.set(session.id, entry);
    if (this.#bySessionId.size > MAX_TRACKED) {
      this.#bySessionId.delete(this.#bySessionId.keys().next().value!);
    }
    Object.assign(entry.row, {
      session_id: session.id,
      status: "running",
      ended_ms: null,
      exit_code: null,
      end_reason: null,
    });
    this.#queue(entry.row);
    session.listen({
      ended: (status) => {
        const now = Date.now();
        entry.tail = outputTail(entry.tail, session.ring);
        // The kernel killed part of its tree for memory (its limit or the aggregate cap).
        const reason = session.usage?.killed_by ?? session.endReason;
        Object.assign(entry.row, {
          ended_ms: now,
          exit_code: status.code,
          end_reason: reason,
          duration_ms: performance.now() - session.startedMs,
          status: reason !== "exit" ? "killed" : status.code === 0 ? "exited" : "failed",
          tail: entry.tail,
          output_bytes: entry.before + session.offset,
          cpu_ms: session.usage ? session.usage.cpu_seconds * 1000 : null,
          peak_memory_bytes: session.usage?.peak_memory_bytes ?? null,
        });
        entry.session = undefined;
        this.#queue(entry.row);
        this.#forgetIfDone(entry);
      },
    });
  }

  /** The sandbox denied one of the command's runs. */
  denied(session: Session, denial: Denial): void {
    const entry = this.#bySession.get(session);
    if (!entry) return;
    entry.row.denial = denial;
    if (entry.session === undefined) entry.row.status = "denied";
    this.#queue(entry.row);
  }

  /**
   * The exec call returned; `error` when it threw: a refused approval or the policy makes the
   * command `denied`, anything else that stopped it before it ran `failed`.
   */
  settle(execId: string, error?: { rejected: boolean }): void {
    const entry = this.#entries.get(execId);
    if (!entry) return;
    entry.settled = true;
    if (error && entry.session === undefined && entry.row.ended_ms === null) {
      Object.assign(entry.row, {
        ended_ms: Date.now(),
        status: error.rejected ? "denied" : "failed",
        end_reason: error.rejected ? "rejected" : "error",
      });
      this.#queue(entry.row);
    }
    this.#forgetIfDone(entry);
  }

  /** A page of history (pending writes are flushed first, so a caller reads its own). */
  async list(
    filter: HistoryFilter,
  ): Promise<{ items: HistoryItem[]; next?: { startedMs: number; id: string } }> {
    await this.#written();
    return await this.#store.list(filter);
  }

  /** One command with its output tail (the live tail while it runs). */
  async get(id: string, scope?: HistoryScope): Promise<HistoryDetail | undefined> {
    await this.#written();
    const found = await this.#store.get(id, scope);
    const entry = this.#entries.get(id);
    if (!found || !entry?.session) return found;
    const tail = outputTail(entry.tail, entry.session.ring);
    return { ...found, output_tail: new TextDecoder().decode(tail) };
  }

  /** Whether the last write succeeded (pending writes are flushed first). */
  async health(): Promise<HistoryHealth> {
    await this.#written();
    return { ...this.#health };
  }

  /** Hand everything queued to the writer now, as one transaction. */
  flush(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#dirty.size === 0 && this.#approvals.size === 0) return;
    for (const row of this.#dirty.values()) {
      // A running command's output count, as of now.
      const entry = this.#entries.get(row.id);
      if (entry?.session) row.output_bytes = entry.before + entry.session.offset;
    }
    const commands = [...this.#dirty.values()].map((row) => ({ ...row }));
    for (const row of this.#dirty.values()) row.tail = undefined;
    const approvals = [...this.#approvals.values()];
    this.#dirty.clear();
    this.#approvals.clear();
    const batch = ++this.#batch;
    for (const row of commands) this.#sentIn.set(`c:${row.id}`, batch);
    for (const a of approvals) this.#sentIn.set(`a:${a.id}`, batch);
    this.#writer.write(commands, approvals).then(
      () => {
        this.#settled(batch, commands, approvals);
        if (!this.#health.ok) this.#log.info("history_recovered", {});
        this.#health = { ok: true };
      },
      (err) => {
        const latest = this.#settled(batch, commands, approvals);
        this.#failed(err);
        this.#requeue(latest.commands, latest.approvals);
      },
    );
  }

  /**
   * Forget that a batch is in flight; returns its rows that no later batch carries (a later
   * batch holds a newer version of the others, which must not be overwritten by this one).
   */
  #settled(batch: number, commands: CommandRow[], approvals: ApprovalRow[]) {
    const latest = (key: string) => {
      if (this.#sentIn.get(key) !== batch) return false;
      this.#sentIn.delete(key);
      return true;
    };
    return {
      commands: commands.filter((row) => latest(`c:${row.id}`)),
      approvals: approvals.filter((a) => latest(`a:${a.id}`)),
    };
  }

  /**
   * Keep a failed batch for the next flush (one that a later change or read brings; none is
   * scheduled for it), unless that much is already waiting: then it is dropped.
   */
  #requeue(commands: CommandRow[], approvals: ApprovalRow[]): void {
    if (this.#dirty.size + commands.length > MAX_PENDING) return;
    for (const row of commands) {
      const newer = this.#dirty.get(row.id);
      if (newer) newer.tail ??= row.tail;
      else this.#dirty.set(row.id, row);
    }
    for (const a of approvals) if (!this.#approvals.has(a.id)) this.#approvals.set(a.id, a);
  }

  /** Write what is queued, then close the writer and the database. */
  async close(): Promise<void> {
    this.#unsubscribe();
    await this.#written();
    await this.#writer.close();
    await this.#store.close();
  }

  /** Flush, and wait until every write handed over so far has settled. */
  async #written(): Promise<void> {
    await this.#startedUp;
    this.flush();
    await this.#writer.idle();
  }

  #approval(record: ApprovalRecord): void {
    const execId = record.exec_id;
    const entry = execId ? this.#entries.get(execId) : undefined;
    if (!entry || !execId) return;
    this.#queue(entry.row);
    this.#approvals.set(record.id, {
      id: record.id,
      command_id: execId,
      status: record.status,
      reason: record.reason,
      runs: record.runs,
      escalation: record.escalation,
      denial: record.denial,
      created_at: record.created_at,
      decided_at: record.decided_at ?? null,
      decided_by: record.decided_by ?? null,
      granted: record.granted ?? null,
    });
    this.#arm();
  }

  #queue(row: CommandRow): void {
    this.#dirty.set(row.id, row);
    this.#arm();
  }

  #arm(): void {
    if (this.#dirty.size + this.#approvals.size >= FLUSH_ROWS) return this.flush();
    this.#timer ??= setTimeout(() => this.flush(), FLUSH_DELAY_MS);
  }

  #forgetIfDone(entry: Entry): void {
    if (entry.settled && entry.session === undefined) {
      entry.tail = undefined;
      this.#entries.delete(entry.row.id);
    }
  }

  /** A database step failed: logged (once per distinct error) and shown as health. */
  #failed(err: unknown): void {
    const error = (err as Error).message;
    if (this.#health.error !== error) {
      this.#log.warn("history_write_failed", { error, path: this.#store.path });
    }
    this.#health = { ok: false, error };
  }
}
