/**
 * Directory entries appearing anywhere on whole file systems, as the kernel reports them through
 * fanotify: every `create` (files, directories, links) and every rename onto a name, each with
 * the directory it happened in and the new name; changes of an entry's attributes (owner, mode,
 * ACL); and, for single files asked for, each write. The owner names what it wants reported:
 * entries with given names anywhere (created or renamed), and every entry of given directories
 * (by {@link EntryWatch.dirKey}), the directories themselves included (as `.`), but not what
 * this process did there; and, when asked, every directory renamed onto any name. Each entry
 * carries the pid of the process that made it, as the kernel reported it (that process may have
 * exited since).
 *
 * The events are queued by the kernel inside the system call that made the entry, so whoever
 * reads the queue after that call returned sees it. Reading never blocks: the owner wakes on
 * the descriptor's readability and drains. Needs CAP_SYS_ADMIN (filesystem marks). This module
 * only reports entries; it must never change the file system.
 *
 * @module
 */

import { AT, AT_FDCWD, cString, E, errno, libc, O, OsError, rawSyscall } from "../../ffi/libc.ts";
import { checkedSyscall, closeFd, SYS } from "../syscalls.ts";
import { statOf } from "../fs/entries.ts";

const FAN_CLOEXEC = 0x1;
const FAN_NONBLOCK = 0x2;
const FAN_UNLIMITED_QUEUE = 0x10;
const FAN_REPORT_DFID_NAME = 0x400 | 0x800;
const FAN_MARK_ADD = 0x1;
const FAN_MARK_FILESYSTEM = 0x100;
const FAN_MODIFY = 0x2;
const FAN_ATTRIB = 0x4;
const FAN_CLOSE_WRITE = 0x8;
const FAN_MOVED_TO = 0x80;
const FAN_CREATE = 0x100;
const FAN_Q_OVERFLOW = 0x4000;
const FAN_ONDIR = 0x40000000;
const INFO_DFID_NAME = 2;
/** name_to_handle_at: the handle fanotify reports for an inode (kernel 6.5+). */
const AT_HANDLE_FID = 0x200;
const MAX_HANDLE_SZ = 128;
const ESTALE = 116;
const STATFS_SIZE = 120;
const STATFS_FSID_OFFSET = 56;
const METADATA_SIZE = 24;
const PID_OFFSET = 20;
/** Info record header (4) + fsid (8), then `struct file_handle` and the name. */
const HANDLE_OFFSET = 12;

/**
 * One new or changed entry: `name` of the directory `dirFd` (an O_PATH descriptor) at `dir`;
 * `.` when the directory itself changed (the kernel names it so).
 */
export interface NewEntry {
  /** The directory's path now, in this mount namespace. */
  dir: string;
  /** O_PATH descriptor of the directory, owned by the callee only during the callback. */
  dirFd: number;
  name: string;
  /** True when something was renamed onto `name`, false for a create or link. */
  renamed: boolean;
  /** True when only the entry's attributes changed (owner, mode, ACL): nothing new appeared. */
  changed: boolean;
  /** The directory's {@link EntryWatch.dirKey} when it is one of the directories asked for. */
  dirKey?: string;
  /** The process (thread group) that made the change; 0 when outside this pid namespace. */
  pid: number;
}

/** What {@link EntryWatch.drain} reports. */
export interface Wanted {
  /** Entries with these names, in any directory. */
  names: ReadonlySet<string>;
  /** Every entry of the directories with these keys ({@link EntryWatch.dirKey}), and each one. */
  dirs: { has(key: string): boolean; readonly size: number };
  /** Also every directory renamed onto any name (by another process). */
  movedDirs: boolean;
}

/** What {@link EntryWatch.drain} found besides the entries. */
export interface DrainResult {
  /** Events were dropped or could not be resolved: the caller must look at everything again. */
  overflowed: boolean;
}

function fsidOf(fd: number): string {
  const buf = new Uint8Array(STATFS_SIZE);
  checkedSyscall("fstatfs", SYS.fstatfs, fd, buf);
  return buf.subarray(STATFS_FSID_OFFSET, STATFS_FSID_OFFSET + 8).join(",");
}

