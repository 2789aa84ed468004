/**
 * The dashboard's sign-in in the fleet's store (`uexec_sign_in_codes`, `uexec_web_sessions`): a
 * sign-in link minted on one node is redeemed on whichever node the router picks, and a browser
 * session opened on one node is honoured on every node, its sign-out (or the operator's "sign out
 * everywhere") told to every node by `NOTIFY`. Codes and session ids are kept as SHA-256 digests
 * only, with expiries taken from the store's clock; a code is taken by one `DELETE ... RETURNING`,
 * so it works once across the fleet.
 *
 * It must never store, log or send a code or session id in clear.
 *
 * @module
 */

import type { SharedSignIn } from "../service/dashboard_sign_in.ts";
import type { FleetStore } from "./store.ts";

/** Where sign-outs are told: a session id's digest, or `*` for every session. */
const CHANNEL = "uexec_web_sessions";

/** At most this many codes are outstanding in the fleet; minting one more drops the oldest. */
const MAX_CODES = 16;

/** The fleet's codes and browser sessions. */
export class FleetSignIn implements SharedSignIn {
  readonly #store: FleetStore;

  constructor(store: FleetStore) {
    this.#store = store;
  }

  async addCode(digest: string, ttlMs: number): Promise<void> {
    await this.#store.retry("keep a sign-in code", () =>
      this.#store.sql.begin(async (tx) => {
        await tx`DELETE FROM uexec_sign_in_codes WHERE expires_at <= now()`;
        await tx`INSERT INTO uexec_sign_in_codes (digest, expires_at)
          VALUES (${digest}, now() + ${ttlMs} * interval '1 millisecond')`;
        await tx`DELETE FROM uexec_sign_in_codes WHERE digest NOT IN
          (SELECT digest FROM uexec_sign_in_codes ORDER BY expires_at DESC LIMIT ${MAX_CODES})`;
      }));
  }

  async takeCode(digest: string): Promise<boolean> {
    const taken = await this.#store.retry(
      "redeem a sign-in code",
      () =>
        this.#store.sql`DELETE FROM uexec_sign_in_codes
          WHERE digest = ${digest} AND expires_at > now() RETURNING 1`,
    );
    return taken.length === 1;
  }

  async addSession(digest: string, ttlMs: number): Promise<void> {
    await this.#store.retry("keep a dashboard session", () =>
      this.#store.sql.begin(async (tx) => {
        await tx`DELETE FROM uexec_web_sessions WHERE expires_at <= now()`;
        await tx`INSERT INTO uexec_web_sessions (digest, expires_at)
          VALUES (${digest}, now() + ${ttlMs} * interval '1 millisecond')`;
      }));
  }

  async sessionLeftMs(digest: string): Promise<number | undefined> {
    const [found] = await this.#store.retry(
      "read a dashboard session",
      () =>
        this.#store.sql`SELECT (extract(epoch FROM expires_at - now()) * 1000)::float8 AS left_ms
          FROM uexec_web_sessions WHERE digest = ${digest} AND expires_at > now()`,
    );
    return found ? Number(found.left_ms) : undefined;
  }

  async liveSessions(digests: string[]): Promise<Set<string>> {
    if (digests.length === 0) return new Set();
    const rows = await this.#store.retry(
      "read dashboard sessions",
      () =>
        this.#store.sql`SELECT digest FROM uexec_web_sessions
          WHERE digest IN ${this.#store.sql(digests)} AND expires_at > now()`,
    );
    return new Set(rows.map((r) => r.digest as string));
  }

  async endSessions(digest?: string): Promise<number> {
    return await this.#store.retry(
      "end dashboard sessions",
      () =>
        this.#store.sql.begin(async (tx) => {
          const gone = digest === undefined
            ? await tx`DELETE FROM uexec_web_sessions RETURNING expires_at > now() AS live`
            : await tx`DELETE FROM uexec_web_sessions WHERE digest = ${digest}
              RETURNING expires_at > now() AS live`;
          // Sent at commit: every node (this one too) ends its copy.
          await tx`SELECT pg_notify(${CHANNEL}, ${digest ?? "*"})`;
          return gone.filter((row) => row.live).length;
        }),
    );
  }

  /** Call `ended` with each session's digest ended on any node (undefined: every session). */
  async follow(ended: (digest: string | undefined) => void): Promise<void> {
    await this.#store.listen(CHANNEL, (payload) => ended(payload === "*" ? undefined : payload));
  }
}
