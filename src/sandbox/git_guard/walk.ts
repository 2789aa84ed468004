/**
 * The git guard's walks: securing a protected entry and everything beneath it, top-down, for a
 * guard (git_guard.ts) that tells it where to start and is told, through {@link WalkHooks},
 * which directories were listed (what lands in them later is judged then) and which entries go
 * aside. A directory is stripped of the sandbox's ACL entries before it is listed; what a
 * sandbox uid made is given to the keeper, or removed. Like the guard, it must never widen
 * anyone's access, and it follows no symlink.
 *
 * @module
 */

import { chmodOf, chownOf, eachChild, kind, type Stat, statOf } from "../fs/entries.ts";
import type { SandboxOwners } from "../identity/identity.ts";
import { checkedSyscall, SYS } from "../syscalls.ts";
import { AT, cString, S_IF } from "../../ffi/libc.ts";
import { adopt, type Keeper, keeperOf, stripSandbox } from "./protected.ts";

/** What happens to entries a sandbox uid made inside a protected directory it did not make. */
export type Planted =
  /** Found when the workspace is prepared, when no sandboxed process runs: they may be
   * earlier work (e.g. commits in a nested repository); they are kept, owned by the
   * directory's owner, with no write for group and others and no execute bits on files. */
  | "adopt"
  /** Found in a directory that just appeared: made in the moment before the guard saw it, so
   * a sandboxed process may hold them open; they are taken over as above, then removed. */
  | "remove";

/** One securing of a protected entry and of everything beneath it. */
export interface Walk {
  /** The protected entry's path when the walk began. */
  path: string;
  /** Who gets what the sandbox made beneath it. */
  keeper: Keeper;
  planted: Planted;
  /** Entries a sandbox uid made. */
  taken: number;
  /**
   * Whether the sandbox could write anything in it through what the walk takes back: an ACL
   * entry, the sandbox group, its ownership.
   */
  granted: boolean;
  /** Whether anything in it was world-writable (left so: the operator's choice). */
  worldWritable: boolean;
  /**
   * Judging what was moved or made in a kept directory: files that carried a sandbox grant go
   * aside, and the directories it lists are kept at once.
   */
  late: boolean;
}

/** What a walk needs from the guard that runs it. */
export interface WalkHooks {
  /**
   * Notes that `walk` is about to list the directory `fd`: the guard judges what is renamed or
   * made in it afterwards (a late walk's directories are kept at once).
   */
  list(fd: number, walk: Walk): void;
  /** Renames an untrusted entry out of the way (`path` names it in the log). */
  moveAside(dirFd: number, name: string, path: string): void;
}

/** chown's "leave this id as it is". */
const KEEP_IDS = 0xffffffff;

/** Secures protected entries for one guard. */
export class Walker {
  /** Files with several links found inside protected directories: the grant skips them. */
  readonly links = new Set<string>();
  /** `.git` files the guard wrote (dev:ino): already trusted when renamed into place. */
  readonly renewed = new Set<string>();
  #owners: SandboxOwners;
  #hooks: WalkHooks;

  constructor(owners: SandboxOwners, hooks: WalkHooks) {
    this.#owners = owners;
    this.#hooks = hooks;
  }

