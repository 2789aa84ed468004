/**
 * Taking back what a session uid owns before the uid is handed out again: every entry beneath
 * the given roots (the server's workspace and the workdirs outside it that sessions used) owned
 * by one of the uids is given to the range's resting uid (the spawners', never a session's),
 * keeping its group, mode and ACL. A file a session shared with the group stays shared (its group
 * ACL entry is untouched); one it kept to itself (`chmod 600`) is then unreadable to every
 * session uid, the uid's next holder included. Not root: the workspace's preparation at the
 * next start grants the group what root owns, and leaves alone what a sandbox uid owns.
 *
 * Runs on the reaper's thread (an unrestricted root worker) after every process of the uids was
 * killed, so nothing of theirs changes the tree meanwhile. Entries are changed with
 * `fchownat(AT_SYMLINK_NOFOLLOW)`: a symbolic link is re-owned itself, never followed, and the
 * walk never descends through one. This module must never change an entry a given uid does not
 * own, nor anything outside the roots.
 *
 * @module
 */

import {
  AT,
  AT_FDCWD,
  cString,
  errno,
  fileType,
  O,
  OsError,
  rawSyscall,
  S_IF,
  STAT_SIZE,
} from "../../ffi/libc.ts";
import { closeFd, SYS } from "../syscalls.ts";

const SYS_GETDENTS64 = 217;
const ENOENT = 2;
const ENOTDIR = 20;
const ELOOP = 40;
/** Offset of `st_uid` in x86_64's `struct stat`. */
const ST_UID = 28;

/**
 * Gives every entry beneath `roots` owned by a uid of `uids` to `owner` (the range's resting
 * uid, never a session's); returns how many. Each
 * directory is opened relative to its parent's descriptor with O_NOFOLLOW, so a session that
 * swaps a component for a symbolic link mid-walk (another session's uid, still running) cannot
 * steer the walk, or a change, outside the roots.
 */
export function takeBackFiles(roots: string[], uids: number[], owner: number): number {
  const owned = new Set(uids);
  const stat = new Uint8Array(STAT_SIZE);
  const view = new DataView(stat.buffer);
  let changed = 0;
  /** Takes back the entry `c` (NUL-terminated bytes) of directory `dir`, and what it holds. */
  const visit = (dir: number, c: Uint8Array): void => {
    const name = decoder.decode(c.subarray(0, -1));
    if (rawSyscall(SYS.newfstatat, dir, c, stat, AT.SYMLINK_NOFOLLOW) !== 0) {
      const code = errno();
      // Removed meanwhile by another session: nothing left to take back.
      if (code === ENOENT) return;
      throw new OsError(`stat(${name})`, code);
    }
    const isDir = fileType(stat) === S_IF.DIR;
    if (owned.has(view.getUint32(ST_UID, true))) {
      if (rawSyscall(SYS.fchownat, dir, c, owner, -1, AT.SYMLINK_NOFOLLOW) === 0) changed++;
      else if (errno() !== ENOENT) throw new OsError(`lchown(${name})`, errno());
    }
    if (!isDir) return;
    const flags = O.DIRECTORY | O.NOFOLLOW | O.CLOEXEC;
    const fd = rawSyscall(SYS.openat, dir, c, flags, 0);
    if (fd < 0) {
      const code = errno();
      // Gone, or swapped for a link since the stat: not followed.
      if (code === ENOENT || code === ELOOP || code === ENOTDIR) return;
      throw new OsError(`open(${name})`, code);
    }
    try {
      for (const name of entryNames(fd)) visit(fd, name);
    } finally {
      closeFd(fd);
    }
  };
  for (const root of roots) visit(AT_FDCWD, cString(root));
  return changed;
}

const decoder = new TextDecoder();
const DOT = 0x2e;

/**
 * The names in the directory open as `fd` but `.` and `..`, NUL-terminated bytes as they are
 * (a name need not be UTF-8), read with `getdents64` (Deno reads
 * directories by path only, and `/proc/thread-self/fd/N` paths need --allow-all).
 */
function entryNames(fd: number): Uint8Array[] {
  const names: Uint8Array[] = [];
  const buf = new Uint8Array(32768);
  const view = new DataView(buf.buffer);
  for (;;) {
    const n = rawSyscall(SYS_GETDENTS64, fd, buf, buf.length);
    if (n < 0) throw new OsError("getdents64", errno());
    if (n === 0) return names;
    // struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name.
    for (let at = 0; at < n; at += view.getUint16(at + 16, true)) {
      const start = at + 19;
      const name = buf.slice(start, buf.indexOf(0, start) + 1);
      const dots = name[0] === DOT && (name[1] === 0 || name[1] === DOT && name[2] === 0);
      if (!dots) names.push(name);
    }
  }
}
