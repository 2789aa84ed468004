/**
 * The fleet's shared store on PostgreSQL (`UEXEC_STORE=postgres://...`): the connection (npm
 * `postgres`), the schema's versioned migrations applied at start in one transaction under an
 * advisory lock (so N nodes starting at once apply each exactly once), `LISTEN/NOTIFY`, and
 * writes retried while the store is away, within a bound past which the write fails with
 * {@link StoreUnavailableError} (and background writes are logged as lost and shown in
 * `/healthz`). Without `UEXEC_STORE` none of this runs: one host keeps its state in the state
 * directory and SQLite.
 *
 * It must never log the store's URL (it may hold a password) nor any token.
 *
 * @module
 */

import postgres from "postgres";
import type { Logger } from "../log.ts";
import { ApiError } from "../errors.ts";

/** The connection the fleet's modules query through. */
export type Sql = postgres.Sql;

/** The store was unreachable for longer than the retry bound (503 `store_unavailable`). */
export class StoreUnavailableError extends ApiError {
  readonly code = "store_unavailable";
}

/** A lock id of its own for migrations (any constant; "uexec" in ASCII). */
const MIGRATION_LOCK = 0x7565786563;

/**
 * The schema, one entry per version; a version once released is never edited, only followed.
 * Tokens are kept as SHA-256 digests only.
 */
const MIGRATIONS: string[] = [
  `CREATE TABLE uexec_operator (
     only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
     token_sha256 text NOT NULL
   );
   CREATE TABLE uexec_agents (
     name text PRIMARY KEY,
     token_sha256 text NOT NULL UNIQUE,
     record jsonb NOT NULL
   );
   CREATE TABLE uexec_nodes (
     id text PRIMARY KEY,
     ordinal serial UNIQUE,
     url text NOT NULL,
     credential_sha256 text NOT NULL,
     started_at timestamptz NOT NULL DEFAULT now(),
     heartbeat_at timestamptz NOT NULL DEFAULT now(),
     lost_at timestamptz
   );
   CREATE TABLE uexec_approvals (
     id text PRIMARY KEY,
     node text NOT NULL REFERENCES uexec_nodes (id),
     agent text NOT NULL,
     status text NOT NULL,
     record jsonb NOT NULL,
     created_at timestamptz NOT NULL DEFAULT now()
   );
   CREATE INDEX uexec_approvals_pending ON uexec_approvals (node) WHERE status = 'pending';`,
  `CREATE TABLE uexec_history (
     id text PRIMARY KEY,
     node text NOT NULL,
     agent text NOT NULL,
     command text NOT NULL,
     status text NOT NULL,
     started_ms bigint NOT NULL,
     row jsonb NOT NULL,
     output_tail bytea
   );
   CREATE INDEX uexec_history_by_time ON uexec_history (started_ms, id);
   CREATE INDEX uexec_history_by_agent ON uexec_history (agent, started_ms, id);
   CREATE INDEX uexec_history_running ON uexec_history (node) WHERE status = 'running';
   CREATE TABLE uexec_history_approvals (
     id text PRIMARY KEY,
     command_id text NOT NULL REFERENCES uexec_history (id) ON DELETE CASCADE,
     row jsonb NOT NULL
   );
   CREATE INDEX uexec_history_approvals_by_command ON uexec_history_approvals (command_id);`,
  `CREATE TABLE uexec_sign_in_codes (
     digest text PRIMARY KEY,
     expires_at timestamptz NOT NULL
   );
   CREATE TABLE uexec_web_sessions (
     digest text PRIMARY KEY,
     expires_at timestamptz NOT NULL
   );`,
];

/** Store settings. */
export interface StoreOptions {
  /** `UEXEC_STORE`. */
  url: string;
  /** How long a write is retried while the store is away (`UEXEC_STORE_RETRY_MS`). */
  retryMs: number;
  log: Logger;
}

/** Errors that mean the store is away (worth retrying), not that the statement is wrong. */
function storeAway(err: unknown): boolean {
  const code = (err as { code?: unknown })?.code;
  return typeof code === "string" && (
    code.startsWith("CONNECT") || code.startsWith("ECONN") || code === "EPIPE" ||
    code === "ETIMEDOUT" || code === "ENOTFOUND" || code === "EAI_AGAIN" ||
    // admin_shutdown, crash_shutdown, cannot_connect_now
    code === "57P01" || code === "57P02" || code === "57P03"
  );
}

const BACKGROUND_LIMIT = 10_000;

/** A channel nothing is sent on: its `LISTEN`, redone by the driver, tells a reconnect. */
const RECONNECT_CHANNEL = "uexec_reconnect";

/** The open store. */
export class FleetStore {
  readonly sql: Sql;
  readonly #retryMs: number;
  readonly #log: Logger;
  /** Background writes in order (heartbeats excepted), each retried within the bound. */
  #queue: Promise<void> = Promise.resolve();
  #queued = 0;
  /** The last background write that was given up, for `/healthz`. */
  #lost: { what: string; at: string; error: string } | undefined;
  #closed = false;
  readonly #closing = new AbortController();

