/**
 * Raw Linux system calls through Deno FFI, for the sandbox modules.
 *
 * Every symbol is synchronous, so each call runs on the calling thread: that is what makes
 * per-thread restrictions (Landlock, seccomp, credentials, namespaces) land on the spawning
 * worker. libc is opened on first use, so importing this module is cheap. This module must
 * never declare a `nonblocking` symbol and never decide policy; it only issues calls.
 *
 * @module
 */

/** x86_64 system call numbers used by the sandbox. */
export const SYS = {
  close: 3,
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
  setresuid: 117,
  setresgid: 119,
  prctl: 157,
  mount: 165,
  lsetxattr: 189,
  lgetxattr: 192,
  openat: 257,
  unshare: 272,
  seccomp: 317,
  io_uring_setup: 425,
  io_uring_enter: 426,
  io_uring_register: 427,
  mount_setattr: 442,
  landlock_create_ruleset: 444,
  landlock_add_rule: 445,
  landlock_restrict_self: 446,
} as const;

/** errno values the sandbox inspects. */
export const ERRNO = {
  EPERM: 1,
  ENOENT: 2,
  ENOTDIR: 20,
  EACCES: 13,
  EROFS: 30,
  ENODATA: 61,
  EOPNOTSUPP: 95,
} as const;

const AT_FDCWD = -100;
const O_PATH = 0o10000000;
const O_CLOEXEC = 0o2000000;

const SYMBOLS = {
  syscall: {
    parameters: ["i64", "i64", "i64", "i64", "i64", "i64", "i64"],
    result: "i64",
  },
  __errno_location: { parameters: [], result: "pointer" },
} as const satisfies Deno.ForeignLibraryInterface;

let libc: Deno.DynamicLibrary<typeof SYMBOLS> | undefined;

function lib(): Deno.DynamicLibrary<typeof SYMBOLS>["symbols"] {
  libc ??= Deno.dlopen("libc.so.6", SYMBOLS);
  return libc.symbols;
}

/** A system call argument: a number, a bigint, or a buffer passed by address. */
export type Arg = number | bigint | Uint8Array | null;

function toI64(arg: Arg): bigint {
  if (arg === null) return 0n;
  if (arg instanceof Uint8Array) {
    return BigInt(Deno.UnsafePointer.value(Deno.UnsafePointer.of(arg as Uint8Array<ArrayBuffer>)));
  }
  return BigInt(arg);
}

/** The calling thread's `errno`; read it right after the call that set it. */
export function errno(): number {
  const where = lib().__errno_location();
  if (where === null) return 0;
  return new Deno.UnsafePointerView(where).getInt32();
}

/** Calls `syscall(nr, ...args)` on this thread; returns the raw result (-1 means see errno). */
export function rawSyscall(nr: number, ...args: Arg[]): number {
  const a = [0, 1, 2, 3, 4, 5].map((i) => toI64(args[i] ?? 0));
  return Number(lib().syscall(BigInt(nr), a[0], a[1], a[2], a[3], a[4], a[5]));
}

/** An OS error from a sandbox system call, carrying the errno. */
export class SyscallError extends Error {
  constructor(readonly call: string, readonly errno: number) {
    super(`${call} failed: ${errnoName(errno)} (errno ${errno})`);
    this.name = "SyscallError";
  }
}

/** The symbolic name of an errno value, when it is one the sandbox knows. */
export function errnoName(code: number): string {
  const hit = Object.entries(ERRNO).find(([, v]) => v === code);
  return hit ? hit[0] : `errno ${code}`;
}

/** Like {@link rawSyscall} but throws a {@link SyscallError} on failure. */
export function checkedSyscall(name: string, nr: number, ...args: Arg[]): number {
  const r = rawSyscall(nr, ...args);
  if (r === -1) throw new SyscallError(name, errno());
  return r;
}

/** A NUL-terminated copy of a string, for path arguments. */
export function cString(s: string): Uint8Array {
  return new TextEncoder().encode(`${s}\0`);
}

/** Opens `path` with O_PATH (no read access needed) on this thread. */
export function openPath(path: string): number {
  return checkedSyscall(
    `open(${path})`,
    SYS.openat,
    AT_FDCWD,
    cString(path),
    O_PATH | O_CLOEXEC,
    0,
  );
}

/** Closes a file descriptor; errors are ignored because nothing can be done about them. */
export function closeFd(fd: number): void {
  rawSyscall(SYS.close, fd);
}

/** `prctl(option, arg2, ...)` on this thread; throws on failure. */
export function prctl(name: string, option: number, ...args: Arg[]): number {
  return checkedSyscall(name, SYS.prctl, option, ...args);
}

/** The effective uid of the calling thread. */
export function threadEuid(): number {
  return rawSyscall(SYS.geteuid);
}
