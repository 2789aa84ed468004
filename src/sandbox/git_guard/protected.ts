/**
 * What the git guard protects, and the steps that secure one protected entry: the protected
 * names and a repository's shape, refusing a workdir inside a protected directory, giving what
 * the sandbox made to the directory's keeper, stripping the sandbox's ACL entries, moving an
 * untrusted entry aside, and replacing a `.git` file with a fresh copy. Stateless; shared by the
 * guard (git_guard.ts, walk.ts) and the write grants (grants/write_grant.ts). Like the guard,
 * it must never widen anyone's access, and it changes entries only through descriptors opened
 * without following symlinks.
 *
 * @module
 */

import { type AclEntry, type AclKind, TAG } from "../fs/acl.ts";
import {
  chmodOf,
  chownOf,
  kind,
  openEntry,
  readAclOf,
  type Stat,
  statAt,
  writeAclOf,
} from "../fs/entries.ts";
import { pathOf } from "./fanotify.ts";
import type { SandboxOwners } from "../identity/identity.ts";
import { realPathOrSelf } from "../fs/fsinfo.ts";
import { normalizeAbsolutePath } from "../policy/profiles.ts";
import { checkedSyscall, closeFd, SYS } from "../syscalls.ts";
import { AT, AT_FDCWD, cString, errno, libc, O, OsError, S_IF } from "../../ffi/libc.ts";
import { ApiError } from "../../errors.ts";

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

export const RENAME_NOREPLACE = 1;
/** A `.git` file as git reads it: one line, trailing line breaks ignored. */
const GITDIR_LINE = /^gitdir: (.+?)[\r\n]*$/;
const O_TMPFILE = 0o20200000;
/**
 * The entries whose presence makes git take a directory for a repository (`is_git_directory`):
 * `HEAD` with `objects/` and `refs/`, or with `commondir` leading to them.
 */
export const SHAPE = new Set(["HEAD", "objects", "refs", "commondir"]);

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
export function moveAside(dirFd: number, name: string, path: string): void {
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
 * Removes the sandbox's (`owners`') entries from an ACL of `fd`; true when an access ACL had one
 * (whatever it allows now: a mask narrowed by a chmod does not close what was opened while it
 * was wide).
 */
export function stripSandbox(fd: number, which: AclKind, owners: SandboxOwners): boolean {
  const acl = readAclOf(fd, which);
  const kept = acl && withoutSandbox(acl, owners);
  if (!kept) return false;
  writeAclOf(fd, which, kept);
  return which === "access";
}

/**
 * Whether `.git` file content points git into a protected directory the sandbox did not make.
 */
export function leadsIntoProtected(
  content: string,
  path: string,
  names: ReadonlySet<string>,
  owners: SandboxOwners,
): boolean {
  const line = GITDIR_LINE.exec(content);
  if (!line) return false;
  const dir = path.slice(0, path.lastIndexOf("/"));
  const target = normalizeAbsolutePath(line[1].startsWith("/") ? line[1] : `${dir}/${line[1]}`);
  return protectedAncestor(realPathOrSelf(target), names, owners) !== null;
}

/**
 * Replaces the `.git` file `name` with a new inode holding `content`, made unnamed and
 * stripped before it is linked in, so no sandboxed process can hold it open. Returns the new
 * inode (`dev:ino`) and whether it holds the name now: if something else got renamed onto the
 * name meanwhile, the caller moves that aside.
 */
export function renewGitFile(
  dirFd: number,
  name: string,
  st: Stat,
  keeper: Keeper,
  content: string,
  path: string,
  owners: SandboxOwners,
): { key: string; inPlace: boolean } {
  const fresh = checkedSyscall(
    "open(O_TMPFILE)",
    SYS.openat,
    dirFd,
    cString("."),
    O_TMPFILE | O.WRONLY | O.CLOEXEC,
    0o600,
  );
  try {
    stripSandbox(fresh, "access", owners);
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
    const now = statAt(dirFd, name, AT.SYMLINK_NOFOLLOW);
    return { key: `${made.dev}:${made.ino}`, inPlace: now?.ino === made.ino };
  } finally {
    closeFd(fresh);
  }
}

/** Whether the directory `path` has a repository's shape ({@link SHAPE}). */
export function isRepository(path: string): boolean {
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
