/**
 * Directory entries reached through descriptors, never through paths a sandboxed process could
 * redirect: an entry is opened with `O_PATH | O_NOFOLLOW` relative to its directory's descriptor,
 * and its status, ACLs and owner are read and changed through that descriptor. For code that
 * changes what the sandbox may do to a tree while sandboxed processes may be rearranging it
 * (git_guard.ts, write_grant.ts).
 *
 * This module must never follow a symlink to reach an entry.
 *
 * Flow at a glance (the `fs/` folder: file primitives shared by grants/ and git_guard/; kept
 * apart from both so that neither imports the other for them):
 * - `entries.ts` (this file): entries opened, read and changed by descriptor.
 * - `acl.ts`: POSIX ACLs encoded and decided as the kernel does; `fsinfo.ts`: lookups where a
 *   missing path is an answer.
 *
 * @module
 */

import { type AclEntry, type AclKind, readAcl, writeAcl } from "./acl.ts";
import { checkedSyscall, closeFd, SYS } from "../syscalls.ts";
import {
  AT,
  AT_FDCWD,
  cString,
  E,
  errno,
  listDir,
  O,
  OsError,
  rawSyscall,
  S_IF,
  S_IFMT,
  STAT_SIZE,
} from "../../ffi/libc.ts";

/** What `stat` says about an entry. */
export interface Stat {
  dev: bigint;
  ino: bigint;
  nlink: bigint;
  mode: number;
  uid: number;
  gid: number;
  size: bigint;
  /** Modification and status change times, in nanoseconds. */
  mtimeNs: bigint;
  ctimeNs: bigint;
}

/** `stat` of `path` relative to `dirFd` (with `flags`); null when it is gone. */
export function statAt(dirFd: number, path: string, flags: number): Stat | null {
  const buf = new Uint8Array(STAT_SIZE);
  if (rawSyscall(SYS.newfstatat, dirFd, cString(path), buf, flags) < 0) {
    const code = errno();
    if (code === E.ENOENT || code === E.ENOTDIR) return null;
    throw new OsError(`stat(${path})`, code);
  }
  const v = new DataView(buf.buffer);
  return {
    dev: v.getBigUint64(0, true),
    ino: v.getBigUint64(8, true),
    nlink: v.getBigUint64(16, true),
    mode: v.getUint32(24, true),
    uid: v.getUint32(28, true),
    gid: v.getUint32(32, true),
    size: v.getBigInt64(48, true),
    mtimeNs: v.getBigInt64(88, true) * 1_000_000_000n + v.getBigInt64(96, true),
    ctimeNs: v.getBigInt64(104, true) * 1_000_000_000n + v.getBigInt64(112, true),
  };
}

/** The entry's type (an `S_IF` value). */
export const kind = (st: Stat): number => st.mode & S_IFMT;

/** Opens `name` in `dirFd` with O_PATH, not following a symlink; null when it is gone. */
export function openEntry(dirFd: number, name: string): number | null {
  const fd = rawSyscall(SYS.openat, dirFd, cString(name), O.PATH | O.NOFOLLOW | O.CLOEXEC, 0);
  if (fd >= 0) return fd;
  const code = errno();
  if (code === E.ENOENT || code === E.ENOTDIR) return null;
  throw new OsError(`open(${name})`, code);
}

/** The inode behind an O_PATH descriptor, as a path the xattr and chmod calls follow. */
export const inode = (fd: number): string => `/proc/self/fd/${fd}`;

/** The entry's stat, through its descriptor. */
export function statOf(fd: number): Stat {
  return statAt(fd, "", AT.EMPTY_PATH | AT.SYMLINK_NOFOLLOW)!;
}

/** An ACL of the entry; null when it has none. */
export function readAclOf(fd: number, which: AclKind): AclEntry[] | null {
  return readAcl(inode(fd), which, true);
}

/** Sets an ACL of the entry (a minimal access ACL becomes plain mode bits). */
export function writeAclOf(fd: number, which: AclKind, entries: AclEntry[]): void {
  writeAcl(inode(fd), which, entries, true);
}

/** Gives the entry to `uid`:`gid` (0xffffffff keeps one). */
export function chownOf(fd: number, uid: number, gid: number): void {
  checkedSyscall("chown", SYS.fchownat, fd, cString(""), uid, gid, AT.EMPTY_PATH);
}

/** Sets the entry's mode bits. */
export function chmodOf(fd: number, mode: number): void {
  checkedSyscall("chmod", SYS.fchmodat, AT_FDCWD, cString(inode(fd)), mode);
}

/** Calls `visit` with each entry of the directory `fd`, opened as above (gone ones skipped). */
export function eachChild(fd: number, visit: (name: string, fd: number, st: Stat) => void): void {
  for (const child of listDir(inode(fd))) {
    if (child === "." || child === "..") continue;
    const cfd = openEntry(fd, child);
    if (cfd === null) continue;
    try {
      visit(child, cfd, statOf(cfd));
    } finally {
      closeFd(cfd);
    }
  }
}

/**
 * Opens the absolute `path` component by component, none of them followed if it is a symlink;
 * null when one is gone or is a symlink. For paths already made canonical, which must have none.
 */
export function openCanonical(path: string): number | null {
  let fd = openEntry(AT_FDCWD, "/");
  for (const part of path.split("/").filter(Boolean)) {
    if (fd === null) return null;
    let next: number | null;
    try {
      next = openEntry(fd, part);
    } finally {
      closeFd(fd);
    }
    fd = next !== null && kind(statOf(next)) === S_IF.LNK ? (closeFd(next), null) : next;
  }
  return fd;
}
