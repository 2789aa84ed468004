/**
 * Keeps `.git` and `.uexec` directories out of the sandbox's reach wherever they are in the
 * workspace and whenever they appeared, unless the sandbox made them itself.
 *
 * The workspace grant (a POSIX ACL entry with a default ACL, identity.ts) would reach into every
 * repository: nested ones, and ones the operator creates later, which inherit the default ACL.
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
 * @module
 */

import { type AclEntry, type AclKind, TAG } from "./acl.ts";
import {
  chmodOf,
  chownOf,
  eachChild,
  inode,
  kind,
  openCanonical,
  openEntry,
  readAclOf,
  type Stat,
  statAt,
  statOf,
  writeAclOf,
} from "./entries.ts";
import { ApiError } from "../errors.ts";
import { SandboxUnavailableError } from "./errors.ts";
import { EntryWatch, type NewEntry, pathOf } from "./fanotify.ts";
import type { SandboxOwners } from "./identity.ts";
import { realPathOrSelf } from "./fsinfo.ts";
import { isWithin, normalizeAbsolutePath } from "./profiles.ts";
import { checkedSyscall, closeFd, SYS } from "./syscalls.ts";
import {
  AT,
  AT_FDCWD,
  cString,
  errno,
  libc,
  O,
  OsError,
  rawSyscall,
  readSmallFile,
  S_IF,
} from "../ffi/libc.ts";
import { EPOLLIN, type Reactor, type Registration } from "../io/reactor.ts";

/** A workdir inside a protected directory the sandbox did not make (403 `protected_workdir`). */
export class ProtectedWorkdirError extends ApiError {
  readonly code = "protected_workdir";
  constructor(workdir: string, dir: string) {
    super(
      `workdir: ${workdir} is inside ${dir}, which stays read-only for sandboxed commands; ` +
        "run from the repository's working tree instead",
    );
  }
}

/** The single-component read-only subpaths of profiles: the names protected at any depth. */
export function protectedNames(subpaths: Iterable<string>): Set<string> {
  return new Set([...subpaths].filter((sub) => !sub.includes("/")));
}

const KEEP_IDS = 0xffffffff;
/**
 * Kept directories are checked for ones deleted since (repositories removed) once there are this
 * many, and again each time their number doubles: a check per directory, paid for by the growth.
 */
const PRUNE_AT_LEAST = 10_000;
const RENAME_NOREPLACE = 1;
/** A `.git` file as git reads it: one line, trailing line breaks ignored. */
const GITDIR_LINE = /^gitdir: (.+?)[\r\n]*$/;
const O_TMPFILE = 0o20200000;
/**
 * The entries whose presence makes git take a directory for a repository (`is_git_directory`):
 * `HEAD` with `objects/` and `refs/`, or with `commondir` leading to them.
 */
const SHAPE = new Set(["HEAD", "objects", "refs", "commondir"]);
/** Who gets what the sandbox made inside a protected directory: its owner. */
export interface Keeper {
  uid: number;
  gid: number;
}

/**
 * The keeper of what the sandbox made beneath `st`: its owner, in its group unless that is the
 * sandbox's.
 */
export function keeperOf(st: Stat, owners: SandboxOwners): Keeper {
  return { uid: st.uid, gid: owners.isGid(st.gid) ? 0 : st.gid };
}

/**
 * Gives an entry the sandbox made (`st`) to `keeper`, without write for group and others and
 * without execute bits on files, so nothing it planted runs or changes for anyone else.
 */
export function adopt(fd: number, st: Stat, keeper: Keeper): void {
  chownOf(fd, keeper.uid, keeper.gid);
  if (kind(st) === S_IF.LNK) return;
  const noExec = kind(st) === S_IF.REG ? 0o111 : 0;
  chmodOf(fd, st.mode & ~(0o7022 | noExec) & 0o7777);
}

/**
 * `entries` without the entries that grant the sandbox anything, or null when there are none.
 * The mask stays as it was, so nobody else gains: when no named entry is left, the owning
 * group keeps only what the mask let it have, and the mask goes.
 */
export function withoutSandbox(entries: AclEntry[], owners: SandboxOwners): AclEntry[] | null {
  const kept = entries.filter((e) =>
    !(e.tag === TAG.USER && owners.isUid(e.id)) && !(e.tag === TAG.GROUP && owners.isGid(e.id))
  );
  if (kept.length === entries.length) return null;
  if (kept.some((e) => e.tag === TAG.USER || e.tag === TAG.GROUP)) return kept;
  const mask = kept.find((e) => e.tag === TAG.MASK)?.perm ?? 7;
  return kept
    .filter((e) => e.tag !== TAG.MASK)
    .map((e) => e.tag === TAG.GROUP_OBJ ? { ...e, perm: e.perm & mask } : e);
}

