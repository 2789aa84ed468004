/**
 * Keeps `.git` and `.uexec` directories out of the sandbox's reach wherever they are in the
 * workspace and whenever they appeared, unless the sandbox made them itself.
 *
 * The workspace grant (a POSIX ACL entry with a default ACL, grants/workspace.ts) would reach
 * into every repository: nested ones, and ones the operator creates later, which inherit the
 * default ACL.
 * So the guard (1) keeps the grant from entering a protected directory when the workspace is
 * prepared, and strips sandbox entries already there; (2) watches the workspace's file systems
 * (fanotify) and strips a protected directory the moment it is created or renamed into place,
 * anywhere on them (moving it out of the workspace first must not help), removing anything a
 * sandboxed process managed to make inside it meanwhile, and then whatever is renamed into a
 * directory of it that the walk had already listed; (3) keeps watching every directory its
 * walks listed: what is moved or made in one later (the operator moves a file the sandbox could
 * write into `.git/hooks`, or copies one with its ACL) is stripped, and each file in it that
 * carried a sandbox grant is moved aside, since the sandbox may have written it or hold it open
 * (a directory too, when it was moved in or the sandbox made it); what is given to the sandbox
 * in place (chgrp, setfacl) is stripped; a write grant's protected directories are left to the
 * grant while it runs and walked again, by descriptor, once no grant holds them;
 * (4) moves aside what cannot be trusted: a directory the sandbox could write before it was
 * renamed to `.git` (its files may be forged even if root owns them), and a `.git` file or
 * symlink that does not lead into a protected directory; (5) refuses workdirs inside protected
 * directories; (6) takes a repository's shape away from what a sandbox uid made it in: a
 * directory the sandbox does not own that gains `HEAD` with `objects/` and `refs/` (or with
 * `commondir`) from this instance's sandbox, at any depth, has that `HEAD` (or the sandbox's
 * parts) moved aside, since git run as the operator there would take it for a bare repository
 * whose configuration (`core.fsmonitor`, hooks) it trusts; a repository the operator makes in
 * the workspace (`git init --bare`) is kept read-only like a `.git`; (7) renames back a protected
 * directory this instance's sandbox renamed (the repository must not vanish for its owner).
 * What a sandbox uid owns is the sandbox's own and is left alone: git refuses to run as root in
 * a repository another user owns.
 *
 * The guard watches whole file systems, where other users, the operator and other instances
 * work too, so it acts only on what this instance's sandbox did: an entry a uid of this
 * instance made, or one renamed (or linked) into place by a process running as one. When the
 * process that renamed an entry has exited before the guard read the event, it cannot be told
 * apart: inside this instance's writable roots (its workspace, profiles' writable roots, granted
 * directories) the guard takes it for the sandbox's (fail-safe), anywhere else for someone
 * else's. What is someone else's is at most stripped of this instance's own grants; it is never
 * renamed, replaced, removed or given away, unless it was renamed into place carrying such a
 * grant (this instance's sandbox could write it until then). Every entry moved aside is logged
 * with both paths and the command that restores it.
 *
 * Every change happens through descriptors opened without following symlinks, so a sandboxed
 * process swapping entries cannot redirect it. This module must never widen anyone's access:
 * it removes sandbox entries, gives what the sandbox made to the directory's owner, and renames
 * (or replaces with a same-content copy) only `.git` entries it cannot trust.
 *
 * Flow at a glance (the `git_guard/` folder):
 * - `git_guard.ts` (this file): {@link GitGuard}, started by domains.ts with the first workdir
 *   in the workspace; its `claims` hook keeps the workspace grant (grants/workspace.ts) out of
 *   protected directories, and `settle()` (before every spawn, and when the reactor wakes it)
 *   drains the kernel's queue (`fanotify.ts`) and judges each new entry.
 * - `actors.ts` tells who made an entry; `walk.ts` secures a protected entry and everything
 *   beneath it; `protected.ts` holds the stateless steps (strip, adopt, move aside, renew a
 *   `.git` file) that write_grant.ts uses too; `loans.ts` leaves a write grant's protected
 *   directories to it and walks them again after.
 *
 * @module
 */

