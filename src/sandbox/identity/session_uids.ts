/**
 * The session uids of a root server as the sandbox domains use them: the range, leased
 * (uid_lease.ts) so no other server uses it meanwhile, with its reaper (reaper.ts, handed in by
 * the composition root), and the pool (uids.ts) made on first use, once the uids a dead
 * server's grant still names are retired. Null throughout when the server is not root. It must
 * never hand out a retired uid, nor lease the range or make its reaper twice.
 *
 * @module
 */

import { type SandboxIds, sandboxIds } from "./identity.ts";
import type { Reaper, TakeBack } from "./reaper.ts";
import { claimPooledBlock, leaseUidRange, type UidLease } from "./uid_lease.ts";
import { type UidCursor, UidPool } from "./uids.ts";
import { loadCursor } from "./uid_cursor.ts";

/** The session uids of a root server, and the worker that reaps them. */
export interface Uids {
  ids: SandboxIds;
  pool: UidPool;
  reaper: Reaper;
  /** This server's hold on the range (no other server may use these uids meanwhile). */
  lease: UidLease;
}

/** The leased range and its reaper, before the pool is made. */
export type LeasedRange = Omit<Uids, "pool">;

/** Settings of {@link SessionUids}. */
export interface SessionUidOptions {
  /** Makes the reaper, once, when the range is leased. */
  reaper: () => Reaper;
  /** Where the range is handed out from across runs (default: uid_cursor.ts's host file). */
  uidCursor?: (first: number, last: number) => UidCursor;
  /** Where uids handed out before may have left files: the workspace, workdirs outside it. */
  roots: () => string[];
}

/** The session uids of a root server: leased, pooled and reaped on first use. */
export class SessionUids {
  /** Uids never to hand out: a dead server's grant on them could not be taken back. */
  readonly retired = new Set<number>();
  #opts: SessionUidOptions;
  /** The leased uid range and its reaper, before the pool is made. */
  #range?: LeasedRange | null;
  #uids?: Uids | null;

  constructor(opts: SessionUidOptions) {
    this.#opts = opts;
  }

  /** The session uids, set up on first use; null when the server is not root. */
  get(): Uids | null {
    if (this.#uids !== undefined) return this.#uids;
    const range = this.leased();
    if (!range) return this.#uids = null;
    const { ids, reaper } = range;
    // Made once the retired uids are known: it reaps its first batch at once.
    const pool = new UidPool(
      ids.first,
      ids.last,
      (batch, used) =>
        reaper.reap(batch, used.length > 0 ? this.#takeBack(used, ids.spawner) : undefined),
      undefined,
      this.retired,
      this.#opts.uidCursor?.(ids.first, ids.last) ?? loadCursor(ids.first, ids.last),
    );
    this.#uids = { ...range, pool };
    return this.#uids;
  }

  /** Where uids handed out before may have left files: the workspace, and workdirs outside it. */
  #takeBack(uids: number[], owner: number): TakeBack {
    return { uids, roots: this.#opts.roots(), owner };
  }

  /** The range of session uids, leased, with its reaper; null when the server is not root. */
  leased(): LeasedRange | null {
    if (this.#range !== undefined) return this.#range;
    const ids = sandboxIds();
    if (!ids) return this.#range = null;
    const lease = ids.pooled
      ? claimPooledBlock({ first: ids.spawner, last: ids.last, index: ids.pooled.index })
      : leaseUidRange(ids.spawner, ids.last);
    return this.#range = { ids, lease, reaper: this.#opts.reaper() };
  }

  /** Stops the reaper and gives the lease back (server shutdown). */
  close(): void {
    this.#range?.reaper.terminate();
    this.#range?.lease.release();
  }
}
