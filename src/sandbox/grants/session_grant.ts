/**
 * A session's write grant as the domains hold it: the approved directories beyond the workspace
 * granted to the session's uid on the grant thread (grant_thread.ts), recorded in the journal
 * (grant_journal.ts) first, their protected directories lent by the git guard meanwhile
 * (GitGuard.lend); released, it is taken back and its record removed. It must never drop the
 * record of a grant that was not taken back in full: the next start takes that back.
 *
 * @module
 */

import type { SandboxIds } from "../identity/identity.ts";
import { assertReachable } from "./workspace.ts";
import { type GrantedRoot, GrantError } from "./write_grant.ts";
import { type GrantSpec, GrantThread } from "./grant_thread.ts";
import type { GrantJournal } from "./grant_journal.ts";

/** A session's write grant while it is held. */
export interface HeldGrant {
  /** Takes it back (and its record); false when not all of it could be. */
  release(): Promise<boolean>;
}

/** Removes a grant's journal record (grant_journal.ts); a failure is logged, not thrown. */
function forgetRecord(forget: (() => void) | undefined): void {
  try {
    forget?.();
  } catch (err) {
    console.error(`uexec: cannot remove a write grant's record: ${err}`);
  }
}

/** What lends a grant's protected directories to it (the git guard, GitGuard.lend). */
export interface Lender {
  /** Leaves `paths` to the grant until the result is called. */
  lend(paths: string[]): () => void;
}

/** The write grants of one server's sessions. */
export class SessionGrants {
  /** Where write grants are made and taken back, off the server's thread. */
  #thread = new GrantThread();
  #journal?: GrantJournal;
  /** Names kept read-only at any depth (git_guard/protected.ts). */
  #protectedNames: ReadonlySet<string>;

  constructor(journal: GrantJournal | undefined, protectedNames: ReadonlySet<string>) {
    this.#journal = journal;
    this.#protectedNames = protectedNames;
  }

  /**
   * `roots` granted to a session's `uid` on the grant thread, recorded in the journal first;
   * the record stays until the grant is taken back in full. Its protected directories are lent
   * by `guard` meanwhile.
   */
  async hold(
    roots: GrantedRoot[],
    uid: number,
    ids: SandboxIds,
    guard?: Lender,
  ): Promise<HeldGrant> {
    for (const root of roots) assertReachable(root.path, ids);
    const forget = this.#journal?.add(uid, roots);
    const lent = roots.filter((root) => root.protected).map((root) => root.path);
    const reclaim = guard?.lend(lent);
    let grant: number;
    try {
      grant = await this.#thread.grant(roots, this.#spec(uid, ids));
    } catch (err) {
      if (!(err instanceof GrantError) || err.takenBack) forgetRecord(forget);
      reclaim?.();
      throw err;
    }
    return {
      release: async () => {
        const clean = await this.#thread.revoke(grant);
        if (clean) forgetRecord(forget);
        reclaim?.();
        return clean;
      },
    };
  }

  /** Takes back `roots` from `uid` (a dead server's grant); true when all of it was. */
  takeBack(roots: GrantedRoot[], uid: number, ids: SandboxIds): Promise<boolean> {
    return this.#thread.takeBack(roots, this.#spec(uid, ids));
  }

  /** Stops the grant thread once the take-backs under way finished. */
  close(): Promise<void> {
    return this.#thread.close();
  }

  #spec(uid: number, ids: SandboxIds): GrantSpec {
    return { uid, ids, protectedNames: [...this.#protectedNames] };
  }
}
