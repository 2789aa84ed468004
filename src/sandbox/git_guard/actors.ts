/**
 * Who made an entry the guard was told about, as far as this instance can tell: its sandbox
 * (an entry a session uid owns, or one a process running as one renamed or linked into place),
 * someone else, or nobody known any more (the renamer exited before the guard read the event);
 * inside this instance's writable roots the unknown counts as the sandbox's (fail-safe). See
 * git_guard.ts's module doc. It only reads: it must never change an entry.
 *
 * @module
 */

import { kind, type Stat, statAt } from "../fs/entries.ts";
import type { NewEntry } from "./fanotify.ts";
import type { SandboxOwners } from "../identity/identity.ts";
import { isWithin } from "../policy/profiles.ts";
import { AT, readSmallFile, S_IF } from "../../ffi/libc.ts";

/**
 * The file-system uid of the process `pid` (as `/proc` tells), or null when it is gone or
 * outside this pid namespace. A pid reused since the event is a limit: pids are not reused
 * before the counter wraps, far longer than the guard takes to read its queue.
 */
function fsUidOf(pid: number): number | null {
  if (pid <= 0) return null;
  // Through libc: Deno asks for --allow-all to read another process's /proc files.
  const status = readSmallFile(`/proc/${pid}/status`);
  const uids = status && /^Uid:\s+\d+\s+\d+\s+\d+\s+(\d+)$/m.exec(status);
  return uids ? Number(uids[1]) : null;
}

/** Who made an entry, as far as this instance can tell (see the module doc). */
export type Actor = "sandbox" | "other" | "unknown";

/** Tells who made entries, for one guard. */
export class Actors {
  /** The guarded roots (canonical). */
  readonly roots: string[] = [];
  /** Where this instance's sandbox can write besides the guarded roots (profiles, grants). */
  readonly writable = new Set<string>();
  #owners: SandboxOwners;

  constructor(owners: SandboxOwners) {
    this.#owners = owners;
  }

  /** Who made the entry `st`, `entry` (see git_guard.ts). */
  of(entry: NewEntry, st: Stat): Actor {
    if (this.#owners.isUid(st.uid)) return "sandbox";
    // A new inode is its maker's (the file system uid); a new link to an existing file is not.
    if (!entry.renamed && (kind(st) === S_IF.DIR || st.nlink === 1n)) return "other";
    const uid = fsUidOf(entry.pid);
    if (uid === null) return "unknown";
    return this.#owners.isUid(uid) ? "sandbox" : "other";
  }

  /** Whether this instance's sandbox can write beneath `path`. */
  writableHere(path: string): boolean {
    return [...this.roots, ...this.writable].some((root) => isWithin(path, root));
  }

  /**
   * Whether `entry` (with a protected name) may be this instance's sandbox's doing: then the
   * guard may move it aside or replace it; otherwise it only takes back its own grants.
   */
  mayAct(entry: NewEntry): boolean {
    const st = statAt(entry.dirFd, entry.name, AT.SYMLINK_NOFOLLOW);
    if (st === null) return false;
    const actor = this.of(entry, st);
    return actor === "sandbox" || (actor === "unknown" && this.writableHere(entry.dir));
  }
}