import { inode, kind, openEntry, statAt, statOf } from "../fs/entries.ts";
import { refuse, SandboxUnavailableError } from "../errors.ts";
import { EntryWatch, type NewEntry, pathOf } from "./fanotify.ts";
import type { SandboxOwners } from "../identity/identity.ts";
import { isWithin } from "../policy/profiles.ts";
import { closeFd, SYS } from "../syscalls.ts";
import {
  AT,
  AT_FDCWD,
  cString,
  errno,
  loggable,
  OsError,
  rawSyscall,
  readSmallFile,
  S_IF,
} from "../../ffi/libc.ts";
import { EPOLLIN, type Reactor, type Registration } from "../../io/reactor.ts";
import {
  adopt,
  isRepository,
  leadsIntoProtected,
  moveAside,
  protectedAncestor,
  RENAME_NOREPLACE,
  renewGitFile,
  SHAPE,
  shapeOf,
} from "./protected.ts";
import { type Planted, type Walk, Walker } from "./walk.ts";
import { Loans } from "./loans.ts";
import { Actors } from "./actors.ts";

/**
 * Kept directories are checked for ones deleted since (repositories removed) once there are this
 * many, and again each time their number doubles: a check per directory, paid for by the growth.
 */
const PRUNE_AT_LEAST = 10_000;

/** A protected directory's place: its parent ({@link EntryWatch.dirKey}) and name. */
interface Home {
  parent: string;
  name: string;
}

/** Settings of {@link GitGuard}. */
export interface GuardOptions {
  names: ReadonlySet<string>;
  owners: SandboxOwners;
  /** Wakes the guard when the kernel queued new entries. */
  reactor: Reactor;
}

/** Watches workspaces and keeps their protected directories read-only for the sandbox. */
export class GitGuard {
  #names: ReadonlySet<string>;
  #owners: SandboxOwners;
  #watch: EntryWatch;
  #registration: Registration;
  #reactor: Reactor;
  #devices = new Set<number>();
  /** Tells who made an entry. */
  #actors: Actors;
  /** Secures protected entries (it keeps the hard links and renewed `.git` files found). */
  #walker: Walker;
  /** The protected directories write grants hold. */
  #loans: Loans;
  /**
   * Protected paths that could not be secured yet: why, what to do with planted entries, and
   * whether the entry may be moved aside (see {@link #protect}; yes unless said).
   */
  #failed = new Map<string, { why: string; planted: Planted; acting?: boolean }>();
  /** Why the last look through every root (after lost events) failed; it is tried again. */
  #sweepFailed?: string;
  /** Protected directories secured where they are (by `dev:ino`): put back when moved. */
  #homes = new Map<string, Home>();
  /** Repositories without a protected name kept read-only (bare ones), by `dev:ino`. */
  #repositories = new Set<string>();
  /** The names reported anywhere: the protected ones and a repository's shape's. */
  #reported: ReadonlySet<string>;
  /**
   * Directories walks listed since the last {@link settle} (by {@link EntryWatch.dirKey}), with
   * their walk. An entry that inherited a sandbox grant before its directory was stripped can be
   * renamed, by whoever is still writing there (the operator's `git init`), from a place not yet
   * walked to one already listed; the kernel reports that rename as an entry of the listed
   * directory, and it is secured then.
   */
  #listed = new Map<string, Walk>();
  /**
   * Every directory a walk listed before the last {@link settle} ended (by key), with its walk:
   * what appears or changes in one later is judged by {@link #onLateEntry}.
   */
  #kept = new Map<string, Walk>();
  /** How many kept directories there may be before those gone are forgotten. */
  #pruneAt = PRUNE_AT_LEAST;
  /** How many directories walks have listed, ever. */
  #listings = 0;

