/**
 * The Linux system calls the sandbox modules issue, over the shared libc binding
 * (`src/ffi/libc.ts`): their numbers, the errno values they inspect, and checked wrappers.
 *
 * Every call is synchronous, so it runs on the calling thread: that is what makes per-thread
 * restrictions (Landlock, seccomp, credentials, namespaces) land on the spawning worker. This
 * module must never issue a call through a `nonblocking` symbol and never decide policy.
 *
 * @module
 */

import { AT_FDCWD, cString, errno, O, OsError, rawSyscall, type SyscallArg } from "../ffi/libc.ts";

/** x86_64 system call numbers used by the sandbox. */
export const SYS = {
  close: 3,
  fcntl: 72,
  readlink: 89,
  newfstatat: 262,
  ioctl: 16,
  socket: 41,
  geteuid: 107,
  getgroups: 115,
  setgroups: 116,
  getresuid: 118,
  getresgid: 120,
  capget: 125,
  capset: 126,
  setresuid: 117,
  setresgid: 119,
  prctl: 157,
  chdir: 80,
  pivot_root: 155,
  mount: 165,
  umount2: 166,
  lsetxattr: 189,
  lgetxattr: 192,
  openat: 257,
  unshare: 272,
  seccomp: 317,
  io_uring_setup: 425,
  io_uring_enter: 426,
  io_uring_register: 427,
  open_tree: 428,
  move_mount: 429,
  mount_setattr: 442,
  landlock_create_ruleset: 444,
  landlock_add_rule: 445,
  landlock_restrict_self: 446,
  fstatfs: 138,
  setxattr: 188,
  getxattr: 191,
  fchownat: 260,
  unlinkat: 263,
  linkat: 265,
  fchmodat: 268,
  fanotify_init: 300,
  fanotify_mark: 301,
  name_to_handle_at: 303,
  open_by_handle_at: 304,
  renameat2: 316,
} as const;

/** mount(2) flags. */
export const MS = {
  RDONLY: 0x1,
  NOSUID: 0x2,
  NODEV: 0x4,
  NOEXEC: 0x8,
  BIND: 0x1000,
  REC: 0x4000,
  PRIVATE: 1 << 18,
} as const;

const MOUNT_ATTR_RDONLY = 1n;
const AT_RECURSIVE = 0x8000;

/** Like `rawSyscall` but throws an `OsError` on failure. */
export function checkedSyscall(name: string, nr: number, ...args: SyscallArg[]): number {
  const r = rawSyscall(nr, ...args);
  if (r === -1) throw new OsError(name, errno());
  return r;
}

/** Opens `path` with O_PATH (no read access needed) on this thread. */
export function openPath(path: string): number {
  return checkedSyscall(
    `open(${path})`,
    SYS.openat,
    AT_FDCWD,
    cString(path),
    O.PATH | O.CLOEXEC,
    0,
  );
}

/** Closes a file descriptor; errors are ignored because nothing can be done about them. */
export function closeFd(fd: number): void {
  rawSyscall(SYS.close, fd);
}

/** `prctl(option, arg2, ...)` on this thread; throws on failure. */
export function prctl(name: string, option: number, ...args: SyscallArg[]): number {
  return checkedSyscall(name, SYS.prctl, option, ...args);
}

/** The effective uid of the calling thread. */
export function threadEuid(): number {
  return rawSyscall(SYS.geteuid);
}

/** `mount(2)` on this thread, throwing an `OsError` named `what` on failure. */
export function mount(
  what: string,
  source: string | null,
  target: string,
  fsType: string | null,
  flags: number,
  data: string | null = null,
): void {
  checkedSyscall(
    what,
    SYS.mount,
    source === null ? null : cString(source),
    cString(target),
    fsType === null ? null : cString(fsType),
    flags,
    data === null ? null : cString(data),
  );
}

/** Makes the mount at `target`, and every mount beneath it, read-only. */
export function setReadOnly(target: string): void {
  const attr = new Uint8Array(32);
  new DataView(attr.buffer).setBigUint64(0, MOUNT_ATTR_RDONLY, true);
  checkedSyscall(
    `mount_setattr(${target}, RDONLY)`,
    SYS.mount_setattr,
    AT_FDCWD,
    cString(target),
    AT_RECURSIVE,
    attr,
    attr.length,
  );
}