  private constructor(sql: Sql, opts: StoreOptions) {
    this.sql = sql;
    this.#retryMs = opts.retryMs;
    this.#log = opts.log;
  }

  /** Connect and bring the schema up to date; the first connection is retried within the bound. */
  static async open(opts: StoreOptions): Promise<FleetStore> {
    const sql = postgres(opts.url, {
      max: 8,
      onnotice: () => {},
      // A connection attempt gets no longer than a whole write may wait (1 s to 10 s).
      connect_timeout: Math.min(10, Math.max(1, opts.retryMs / 1000)),
      connection: { application_name: "uexec" },
      // postgres.js waits before reconnecting a pool connection, growing with the failures of
      // every connection up to 20 s: a store that came back would stay unused that long. Writes
      // are paced by `retry` here, so its pause stays short (at most 1 s).
      backoff: (retries: number) => Math.min(0.05 * 2 ** retries, 1),
    });
    const store = new FleetStore(sql, opts);
    try {
      await store.retry("migrate", () => migrate(sql));
    } catch (err) {
      await sql.end({ timeout: 1 });
      throw err;
    }
    return store;
  }

  /**
   * Run `write`, retrying while the store is away (with a growing pause between tries, up to
   * the bound); {@link StoreUnavailableError} once the bound is passed.
   */
  async retry<T>(what: string, write: () => Promise<T>): Promise<T> {
    const deadline = performance.now() + this.#retryMs;
    for (let pause = 50;; pause = Math.min(pause * 2, 1000)) {
      try {
        return await write();
      } catch (err) {
        if (!storeAway(err) || this.#closed) throw err;
        const left = deadline - performance.now();
        if (left <= 0) {
          throw new StoreUnavailableError(
            `the fleet's store is unreachable (${what}: ${(err as Error).message}); ` +
              `gave up after ${this.#retryMs} ms (UEXEC_STORE_RETRY_MS)`,
          );
        }
        // A back-off between reconnection attempts, not a settle-sleep: the store is away.
        await pauseFor(Math.min(pause, left), this.#closing.signal);
      }
    }
  }

  /**
   * Queue a write that nobody waits for (approval records), in order; retried within the bound,
   * then logged as lost and reported by {@link health}. Resolves once written or given up.
   */
  background(what: string, write: () => Promise<unknown>): Promise<void> {
    if (this.#queued >= BACKGROUND_LIMIT) {
      this.#gaveUp(what, new Error(`more than ${BACKGROUND_LIMIT} writes waiting for the store`));
      return Promise.resolve();
    }
    this.#queued++;
    this.#queue = this.#queue
      .then(() => this.retry(what, write))
      .then(() => {}, (err) => this.#gaveUp(what, err))
      .finally(() => this.#queued--);
    return this.#queue;
  }

  #gaveUp(what: string, err: unknown): void {
    const error = (err as Error)?.message ?? String(err);
    this.#lost = { what, at: new Date().toISOString(), error };
    this.#log.warn("store_write_lost", { what, error });
  }

  /** Call `listener` with each notification on `channel` (re-listened after a reconnect). */
  async listen(channel: string, listener: (payload: string) => void): Promise<void> {
    await this.retry(`listen ${channel}`, () => this.sql.listen(channel, listener));
  }

  /**
   * Call `reconnected` each time the store is reached again after the connection was lost (told
   * by the re-established `LISTEN` of a channel of its own: an event, not a poll).
   */
  async followReconnects(reconnected: () => void): Promise<void> {
    let first = true;
    await this.retry(
      "listen for reconnects",
      () =>
        this.sql.listen(RECONNECT_CHANNEL, () => {}, () => {
          if (first) first = false;
          else reconnected();
        }),
    );
  }

  /** For `/healthz`: whether the store answers, and the last write given up. */
  async health(): Promise<Record<string, unknown>> {
    let ok = true;
    let error: string | undefined;
    try {
      await this.sql`SELECT 1`;
    } catch (err) {
      ok = false;
      error = (err as Error).message;
    }
    return {
      kind: "postgres",
      ok: ok && this.#lost === undefined,
      ...(error ? { error } : {}),
      queued_writes: this.#queued,
      ...(this.#lost ? { last_lost_write: this.#lost } : {}),
    };
  }

  /** Write what is queued (within the bound) and disconnect. */
  async close(): Promise<void> {
    await this.#queue;
    this.#closed = true;
    this.#closing.abort();
    await this.sql.end({ timeout: 2 });
  }
}

/** Apply every migration newer than the store's version, in one transaction, under the lock. */
async function migrate(sql: Sql): Promise<void> {
  await sql.begin(async (tx) => {
    await tx`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK})`;
    await tx`CREATE TABLE IF NOT EXISTS uexec_schema (version integer PRIMARY KEY)`;
    const [{ version }] = await tx`SELECT coalesce(max(version), 0) AS version FROM uexec_schema`;
    for (let v = Number(version) + 1; v <= MIGRATIONS.length; v++) {
      await tx.unsafe(MIGRATIONS[v - 1]);
      await tx`INSERT INTO uexec_schema (version) VALUES (${v})`;
    }
  });
}

/** Resolves after `ms`, or at once when `signal` aborts. */
function pauseFor(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
  });
}