/** The path of the descriptor `fd` now, in this mount namespace; null when it has none. */
export function pathOf(fd: number): string | null {
  const buf = new Uint8Array(4096);
  const n = rawSyscall(SYS.readlink, cString(`/proc/self/fd/${fd}`), buf, buf.length);
  if (n < 0) return null;
  const path = new TextDecoder().decode(buf.subarray(0, n));
  return path.startsWith("/") && !path.endsWith(" (deleted)") ? path : null;
}

/** A fanotify group watching whole file systems for new directory entries. */
export class EntryWatch {
  readonly fd: number;
  /** fsid -> a descriptor on that file system, for `open_by_handle_at`. */
  #mounts = new Map<string, number>();
  #buf = new Uint8Array(64 * 1024);
  #decoder = new TextDecoder();

  /** Throws an {@link OsError} when fanotify is unavailable (no CAP_SYS_ADMIN, old kernel). */
  constructor() {
    this.fd = checkedSyscall(
      "fanotify_init",
      SYS.fanotify_init,
      FAN_CLOEXEC | FAN_NONBLOCK | FAN_UNLIMITED_QUEUE | FAN_REPORT_DFID_NAME,
      0,
    );
  }

  /** Watches the whole file system that holds the directory `path` (once per file system). */
  watch(path: string): void {
    const fd = checkedSyscall(
      `open(${path})`,
      SYS.openat,
      AT_FDCWD,
      cString(path),
      O.DIRECTORY | O.CLOEXEC,
      0,
    );
    const fsid = fsidOf(fd);
    if (this.#mounts.has(fsid)) return closeFd(fd);
    try {
      checkedSyscall(
        `fanotify_mark(${path})`,
        SYS.fanotify_mark,
        this.fd,
        FAN_MARK_ADD | FAN_MARK_FILESYSTEM,
        BigInt(FAN_CREATE | FAN_MOVED_TO | FAN_ATTRIB | FAN_ONDIR),
        fd,
        null,
      );
    } catch (e) {
      closeFd(fd);
      throw e;
    }
    this.#mounts.set(fsid, fd);
  }

  /**
   * Also reports every write to the file behind `fd` (an O_PATH descriptor), as an entry of its
   * directory under its name, until the file is gone.
   */
  watchWrites(fd: number): void {
    checkedSyscall(
      "fanotify_mark(file)",
      SYS.fanotify_mark,
      this.fd,
      FAN_MARK_ADD,
      BigInt(FAN_MODIFY | FAN_CLOSE_WRITE),
      AT_FDCWD,
      cString(`/proc/self/fd/${fd}`),
    );
  }

  /**
   * The key under which {@link drain} knows the directory `fd` (any descriptor, O_PATH too): its
   * file system and the handle fanotify reports for it, so it holds across renames.
   */
  dirKey(fd: number): string {
    const handle = new Uint8Array(8 + MAX_HANDLE_SZ);
    new DataView(handle.buffer).setUint32(0, MAX_HANDLE_SZ, true);
    checkedSyscall(
      "name_to_handle_at",
      SYS.name_to_handle_at,
      fd,
      cString(""),
      handle,
      new Uint8Array(4),
      AT.EMPTY_PATH | AT_HANDLE_FID,
    );
    const bytes = new DataView(handle.buffer).getUint32(0, true);
    return `${fsidOf(fd)}:${handle.subarray(0, 8 + bytes).toHex()}`;
  }

  /** The directory with key `key` ({@link dirKey}) opened O_PATH, or null when it is gone. */
  open(key: string): number | null {
    const fd = this.#byHandle(key);
    return fd < 0 ? null : fd;
  }

  /**
   * Whether the directory with key `key` ({@link dirKey}) is gone: its handle is stale or finds
   * nothing, or leads to an inode no name links any more. Any other answer counts as still there.
   */
  isGone(key: string): boolean {
    const fd = this.#byHandle(key);
    if (fd < 0) return fd === -ESTALE || fd === -E.ENOENT;
    try {
      return statOf(fd).nlink === 0n;
    } finally {
      closeFd(fd);
    }
  }

  /** `open_by_handle_at` for `key`: an O_PATH descriptor, or minus the error number. */
  #byHandle(key: string): number {
    const at = key.lastIndexOf(":");
    const mountFd = this.#mounts.get(key.slice(0, at));
    if (mountFd === undefined) return -E.ENOENT;
    const handle = Uint8Array.fromHex(key.slice(at + 1));
    const fd = rawSyscall(SYS.open_by_handle_at, mountFd, handle, O.PATH | O.CLOEXEC);
    return fd < 0 ? -errno() : fd;
  }

