/**
 * File-system lookups shared by the sandbox modules, where a missing path is an expected
 * answer rather than an error. They go through raw system calls, not Deno's file APIs,
 * because Deno demands `--allow-all` for anything under /dev, /proc and /sys. This module must
 * never hide any error other than "not found".
 *
 * @module
 */

import {
  AT,
  AT_FDCWD,
  cString,
  E,
  errno,
  fileType,
  OsError,
  rawSyscall,
  S_IF,
  STAT_SIZE,
} from "../../ffi/libc.ts";
import { closeFd, openPath, SYS } from "../syscalls.ts";

/** What kind of file a path names. */
export interface PathInfo {
  isDirectory: boolean;
}

/** `lstat` (or `stat` with `follow`) of `path`, or null when it does not exist. */
export function lstatOrNull(path: string, follow = false): PathInfo | null {
  const buf = new Uint8Array(STAT_SIZE);
  const flags = follow ? 0 : AT.SYMLINK_NOFOLLOW;
  if (rawSyscall(SYS.newfstatat, AT_FDCWD, cString(path), buf, flags) < 0) {
    const code = errno();
    if (code === E.ENOENT || code === E.ENOTDIR) return null;
    throw new OsError(`stat(${path})`, code);
  }
  return { isDirectory: fileType(buf) === S_IF.DIR };
}

/** The paths among `paths` that exist (symlinks count, even dangling ones). */
export function existingPaths(paths: string[]): string[] {
  return paths.filter((p) => lstatOrNull(p) !== null);
}

/** `path` with every symlink resolved, or `path` itself when it (or its target) does not exist. */
export function realPathOrSelf(path: string): string {
  let fd: number;
  try {
    fd = openPath(path);
  } catch (e) {
    if (e instanceof OsError && (e.errno === E.ENOENT || e.errno === E.ENOTDIR)) {
      return path;
    }
    throw e;
  }
  try {
    const buf = new Uint8Array(4096);
    const n = rawSyscall(SYS.readlink, cString(`/proc/self/fd/${fd}`), buf, buf.length);
    if (n < 0) throw new OsError(`readlink(${path})`, errno());
    return new TextDecoder().decode(buf.subarray(0, n));
  } finally {
    closeFd(fd);
  }
}