/**
 * Refuses a `workdir` (canonical, absolute) that is, or lies beneath, a directory with a
 * protected name that the sandbox did not make, with a {@link ProtectedWorkdirError}: the
 * profile's read-only subpaths resolve beneath the workdir, so they would not cover it. With
 * `owners` null (children keep the server's uid) every protected directory counts as foreign.
 * Cheap (one `lstat` per protected component): callable on every request.
 */
export function assertNotInsideProtected(
  workdir: string,
  names: ReadonlySet<string>,
  owners: SandboxOwners | null,
): void {
  const dir = protectedAncestor(workdir, names, owners);
  if (dir !== null) throw new ProtectedWorkdirError(workdir, dir);
}

/**
 * The first of `path` and its ancestors that has a protected name and is not the sandbox's
 * (with `owners` null: any that exists).
 */
export function protectedAncestor(
  path: string,
  names: ReadonlySet<string>,
  owners: SandboxOwners | null,
): string | null {
  const parts = path.split("/");
  for (let i = 1; i < parts.length; i++) {
    if (!names.has(parts[i])) continue;
    const dir = parts.slice(0, i + 1).join("/");
    const st = statAt(AT_FDCWD, dir, AT.SYMLINK_NOFOLLOW);
    if (st && !owners?.isUid(st.uid)) return dir;
  }
  return null;
}

/** The parts of a repository's shape ({@link SHAPE}) the directory `dirFd` has, by name. */
export function shapeOf(dirFd: number): Map<string, Stat> | null {
  const parts = new Map<string, Stat>();
  for (const part of SHAPE) {
    const st = statAt(dirFd, part, AT.SYMLINK_NOFOLLOW);
    if (st) parts.set(part, st);
  }
  const whole = parts.has("HEAD") &&
    (parts.has("commondir") || (parts.has("objects") && parts.has("refs")));
  return whole ? parts : null;
}

/**
 * Renames the entry `name` of the directory `dirFd` aside (`<name>.untrusted-<random>`) and logs
 * both paths and how to restore it; `path` names it when `dirFd`'s path is unknown.
 */
function moveAside(dirFd: number, name: string, path: string): void {
  const mark = `untrusted-${crypto.randomUUID().slice(0, 8)}`;
  // Named after it while the name still fits (a file name is at most 255 bytes).
  const aside = new TextEncoder().encode(name).length > 200 ? mark : `${name}.${mark}`;
  checkedSyscall(
    `rename(${path})`,
    SYS.renameat2,
    dirFd,
    cString(name),
    dirFd,
    cString(aside),
    RENAME_NOREPLACE,
  );
  const dir = pathOf(dirFd);
  const [from, to] = dir === null ? [path, aside] : [`${dir}/${name}`, `${dir}/${aside}`];
  console.error(
    `uexec: ${from} appeared where sandboxed commands could have forged what it holds; ` +
      `moved aside to ${to} (to restore it: mv -n '${to}' '${from}')`,
  );
}

/**
 * Takes a repository's shape away from the directory `dirFd` (at `path`) when `made` made parts
 * of it: its `HEAD` goes aside if `made` made that, else the parts `made` made, as (6) of the
 * module doc does. For what a write grant hands over to the directory's owner (write_grant.ts),
 * which git would then trust.
 */
export function unshape(dirFd: number, path: string, made: (st: Stat) => boolean): void {
  const parts = shapeOf(dirFd);
  if (parts === null) return;
  const planted = [...parts].filter(([, st]) => made(st)).map(([part]) => part);
  for (const part of planted.includes("HEAD") ? ["HEAD"] : planted) {
    moveAside(dirFd, part, `${path}/${part}`);
  }
}

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
type Actor = "sandbox" | "other" | "unknown";

/** A protected directory's place: its parent ({@link EntryWatch.dirKey}) and name. */
interface Home {
  parent: string;
  name: string;
}

/** What happens to entries a sandbox uid made inside a protected directory it did not make. */
type Planted =
  /** Found when the workspace is prepared, when no sandboxed process runs: they may be
   * earlier work (e.g. commits in a nested repository); they are kept, owned by the
   * directory's owner, with no write for group and others and no execute bits on files. */
  | "adopt"
  /** Found in a directory that just appeared: made in the moment before the guard saw it, so
   * a sandboxed process may hold them open; they are taken over as above, then removed. */
  | "remove";