  /**
   * Reads every queued event without blocking and calls `onEntry` for each new entry that is
   * `wanted` and whose directory still exists.
   */
  drain(wanted: Wanted, onEntry: (entry: NewEntry) => void): DrainResult {
    const encoder = new TextEncoder();
    const lengths = new Set([...wanted.names].map((name) => encoder.encode(name).length));
    let overflowed = false;
    for (;;) {
      const n = libc().read(this.fd, this.#buf, BigInt(this.#buf.length));
      if (n < 0) {
        const code = errno();
        if (code === E.EAGAIN) return { overflowed };
        if (code === E.EINTR) continue;
        throw new OsError("read(fanotify)", code);
      }
      const view = new DataView(this.#buf.buffer, 0, n);
      for (let at = 0; at + METADATA_SIZE <= n;) {
        const length = view.getUint32(at, true);
        const mask = Number(view.getBigUint64(at + 8, true));
        if (mask & FAN_Q_OVERFLOW) overflowed = true;
        else {
          try {
            this.#entry(view, at, length, mask, wanted, lengths, onEntry);
          } catch {
            overflowed = true; // An entry that cannot be resolved: look at everything again.
          }
        }
        at += length;
      }
    }
  }

  #entry(
    view: DataView,
    at: number,
    length: number,
    mask: number,
    wanted: Wanted,
    lengths: Set<number>,
    onEntry: (entry: NewEntry) => void,
  ): void {
    // Attributes matter only in the directories asked for, and this process's own changes there
    // (what it strips, grants and moves aside) not at all.
    const changed = (mask & (FAN_CREATE | FAN_MOVED_TO | FAN_MODIFY | FAN_CLOSE_WRITE)) === 0;
    const pid = view.getInt32(at + PID_OFFSET, true);
    const own = pid === Deno.pid;
    const movedDir = wanted.movedDirs && !own && (mask & FAN_MOVED_TO) !== 0 &&
      (mask & FAN_ONDIR) !== 0;
    if (changed && (wanted.dirs.size === 0 || own)) return;
    const info = at + view.getUint16(at + 6, true);
    if (info >= at + length || view.getUint8(info) !== INFO_DFID_NAME) return;
    const fsid = Array.from(this.#buf.subarray(info + 4, info + 12)).join(",");
    const handleBytes = view.getUint32(info + HANDLE_OFFSET, true);
    const nameStart = info + HANDLE_OFFSET + 8 + handleBytes;
    const nameEnd = this.#buf.indexOf(0, nameStart);
    const handle = this.#buf.subarray(info + HANDLE_OFFSET, nameStart);
    const key = wanted.dirs.size > 0 ? `${fsid}:${handle.toHex()}` : "";
    const dirKey = wanted.dirs.has(key) ? key : undefined;
    if (changed && dirKey === undefined) return;
    // Most entries are neither: not worth decoding.
    if (dirKey === undefined && !movedDir && !lengths.has(nameEnd - nameStart)) return;
    const name = this.#decoder.decode(this.#buf.subarray(nameStart, nameEnd));
    const named = wanted.names.has(name);
    if ((dirKey === undefined && !named && !movedDir) || (own && !named)) return;
    const mountFd = this.#mounts.get(fsid);
    if (mountFd === undefined) return;
    const dirFd = rawSyscall(SYS.open_by_handle_at, mountFd, handle.slice(), O.PATH | O.CLOEXEC);
    if (dirFd < 0) {
      const code = errno();
      if (code === ESTALE || code === E.ENOENT) return; // The directory is gone: so is the entry.
      throw new OsError(`open_by_handle_at(${name})`, code);
    }
    try {
      const dir = pathOf(dirFd);
      if (dir !== null) {
        onEntry({
          dir,
          dirFd,
          name,
          renamed: (mask & FAN_MOVED_TO) !== 0,
          changed,
          dirKey,
          pid,
        });
      }
    } finally {
      closeFd(dirFd);
    }
  }

  /** Releases the group and its descriptors. */
  close(): void {
    for (const fd of this.#mounts.values()) closeFd(fd);
    this.#mounts.clear();
    closeFd(this.fd);
  }
}
