/**
 * The git guard's loans: the protected directories a write grant holds (grants/write_grant.ts)
 * are left to the grant while it runs, each held open, and walked again (walk.ts) once no grant
 * holds it or anything in or around it. It must never walk a directory a grant still holds, nor
 * lose one given back: a walk that fails is reported to the guard, which retries it.
 *
 * @module
 */

import { openCanonical, statAt } from "../fs/entries.ts";
import { isWithin } from "../policy/profiles.ts";
import { closeFd } from "../syscalls.ts";
import { AT } from "../../ffi/libc.ts";
import type { Walker } from "./walk.ts";

/** The protected directories write grants hold, for one guard. */
export class Loans {
  /** Protected directories a write grant holds (path -> how many grants): left to them. */
  #lent = new Map<string, number>();
  /**
   * Lent directories given back (by `dev:ino`), each held open since it was lent, waiting to be
   * walked until no grant holds them.
   */
  #returned = new Map<string, { path: string; fd: number }>();
  #walker: Walker;
  /** Records a path that could not be opened or walked (the guard retries it, as "adopt"). */
  #failed: (path: string, why: string) => void;

  constructor(walker: Walker, failed: (path: string, why: string) => void) {
    this.#walker = walker;
    this.#failed = failed;
  }

  /** Whether `dir` lies in a directory a grant holds now. */
  holds(dir: string): boolean {
    return [...this.#lent.keys()].some((root) => isWithin(dir, root));
  }

  /** Closes the directories given back and not walked yet. */
  close(): void {
    for (const { fd } of this.#returned.values()) closeFd(fd);
    this.#returned.clear();
  }

  /**
   * Leaves the protected directories among `paths` (a write grant's) to the grant: what its
   * session does there is not judged as the operator's. Each is held open from now on. Call
   * the result once the grant is taken back: each is walked again, through that descriptor
   * (wherever it was renamed meanwhile), once no grant holds it or anything in or around it;
   * what the session moved in is stripped, and new directories are kept from then on. The
   * result never throws: a walk that fails is retried (by path) before the next spawn.
   */
  lend(paths: string[]): () => void {
    const held: { path: string; fd: number }[] = [];
    for (const path of paths) {
      this.#lent.set(path, (this.#lent.get(path) ?? 0) + 1);
      const fd = this.#tryOpen(path);
      if (fd !== null) held.push({ path, fd });
    }
    let returned = false;
    return () => {
      if (returned) return;
      returned = true;
      for (const path of paths) {
        const left = this.#lent.get(path)! - 1;
        if (left > 0) this.#lent.set(path, left);
        else this.#lent.delete(path);
      }
      for (const h of held) {
        const st = statAt(h.fd, "", AT.EMPTY_PATH);
        const key = st === null ? `fd:${h.fd}` : `${st.dev}:${st.ino}`;
        if (this.#returned.has(key)) closeFd(h.fd);
        else this.#returned.set(key, h);
      }
      const lent = [...this.#lent.keys()];
      for (const [key, { path, fd }] of this.#returned) {
        if (lent.some((other) => isWithin(other, path) || isWithin(path, other))) continue;
        this.#returned.delete(key);
        this.#reprotect(fd, path);
        closeFd(fd);
      }
    };
  }

  /** `path` opened without following symlinks; null when it cannot be (failure recorded). */
  #tryOpen(path: string): number | null {
    try {
      return openCanonical(path);
    } catch (e) {
      this.#failed(path, (e as Error).message);
      return null;
    }
  }

  /**
   * Walks the lent directory `fd` (once at `path`) again once the grant's uid entries are gone,
   * as a late walk: what the session moved in from the working tree still carries the sandbox
   * group's grant, and a file of it goes aside (its content may be forged, a root-owned script
   * included); what git made for the session carries none and stays.
   */
  #reprotect(fd: number, path: string): void {
    try {
      this.#walker.secureTree(fd, path, "adopt", true);
    } catch (e) {
      this.#failed(path, (e as Error).message);
    }
  }
}