  /** Throws {@link SandboxUnavailableError} when new entries cannot be watched. */
  constructor(opts: GuardOptions) {
    this.#names = opts.names;
    this.#reported = new Set([...opts.names, ...SHAPE]);
    this.#owners = opts.owners;
    this.#reactor = opts.reactor;
    this.#actors = new Actors(opts.owners);
    this.#walker = new Walker(opts.owners, {
      list: (fd, walk) => this.#list(fd, walk),
      moveAside: (dirFd, name, path) => this.#moveAside(dirFd, name, path),
    });
    this.#loans = new Loans(this.#walker, (path, why) => {
      this.#failed.set(path, { why, planted: "adopt" });
    });
    try {
      this.#watch = new EntryWatch();
    } catch (e) {
      throw new SandboxUnavailableError(
        `cannot watch the workspace for new .git directories (fanotify): ${(e as Error).message}`,
      );
    }
    this.#registration = opts.reactor.add(this.#watch.fd, EPOLLIN, {
      readable: () => {
        try {
          this.settle();
        } catch (e) {
          console.error("uexec: protecting new directories failed:", loggable(e));
        }
      },
    });
  }

  /** Starts guarding `root` (canonical): its file system is watched from now on. */
  guard(root: string): void {
    this.#watchDir(root, Deno.lstatSync(root));
    if (!this.#actors.roots.includes(root)) this.#actors.roots.push(root);
  }

  /**
   * Notes that this instance's sandbox can write beneath `paths` (canonical): a profile's
   * writable roots, granted directories. See the module doc on telling who did what.
   */
  writable(paths: Iterable<string>): void {
    for (const path of paths) this.#actors.writable.add(path);
  }

  /**
   * The hook for the workspace grant, called with each path before it is granted: true when the
   * grant must leave `path` alone. A protected directory (or `.git` file), and a directory with
   * a repository's shape the sandbox did not make, is secured on the spot; so are file systems
   * mounted inside the workspace, which get watched too.
   */
  readonly claims = (path: string, info: Deno.FileInfo): boolean => {
    if (info.isDirectory) this.#watchDir(path, info);
    const slash = path.lastIndexOf("/");
    const name = path.slice(slash + 1);
    const bare = !this.#names.has(name) && info.isDirectory && isRepository(path);
    if (this.#names.has(name) || bare) {
      if (this.#owners.isUid(info.uid ?? 0)) return false;
      if (bare) this.#repositories.add(`${info.dev}:${info.ino}`);
      this.#protectPath(path.slice(0, slash) || "/", name, "adopt");
      return true;
    }
    return info.isFile && (info.nlink ?? 1) > 1 &&
      this.#walker.links.has(`${info.dev}:${info.ino}`);
  };

  /**
   * Secures every protected directory that appeared since the last call (the kernel queued it
   * when it was made). Call before spawning. Throws {@link SandboxUnavailableError} while a
   * protected directory cannot be secured, or the look through every root that lost events ask
   * for fails ({@link OutOfResourcesError} while that is for want of a descriptor).
   */
  settle(): void {
    let listings = this.#listings;
    this.#drain();
    for (const [path, { planted, acting = true }] of this.#failed) {
      const slash = path.lastIndexOf("/");
      this.#protectPath(path.slice(0, slash), path.slice(slash + 1), planted, acting);
    }
    // Again until a drain lists no directory: each sees what was renamed into those listed
    // before it began.
    while (listings !== this.#listings) {
      listings = this.#listings;
      this.#drain();
    }
    for (const [key, walk] of this.#listed) this.#kept.set(key, walk);
    this.#listed.clear();
    if (this.#kept.size >= this.#pruneAt) {
      for (const key of this.#kept.keys()) if (this.#watch.isGone(key)) this.#kept.delete(key);
      this.#pruneAt = Math.max(PRUNE_AT_LEAST, 2 * this.#kept.size);
    }
    const [first] = this.#failed;
    if (first) refuse(`cannot make ${first[0]} read-only for the sandbox`, first[1].why);
    if (this.#sweepFailed !== undefined) {
      refuse("cannot look through the workspaces for new protected directories", this.#sweepFailed);
    }
  }

  /** The paths among `paths` that exist and are not the sandbox's own. */
  protectedAmong(paths: string[]): string[] {
    return paths.filter((path) => {
      const st = statAt(AT_FDCWD, path, AT.SYMLINK_NOFOLLOW);
      return st !== null && !this.#owners.isUid(st.uid);
    });
  }

  /** Stops watching. */
  close(): void {
    this.#reactor.remove(this.#registration);
    this.#watch.close();
    this.#loans.close();
  }

  #watchDir(path: string, info: Deno.FileInfo): void {
    if (info.dev === null || this.#devices.has(info.dev)) return;
    try {
      this.#watch.watch(path);
    } catch (e) {
      throw new SandboxUnavailableError(
        `cannot watch ${path} for new .git directories (fanotify): ${(e as Error).message}`,
      );
    }
    this.#devices.add(info.dev);
  }

  #drain(): void {
    const [listed, kept] = [this.#listed, this.#kept];
    const dirs = {
      has: (key: string) => listed.has(key) || kept.has(key),
      get size() {
        return listed.size + kept.size;
      },
    };
    const wanted = { names: this.#reported, dirs, movedDirs: this.#homes.size > 0 };
    const { overflowed } = this.#watch.drain(wanted, (entry) => this.#onEntry(entry));
    if (!overflowed && this.#sweepFailed === undefined) return;
    // Events were lost (an entry that could not be resolved, as with no descriptor free): look
    // at everything, and again at each settle until that succeeds.
    try {
      for (const root of this.#actors.roots) this.#sweep(root);
      this.#sweepFailed = undefined;
    } catch (e) {
      this.#sweepFailed = (e as Error).message;
    }
  }

  #onEntry(entry: NewEntry): void {
    if (entry.dirKey !== undefined && !this.#names.has(entry.name)) {
      const walk = this.#listed.get(entry.dirKey);
      if (walk) return this.#onListedEntry(entry, walk);
      const kept = this.#kept.get(entry.dirKey);
      if (kept) return this.#onLateEntry(entry, kept);
    }
    if (SHAPE.has(entry.name)) return this.#onShapePart(entry);
    if (entry.renamed && this.#putBack(entry)) return;
    if (!this.#names.has(entry.name)) return;
    const path = `${entry.dir}/${entry.name}`;
    const acting = this.#actors.mayAct(entry);
    try {
      this.#protect(entry.dirFd, entry.name, "remove", path, entry.renamed, acting);
      this.#failed.delete(path);
    } catch (e) {
      this.#failed.set(path, { why: (e as Error).message, planted: "remove", acting });
    }
  }

  /**
   * Judges the directory of `entry`, which gained a part of a repository's shape: see the
   * module doc, (6). A plant that cannot be moved aside is logged (the next event retries).
   */
  #onShapePart(entry: NewEntry): void {
    // Inside a protected directory the walks judge it (a write grant's git writes HEAD there).
    if (protectedAncestor(entry.dir, this.#names, null) !== null) return;
    try {
      const dir = statOf(entry.dirFd);
      // git refuses, as root, a repository whose directory another user owns.
      if (this.#owners.isUid(dir.uid)) return;
      const parts = shapeOf(entry.dirFd);
      if (parts === null) return;
      const planted = [...parts].filter(([, st]) => this.#owners.isUid(st.uid)).map(([p]) => p);
      const st = parts.get(entry.name);
      // Parts the sandbox did not make may still be its doing: root's files and directories
      // it could write, renamed into place (fail-safe when the renamer is gone: see above).
      if (planted.length === 0 && st && this.#actors.writableHere(entry.dir)) {
        if (this.#actors.of(entry, st) === "other") return this.#onRepository(entry.dir);
        planted.push(entry.name);
      }
      // Without its HEAD (or the parts the sandbox made), git does not see a repository there.
      for (const part of planted.includes("HEAD") ? ["HEAD"] : planted) {
        this.#moveAside(entry.dirFd, part, `${entry.dir}/${part}`);
      }
    } catch (e) {
      console.error(
        `uexec: ${entry.dir} has a repository's shape the sandbox made, and it stays: ` +
          (e as Error).message,
      );
    }
  }

  /**
   * Keeps `dir`, a repository that someone else (the operator's `git init --bare`) made inside
   * a guarded root, read-only for the sandbox, as a `.git` is.
   */
  #onRepository(dir: string): void {
    const slash = dir.lastIndexOf("/");
    if (!this.#actors.roots.some((root) => isWithin(dir, root) && dir !== root)) return;
    const st = statAt(AT_FDCWD, dir, AT.SYMLINK_NOFOLLOW);
    if (st) this.#repositories.add(`${st.dev}:${st.ino}`);
    this.#protectPath(dir.slice(0, slash), dir.slice(slash + 1), "remove", false);
  }

  /**
   * Whether `path` (canonical) is, or lies in, a repository without a protected name that the
   * guard keeps read-only (a bare one): a write grant there is a protected one (see
   * {@link lend}).
   */
  inRepository(path: string): boolean {
    if (this.#repositories.size === 0) return false;
    const parts = path.split("/");
    for (let i = parts.length; i > 1; i--) {
      const st = statAt(AT_FDCWD, parts.slice(0, i).join("/"), AT.SYMLINK_NOFOLLOW);
      if (st && this.#repositories.has(`${st.dev}:${st.ino}`)) return true;
    }
    return false;
  }

  /**
   * Puts a protected directory back where it was when this instance's sandbox renamed it (the
   * repository must not vanish for its owner); true when `entry` was one and was put back. One
   * that someone else renamed is known by its new place from then on (while it keeps a
   * protected name). Something of the sandbox's own in its place goes aside first.
   */
  #putBack(entry: NewEntry): boolean {
    const st = statAt(entry.dirFd, entry.name, AT.SYMLINK_NOFOLLOW);
    const key = st && `${st.dev}:${st.ino}`;
    const home = key === null ? undefined : this.#homes.get(key);
    if (!st || !key || !home) return false;
    const here: Home = { parent: this.#watch.dirKey(entry.dirFd), name: entry.name };
    if (here.parent === home.parent && here.name === home.name) return false;
    const parent = this.#watch.open(home.parent);
    const was = `${(parent !== null && pathOf(parent)) || "(a directory now gone)"}/${home.name}`;
    try {
      const actor = this.#actors.of(entry, st);
      if (actor === "other" || (actor === "unknown" && !this.#actors.writableHere(was))) {
        if (this.#names.has(entry.name)) this.#homes.set(key, here);
        else this.#homes.delete(key);
        return false;
      }
      const now = `${entry.dir}/${entry.name}`;
      if (parent !== null) {
        const there = statAt(parent, home.name, AT.SYMLINK_NOFOLLOW);
        if (there && this.#owners.isUid(there.uid)) this.#moveAside(parent, home.name, was);
        const moved = rawSyscall(
          SYS.renameat2,
          entry.dirFd,
          cString(entry.name),
          parent,
          cString(home.name),
          RENAME_NOREPLACE,
        );
        if (moved >= 0) {
          console.error(`uexec: ${was} was renamed to ${now} by a sandboxed command; put back`);
          return true;
        }
      }
      const why = parent === null ? "" : `: ${new OsError("rename", errno()).message}`;
      console.error(
        `uexec: ${was} was renamed to ${now} by a sandboxed command and cannot be put back${why}`,
      );
      return true;
    } finally {
      if (parent !== null) closeFd(parent);
    }
  }

  /** Secures `entry`, which appeared in a directory after `walk` listed it, as `walk` would. */
  #onListedEntry(entry: NewEntry, walk: Walk): void {
    const fd = openEntry(entry.dirFd, entry.name);
    if (fd === null) return;
    const late: Walk = { ...walk, taken: 0 };
    try {
      this.#walker.secureChild(entry.dirFd, entry.name, fd, statOf(fd), late);
      this.#walker.report(`${entry.dir}/${entry.name}`, late);
    } catch (e) {
      this.#failed.set(walk.path, { why: (e as Error).message, planted: walk.planted });
    } finally {
      closeFd(fd);
    }
  }

  /**
   * Judges `entry`, which appeared or changed in a directory of `walk` after the walk's settle
   * ended (so the operator, or a grant, did it): see the module doc, (3). What a write grant's
   * session does in its protected directories is left to the grant (see {@link lend}).
   */
  #onLateEntry(entry: NewEntry, walk: Walk): void {
    if (this.#loans.holds(entry.dir)) return;
    const fd = openEntry(entry.dirFd, entry.name);
    if (fd === null) return;
    const path = `${entry.dir}/${entry.name}`;
    const late: Walk = {
      ...walk,
      path,
      planted: "adopt",
      taken: 0,
      granted: false,
      late: !entry.changed,
    };
    try {
      const st = statOf(fd);
      const made = this.#owners.isUid(st.uid);
      if (entry.name === ".") {
        if (made) adopt(fd, st, late.keeper);
        this.#walker.secureEntry(fd, statOf(fd), late);
      } else {
        this.#walker.secureChild(entry.dirFd, entry.name, fd, st, late);
        if (late.late && late.granted && kind(st) === S_IF.DIR && (entry.renamed || made)) {
          this.#moveAside(entry.dirFd, entry.name, path);
        }
      }
      this.#walker.report(path, late);
    } catch (e) {
      // Retried as a walk of the whole protected directory: stripped, nothing removed.
      this.#failed.set(walk.path, { why: (e as Error).message, planted: "adopt" });
    } finally {
      closeFd(fd);
    }
  }

  /**
   * Leaves the protected directories among `paths` (a write grant's) to the grant until the
   * result is called, then walks them again: see {@link Loans.lend}.
   */
  lend(paths: string[]): () => void {
    return this.#loans.lend(paths);
  }

  /** Looks at everything under `dir` again (after the kernel dropped events). */
  #sweep(dir: string): void {
    for (const entry of Deno.readDirSync(dir)) {
      if (this.#names.has(entry.name)) this.#protectPath(dir, entry.name, "remove");
      else if (entry.isDirectory) this.#sweep(`${dir}/${entry.name}`);
    }
  }

  #protectPath(dir: string, name: string, planted: Planted, acting = true): void {
    const path = `${dir}/${name}`;
    let dirFd: number | null = null;
    try {
      dirFd = openEntry(AT_FDCWD, dir);
      if (dirFd === null) return void this.#failed.delete(path);
      this.#protect(dirFd, name, planted, path, false, acting);
      this.#failed.delete(path);
    } catch (e) {
      this.#failed.set(path, { why: (e as Error).message, planted, acting });
    } finally {
      if (dirFd !== null) closeFd(dirFd);
    }
  }

  /**
   * Secures the protected entry `name` of the directory `dirFd`, unless the sandbox made it. A
   * directory is remembered where it is (see {@link #putBack}). Unless `acting` (the entry may
   * be this instance's sandbox's doing) or it was renamed into place carrying this instance's
   * grant, nothing more is done to it than that.
   */
  #protect(
    dirFd: number,
    name: string,
    planted: Planted,
    path: string,
    renamed = false,
    acting = true,
  ): void {
    const fd = openEntry(dirFd, name);
    if (fd === null) return;
    try {
      const secured = this.#walker.secureTree(fd, path, planted);
      if (secured === null) return;
      const { st, walk } = secured;
      if (kind(st) === S_IF.DIR) {
        this.#homes.set(`${st.dev}:${st.ino}`, { parent: this.#watch.dirKey(dirFd), name });
      }
      if (planted === "adopt") return;
      // Whoever renamed it into place, this instance's sandbox could write it until then: what
      // it holds may be the sandbox's.
      if (!acting && !(renamed && walk.granted)) return;
      const keeper = walk.keeper;
      if (kind(st) === S_IF.DIR) {
        if (renamed && (walk.granted || walk.worldWritable)) this.#moveAside(dirFd, name, path);
        return;
      }
      // A file or link the sandbox may hold open or have aimed: trusted only when it leads into
      // a protected directory, and then replaced by a fresh copy no descriptor refers to. An
      // empty file is being written (git writes it right after creating it): its writes are
      // watched from before it is read, and each one brings it back here.
      let content = "";
      if (kind(st) === S_IF.REG) {
        this.#watch.watchWrites(fd);
        content = readSmallFile(inode(fd)) ?? "";
        if (content === "") return;
      }
      if (kind(st) === S_IF.REG && leadsIntoProtected(content, path, this.#names, this.#owners)) {
        const renewed = renewGitFile(dirFd, name, st, keeper, content, path, this.#owners);
        this.#walker.renewed.add(renewed.key);
        if (!renewed.inPlace) this.#moveAside(dirFd, name, path);
      } else {
        this.#moveAside(dirFd, name, path);
      }
    } finally {
      closeFd(fd);
    }
  }

  /**
   * Renames an untrusted `name` out of the way, so git will not use it; logs where it went and
   * how to put it back (`path` names it in the log when the directory's path is unknown).
   */
  #moveAside(dirFd: number, name: string, path: string): void {
    const st = statAt(dirFd, name, AT.SYMLINK_NOFOLLOW);
    if (st) this.#homes.delete(`${st.dev}:${st.ino}`);
    moveAside(dirFd, name, path);
  }

  /**
   * Notes that `walk` is about to list the directory `fd`, see {@link #listed}; a late walk's
   * directories are kept at once (what lands in them is judged as late too).
   */
  #list(fd: number, walk: Walk): void {
    (walk.late ? this.#kept : this.#listed).set(this.#watch.dirKey(fd), walk);
    this.#listings++;
  }
}