  /**
   * Secures the protected entry `fd` (at `path`) and everything beneath it, unless the sandbox
   * made it or this guard wrote it (null then).
   */
  secureTree(
    fd: number,
    path: string,
    planted: Planted,
    late = false,
  ): { st: Stat; walk: Walk } | null {
    const st = statOf(fd);
    if (this.#owners.isUid(st.uid) || this.renewed.has(`${st.dev}:${st.ino}`)) return null;
    const keeper = keeperOf(st, this.#owners);
    const walk: Walk = {
      path,
      keeper,
      planted,
      taken: 0,
      granted: false,
      worldWritable: false,
      late,
    };
    this.#secure(fd, st, walk);
    this.report(path, walk);
    return { st, walk };
  }

  /** Logs what of the sandbox's a walk found beneath `path`. */
  report(path: string, walk: Walk): void {
    if (walk.taken === 0) return;
    console.error(
      `uexec: ${path}: ${walk.taken} entries made by the sandbox inside it were ` +
        (walk.planted === "remove"
          ? "removed"
          : `given to uid ${walk.keeper.uid}, without execute bits`),
    );
  }

  /**
   * Removes every sandbox grant from the entry `fd` and, top-down, from everything beneath it:
   * a directory is stripped before it is listed, so nothing made in it afterwards inherits a
   * grant and nothing made before is missed (what is renamed into it after the listing is
   * reported by the kernel, see GitGuard.settle). Sandbox-made entries are taken back.
   */
  #secure(fd: number, st: Stat, walk: Walk): void {
    if (!this.secureEntry(fd, st, walk)) return;
    this.#hooks.list(fd, walk);
    eachChild(fd, (child, cfd, cst) => this.secureChild(fd, child, cfd, cst, walk));
  }

  /** Removes every sandbox grant from the entry `fd` alone; true when it is a directory. */
  secureEntry(fd: number, st: Stat, walk: Walk): boolean {
    if (kind(st) === S_IF.LNK) return false;
    if (st.mode & 0o002) walk.worldWritable = true;
    if (this.#owners.isGid(st.gid)) {
      walk.granted = true;
      chownOf(fd, KEEP_IDS, walk.keeper.gid);
    }
    if (stripSandbox(fd, "access", this.#owners)) walk.granted = true;
    if (kind(st) === S_IF.REG && st.nlink > 1n) this.links.add(`${st.dev}:${st.ino}`);
    if (kind(st) !== S_IF.DIR) return false;
    stripSandbox(fd, "default", this.#owners);
    return true;
  }

  /**
   * Secures the entry `name` of a directory the sandbox did not make (`dirFd`); in a late walk,
   * a file that carried a sandbox grant is then moved aside.
   */
  secureChild(dirFd: number, name: string, fd: number, st: Stat, walk: Walk): void {
    const granted = walk.granted;
    walk.granted = false;
    if (this.#owners.isUid(st.uid)) this.#takeBack(dirFd, name, fd, st, walk);
    else this.#secure(fd, st, walk);
    if (walk.late && walk.granted && kind(st) !== S_IF.DIR) {
      // Nothing of it runs even under its new name.
      if (kind(st) === S_IF.REG) chmodOf(fd, statOf(fd).mode & 0o7666);
      this.#hooks.moveAside(dirFd, name, `${walk.path} (${name} in it)`);
    }
    walk.granted ||= granted;
  }

  /**
   * Gives a sandbox-made entry to the walk's keeper, without write for group and others and
   * without execute bits on files, and everything beneath it likewise; with `remove`, then
   * deletes it (what others made beneath it is only stripped first, so it cannot grow while it
   * goes; a directory that grew meanwhile fails to go, and the walk is retried).
   */
  #takeBack(dirFd: number, name: string, fd: number, st: Stat, walk: Walk): void {
    const own = this.#owners.isUid(st.uid);
    if (own) {
      walk.taken++;
      walk.granted = true;
      adopt(fd, st, walk.keeper);
    }
    const remove = walk.planted === "remove";
    if (kind(st) === S_IF.DIR) {
      if (stripSandbox(fd, "access", this.#owners)) walk.granted = true;
      stripSandbox(fd, "default", this.#owners);
      if (!remove) this.#hooks.list(fd, walk);
      eachChild(
        fd,
        (child, cfd, cst) =>
          remove
            ? this.#takeBack(fd, child, cfd, cst, walk)
            : this.secureChild(fd, child, cfd, cst, walk),
      );
    } else if (own && kind(st) !== S_IF.LNK) {
      stripSandbox(fd, "access", this.#owners);
    }
    if (remove) {
      const flags = kind(st) === S_IF.DIR ? AT.REMOVEDIR : 0;
      checkedSyscall(`unlink(${name})`, SYS.unlinkat, dirFd, cString(name), flags);
    }
  }
}