/** One securing of a protected entry and of everything beneath it. */
interface Walk {
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
  #roots: string[] = [];
  #devices = new Set<number>();
  /** Files with several links found inside protected directories: the grant skips them. */
  #links = new Set<string>();
  /** `.git` files this guard wrote (dev:ino): already trusted when renamed into place. */
  #renewed = new Set<string>();
  /**
   * Protected paths that could not be secured yet: why, what to do with planted entries, and
   * whether the entry may be moved aside (see {@link #protect}; yes unless said).
   */
  #failed = new Map<string, { why: string; planted: Planted; acting?: boolean }>();
  /** Where this instance's sandbox can write besides the guarded roots (profiles, grants). */
  #writable = new Set<string>();
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
  /** Protected directories a write grant holds (path -> how many grants): left to them. */
  #lent = new Map<string, number>();
  /**
   * Lent directories given back (by `dev:ino`), each held open since it was lent, waiting to be
   * walked until no grant holds them.
   */
  #returned = new Map<string, { path: string; fd: number }>();
  /** How many directories walks have listed, ever. */
  #listings = 0;

  /** Throws {@link SandboxUnavailableError} when new entries cannot be watched. */
  constructor(opts: GuardOptions) {
    this.#names = opts.names;
    this.#reported = new Set([...opts.names, ...SHAPE]);
    this.#owners = opts.owners;
    this.#reactor = opts.reactor;
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
          console.error("uexec: protecting new directories failed:", e);
        }
      },
    });
  }

  /** Starts guarding `root` (canonical): its file system is watched from now on. */
  guard(root: string): void {
    this.#watchDir(root, Deno.lstatSync(root));
    if (!this.#roots.includes(root)) this.#roots.push(root);
  }

  /**
   * Notes that this instance's sandbox can write beneath `paths` (canonical): a profile's
   * writable roots, granted directories. See the module doc on telling who did what.
   */
  writable(paths: Iterable<string>): void {
    for (const path of paths) this.#writable.add(path);
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
    const bare = !this.#names.has(name) && info.isDirectory && this.#isRepository(path);
    if (this.#names.has(name) || bare) {
      if (this.#owners.isUid(info.uid ?? 0)) return false;
      if (bare) this.#repositories.add(`${info.dev}:${info.ino}`);
      this.#protectPath(path.slice(0, slash) || "/", name, "adopt");
      return true;
    }
    return info.isFile && (info.nlink ?? 1) > 1 && this.#links.has(`${info.dev}:${info.ino}`);
  };

  /**
   * Secures every protected directory that appeared since the last call (the kernel queued it
   * when it was made). Call before spawning. Throws {@link SandboxUnavailableError} while a
   * protected directory cannot be secured.
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
    if (first) {
      throw new SandboxUnavailableError(
        `cannot make ${first[0]} read-only for the sandbox: ${first[1].why}`,
      );
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
    for (const { fd } of this.#returned.values()) closeFd(fd);
    this.#returned.clear();
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
    if (overflowed) { for (const root of this.#roots) this.#sweep(root); }
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
    const acting = this.#mayAct(entry);
    try {
      this.#protect(entry.dirFd, entry.name, "remove", path, entry.renamed, acting);
      this.#failed.delete(path);
    } catch (e) {
      this.#failed.set(path, { why: (e as Error).message, planted: "remove", acting });
    }
  }

  /** Who made the entry `st`, `entry` (see the module doc). */
  #actor(entry: NewEntry, st: Stat): Actor {
    if (this.#owners.isUid(st.uid)) return "sandbox";
    // A new inode is its maker's (the file system uid); a new link to an existing file is not.
    if (!entry.renamed && (kind(st) === S_IF.DIR || st.nlink === 1n)) return "other";
    const uid = fsUidOf(entry.pid);
    if (uid === null) return "unknown";
    return this.#owners.isUid(uid) ? "sandbox" : "other";
  }

  /** Whether this instance's sandbox can write beneath `path`. */
  #writableHere(path: string): boolean {
    return [...this.#roots, ...this.#writable].some((root) => isWithin(path, root));
  }

  /**
   * Whether `entry` (with a protected name) may be this instance's sandbox's doing: then the
   * guard may move it aside or replace it; otherwise it only takes back its own grants.
   */
  #mayAct(entry: NewEntry): boolean {
    const st = statAt(entry.dirFd, entry.name, AT.SYMLINK_NOFOLLOW);
    if (st === null) return false;
    const actor = this.#actor(entry, st);
    return actor === "sandbox" || (actor === "unknown" && this.#writableHere(entry.dir));
  }

  /** Whether the directory `path` has a repository's shape ({@link SHAPE}). */
  #isRepository(path: string): boolean {
    // Most directories have no HEAD: one system call for them.
    if (statAt(AT_FDCWD, `${path}/HEAD`, AT.SYMLINK_NOFOLLOW) === null) return false;
    const fd = openEntry(AT_FDCWD, path);
    if (fd === null) return false;
    try {
      return shapeOf(fd) !== null;
    } finally {
      closeFd(fd);
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
      if (planted.length === 0 && st && this.#writableHere(entry.dir)) {
        if (this.#actor(entry, st) === "other") return this.#onRepository(entry.dir);
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
    if (!this.#roots.some((root) => isWithin(dir, root) && dir !== root)) return;
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
      const actor = this.#actor(entry, st);
      if (actor === "other" || (actor === "unknown" && !this.#writableHere(was))) {
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
      this.#secureChild(entry.dirFd, entry.name, fd, statOf(fd), late);
      this.#reportTaken(`${entry.dir}/${entry.name}`, late);
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
    if ([...this.#lent.keys()].some((root) => isWithin(entry.dir, root))) return;
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
        this.#secureEntry(fd, statOf(fd), late);
      } else {
        this.#secureChild(entry.dirFd, entry.name, fd, st, late);
        if (late.late && late.granted && kind(st) === S_IF.DIR && (entry.renamed || made)) {
          this.#moveAside(entry.dirFd, entry.name, path);
        }
      }
      this.#reportTaken(path, late);
    } catch (e) {
      // Retried as a walk of the whole protected directory: stripped, nothing removed.
      this.#failed.set(walk.path, { why: (e as Error).message, planted: "adopt" });
    } finally {
      closeFd(fd);
    }
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
      this.#failed.set(path, { why: (e as Error).message, planted: "adopt" });
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
      this.#secureTree(fd, path, "adopt", true);
    } catch (e) {
      this.#failed.set(path, { why: (e as Error).message, planted: "adopt" });
    }
  }

  /**
   * Secures the protected entry `fd` (at `path`) and everything beneath it, unless the sandbox
   * made it or this guard wrote it (null then).
   */
  #secureTree(
    fd: number,
    path: string,
    planted: Planted,
    late = false,
  ): { st: Stat; walk: Walk } | null {
    const st = statOf(fd);
    if (this.#owners.isUid(st.uid) || this.#renewed.has(`${st.dev}:${st.ino}`)) return null;
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
    this.#reportTaken(path, walk);
    return { st, walk };
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
      const secured = this.#secureTree(fd, path, planted);
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
      if (kind(st) === S_IF.REG && this.#leadsIntoProtected(content, path)) {
        this.#renew(dirFd, name, st, keeper, content, path);
      } else {
        this.#moveAside(dirFd, name, path);
      }
    } finally {
      closeFd(fd);
    }
  }

  /** Whether `.git` file content points git into a protected directory the sandbox did not make. */
  #leadsIntoProtected(content: string, path: string): boolean {
    const line = GITDIR_LINE.exec(content);
    if (!line) return false;
    const dir = path.slice(0, path.lastIndexOf("/"));
    const target = normalizeAbsolutePath(line[1].startsWith("/") ? line[1] : `${dir}/${line[1]}`);
    return protectedAncestor(realPathOrSelf(target), this.#names, this.#owners) !== null;
  }

  /**
   * Replaces the `.git` file `name` with a new inode holding `content`, made unnamed and
   * stripped before it is linked in, so no sandboxed process can hold it open. If something
   * else got renamed onto the name meanwhile, that is moved aside instead.
   */
  #renew(dirFd: number, name: string, st: Stat, keeper: Keeper, content: string, path: string) {
    const fresh = checkedSyscall(
      "open(O_TMPFILE)",
      SYS.openat,
      dirFd,
      cString("."),
      O_TMPFILE | O.WRONLY | O.CLOEXEC,
      0o600,
    );
    try {
      this.#strip(fresh, "access");
      chownOf(fresh, st.uid, keeper.gid);
      const mode = st.mode & 0o644;
      chmodOf(fresh, mode);
      const bytes = new TextEncoder().encode(content);
      if (libc().write(fresh, bytes, BigInt(bytes.length)) !== bytes.length) {
        throw new OsError(`write(${path})`, errno());
      }
      const temp = `${name}.uexec-${crypto.randomUUID()}`;
      checkedSyscall("linkat", SYS.linkat, fresh, cString(""), dirFd, cString(temp), AT.EMPTY_PATH);
      checkedSyscall(
        `rename(${path})`,
        SYS.renameat2,
        dirFd,
        cString(temp),
        dirFd,
        cString(name),
        0,
      );
      const made = statAt(fresh, "", AT.EMPTY_PATH)!;
      this.#renewed.add(`${made.dev}:${made.ino}`);
      const now = statAt(dirFd, name, AT.SYMLINK_NOFOLLOW);
      if (now?.ino !== made.ino) this.#moveAside(dirFd, name, path);
    } finally {
      closeFd(fresh);
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

  /** Logs what of the sandbox's a walk found beneath `path`. */
  #reportTaken(path: string, walk: Walk): void {
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
   * reported by the kernel, see {@link settle}). Sandbox-made entries are taken back.
   */
  #secure(fd: number, st: Stat, walk: Walk): void {
    if (!this.#secureEntry(fd, st, walk)) return;
    this.#list(fd, walk);
    eachChild(fd, (child, cfd, cst) => this.#secureChild(fd, child, cfd, cst, walk));
  }

  /** Removes every sandbox grant from the entry `fd` alone; true when it is a directory. */
  #secureEntry(fd: number, st: Stat, walk: Walk): boolean {
    if (kind(st) === S_IF.LNK) return false;
    if (st.mode & 0o002) walk.worldWritable = true;
    if (this.#owners.isGid(st.gid)) {
      walk.granted = true;
      chownOf(fd, KEEP_IDS, walk.keeper.gid);
    }
    if (this.#strip(fd, "access")) walk.granted = true;
    if (kind(st) === S_IF.REG && st.nlink > 1n) this.#links.add(`${st.dev}:${st.ino}`);
    if (kind(st) !== S_IF.DIR) return false;
    this.#strip(fd, "default");
    return true;
  }

  /**
   * Secures the entry `name` of a directory the sandbox did not make (`dirFd`); in a late walk,
   * a file that carried a sandbox grant is then moved aside.
   */
  #secureChild(dirFd: number, name: string, fd: number, st: Stat, walk: Walk): void {
    const granted = walk.granted;
    walk.granted = false;
    if (this.#owners.isUid(st.uid)) this.#takeBack(dirFd, name, fd, st, walk);
    else this.#secure(fd, st, walk);
    if (walk.late && walk.granted && kind(st) !== S_IF.DIR) {
      // Nothing of it runs even under its new name.
      if (kind(st) === S_IF.REG) chmodOf(fd, statOf(fd).mode & 0o7666);
      this.#moveAside(dirFd, name, `${walk.path} (${name} in it)`);
    }
    walk.granted ||= granted;
  }

  /**
   * Notes that `walk` is about to list the directory `fd`, see {@link #listed}; a late walk's
   * directories are kept at once (what lands in them is judged as late too).
   */
  #list(fd: number, walk: Walk): void {
    (walk.late ? this.#kept : this.#listed).set(this.#watch.dirKey(fd), walk);
    this.#listings++;
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
      if (this.#strip(fd, "access")) walk.granted = true;
      this.#strip(fd, "default");
      if (!remove) this.#list(fd, walk);
      eachChild(
        fd,
        (child, cfd, cst) =>
          remove
            ? this.#takeBack(fd, child, cfd, cst, walk)
            : this.#secureChild(fd, child, cfd, cst, walk),
      );
    } else if (own && kind(st) !== S_IF.LNK) {
      this.#strip(fd, "access");
    }
    if (remove) {
      const flags = kind(st) === S_IF.DIR ? AT.REMOVEDIR : 0;
      checkedSyscall(`unlink(${name})`, SYS.unlinkat, dirFd, cString(name), flags);
    }
  }

  /**
   * Removes the sandbox's entries from an ACL of `fd`; true when an access ACL had one (whatever
   * it allows now: a mask narrowed by a chmod does not close what was opened while it was wide).
   */
  #strip(fd: number, which: AclKind): boolean {
    const acl = readAclOf(fd, which);
    const kept = acl && withoutSandbox(acl, this.#owners);
    if (!kept) return false;
    writeAclOf(fd, which, kept);
    return which === "access";
  }
}
