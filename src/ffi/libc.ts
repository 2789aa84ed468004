/**
 * The small slice of libc that uexec needs, bound through Deno FFI.
 *
 * Every symbol here is synchronous and runs on the calling thread, except `epoll_wait_async`,
 * which runs on a pool thread and must only ever wait: never restrict, spawn or change
 * credentials through it. Each thread (main or worker) that imports this module gets its own
 * binding, opened on first use.
 *
 * errno is only right if nothing runs on this thread between a failed call and its read: a
 * Deno op may wait on a contended lock, and that wait's futex call sets errno (to EAGAIN). So
 * every call whose failure is read from errno returns a 32-bit result, which comes back as a
 * small integer (a 64-bit one comes back as a newly allocated BigInt, and an allocation may
 * start a garbage collection), and `errno()` is a plain load, no op. The calls that return a
 * size (`read`, `write`, `pread`, `pwrite`, `syscall`) are declared with 32-bit results: every
 * size uexec passes or asks back is far below 2^31.
 *
 * @module
 */

const symbols = {
  posix_openpt: { parameters: ["i32"], result: "i32" },
  grantpt: { parameters: ["i32"], result: "i32" },
  unlockpt: { parameters: ["i32"], result: "i32" },
  ptsname_r: { parameters: ["i32", "buffer", "usize"], result: "i32" },
  ioctl: { parameters: ["i32", "u64", "buffer"], result: "i32" },
  pipe2: { parameters: ["buffer", "i32"], result: "i32" },
  read: { parameters: ["i32", "buffer", "usize"], result: "i32" },
  write: { parameters: ["i32", "buffer", "usize"], result: "i32" },
  pread: { name: "pread64", parameters: ["i32", "buffer", "usize", "i64"], result: "i32" },
  pwrite: { name: "pwrite64", parameters: ["i32", "buffer", "usize", "i64"], result: "i32" },
  fstatat: { parameters: ["i32", "buffer", "buffer", "i32"], result: "i32" },
  close: { parameters: ["i32"], result: "i32" },
  open: { parameters: ["buffer", "i32"], result: "i32" },
  mkdir: { parameters: ["buffer", "u32"], result: "i32" },
  rmdir: { parameters: ["buffer"], result: "i32" },
  mmap: { parameters: ["pointer", "usize", "i32", "i32", "i32", "i64"], result: "pointer" },
  mprotect: { parameters: ["pointer", "usize", "i32"], result: "i32" },
  opendir: { parameters: ["buffer"], result: "pointer" },
  readdir: { parameters: ["pointer"], result: "pointer" },
  closedir: { parameters: ["pointer"], result: "i32" },
  kill: { parameters: ["i32", "i32"], result: "i32" },
  chown: { parameters: ["buffer", "u32", "u32"], result: "i32" },
  waitpid: { parameters: ["i32", "buffer", "i32"], result: "i32" },
  waitid: { parameters: ["i32", "i32", "buffer", "i32"], result: "i32" },
  syscall: { parameters: ["i64", "i64", "i64", "i64", "i64", "i64", "i64"], result: "i32" },
  eventfd: { parameters: ["u32", "i32"], result: "i32" },
  epoll_create1: { parameters: ["i32"], result: "i32" },
  epoll_ctl: { parameters: ["i32", "i32", "i32", "buffer"], result: "i32" },
  epoll_wait: { parameters: ["i32", "buffer", "i32", "i32"], result: "i32" },
  epoll_wait_async: {
    name: "epoll_wait",
    parameters: ["i32", "buffer", "i32", "i32"],
    result: "i32",
    nonblocking: true,
  },
  __errno_location: { parameters: [], result: "pointer" },
  posix_spawnp: {
    parameters: ["buffer", "buffer", "buffer", "buffer", "buffer", "buffer"],
    result: "i32",
  },
  posix_spawn_file_actions_init: { parameters: ["buffer"], result: "i32" },
  posix_spawn_file_actions_destroy: { parameters: ["buffer"], result: "i32" },
  posix_spawn_file_actions_addopen: {
    parameters: ["buffer", "i32", "buffer", "i32", "u32"],
    result: "i32",
  },
  posix_spawn_file_actions_adddup2: { parameters: ["buffer", "i32", "i32"], result: "i32" },
  posix_spawn_file_actions_addclosefrom_np: { parameters: ["buffer", "i32"], result: "i32" },
  posix_spawn_file_actions_addchdir_np: { parameters: ["buffer", "buffer"], result: "i32" },
  posix_spawnattr_init: { parameters: ["buffer"], result: "i32" },
  posix_spawnattr_destroy: { parameters: ["buffer"], result: "i32" },
  posix_spawnattr_setflags: { parameters: ["buffer", "i16"], result: "i32" },
  posix_spawnattr_setsigdefault: { parameters: ["buffer", "buffer"], result: "i32" },
  posix_spawnattr_setsigmask: { parameters: ["buffer", "buffer"], result: "i32" },
  sigfillset: { parameters: ["buffer"], result: "i32" },
  sigemptyset: { parameters: ["buffer"], result: "i32" },
} as const;

/** The bound libc symbols. */
export type Libc = Deno.DynamicLibrary<typeof symbols>["symbols"];

let lib: Deno.DynamicLibrary<typeof symbols> | undefined;

/**
 * This thread's errno, seen through a typed array over its address (the thread's for life;
 * module state is per thread), found when the binding opens: reading it is then a plain load,
 * where an `UnsafePointerView` read would be an op (see the module doc).
 */
let errnoCell: Int32Array | null = null;

/** The libc binding for this thread, opened on first use. */
export function libc(): Libc {
  if (lib === undefined) {
    lib = Deno.dlopen("libc.so.6", symbols);
    const p = lib.symbols.__errno_location();
    if (p !== null) errnoCell = new Int32Array(Deno.UnsafePointerView.getArrayBuffer(p, 4));
  }
  return lib.symbols;
}

/** A system call argument: a number, a bigint, or a buffer passed by address. */
export type SyscallArg = number | bigint | Uint8Array | null;

function toI64(arg: SyscallArg): bigint {
  if (arg === null) return 0n;
  if (arg instanceof Uint8Array) {
    return BigInt(Deno.UnsafePointer.value(Deno.UnsafePointer.of(arg as Uint8Array<ArrayBuffer>)));
  }
  return BigInt(arg);
}

/** `syscall(nr, ...args)` on this thread; the raw result (-1 means: read `errno()`). */
export function rawSyscall(nr: number, ...args: SyscallArg[]): number {
  return libc().syscall(
    BigInt(nr),
    toI64(args[0] ?? 0),
    toI64(args[1] ?? 0),
    toI64(args[2] ?? 0),
    toI64(args[3] ?? 0),
    toI64(args[4] ?? 0),
    toI64(args[5] ?? 0),
  );
}

/** errno of the last failed synchronous call on this thread. Read it right after the call. */
export function errno(): number {
  return errnoCell?.[0] ?? 0;
}

/** A NUL-terminated C string. */
export function cString(s: string): Uint8Array<ArrayBuffer> {
  return new TextEncoder().encode(s + "\0");
}

const toUtf8 = new TextEncoder();

/**
 * A NULL-terminated array of pointers to NUL-terminated copies of `items` (argv, envp), the
 * strings packed in one buffer, which is pushed to `held`: keep it referenced until the call
 * that reads them returns. (One buffer and one pointer lookup, not one of each per string:
 * 17 strings took about 45 µs apart, 14 µs packed.)
 */
export function cStringArray(items: string[], held: Uint8Array[]): Uint8Array<ArrayBuffer> {
  let bytes = 0;
  for (const s of items) bytes += 3 * s.length + 1; // UTF-8 takes at most 3 bytes per unit
  const strings = new Uint8Array(bytes);
  held.push(strings);
  const base = BigInt(Deno.UnsafePointer.value(Deno.UnsafePointer.of(strings)));
  const ptrs = new BigUint64Array(items.length + 1);
  let at = 0;
  items.forEach((s, i) => {
    ptrs[i] = base + BigInt(at);
    at += toUtf8.encodeInto(s, strings.subarray(at)).written + 1; // the NUL: zero already
  });
  return new Uint8Array(ptrs.buffer);
}

/** The entry names of a directory, read through libc (no Deno read permission involved). */
export function listDir(path: string): string[] {
  const c = libc();
  const dir = c.opendir(cString(path));
  if (dir === null) throw new OsError(`opendir(${path})`, errno());
  const names: string[] = [];
  try {
    for (let ent = c.readdir(dir); ent !== null; ent = c.readdir(dir)) {
      names.push(new Deno.UnsafePointerView(ent).getCString(D_NAME_OFFSET));
    }
  } finally {
    c.closedir(dir);
  }
  return names;
}

/** Close each of `fds`; negative entries (none held) are skipped. */
export function closeAll(fds: Iterable<number>): void {
  const c = libc();
  for (const fd of fds) if (fd >= 0) c.close(fd);
}

/** The buffer small-file reads go through on this thread (grown to the largest read asked). */
let scratch = new Uint8Array(4096);
const utf8 = new TextDecoder();

/**
 * `open(path, flags)`, through libc. When the process has no descriptor free and `room` is
 * given, `room()` is asked to give some back and the open is tried once more. The descriptor, or
 * -1 with errno set.
 */
export function openFile(path: string, flags: number, room?: () => void): number {
  const c = libc();
  const p = cString(path);
  const fd = c.open(p, flags);
  if (fd >= 0 || !room || !noDescriptorFree(errno())) return fd;
  room();
  return c.open(p, flags);
}

/**
 * The start of a small file (at most `max` bytes), read through libc; undefined if unreadable.
 * `room` as for {@link openFile}.
 */
export function readSmallFile(path: string, max = 4096, room?: () => void): string | undefined {
  const c = libc();
  const fd = openFile(path, O.CLOEXEC, room);
  if (fd < 0) return undefined;
  try {
    if (scratch.length < max) scratch = new Uint8Array(max);
    const n = c.read(fd, scratch, BigInt(max));
    return n < 0 ? undefined : utf8.decode(scratch.subarray(0, n));
  } finally {
    c.close(fd);
  }
}

/**
 * A whole file of unknown size (a procfs table), read through libc: Deno's file APIs want
 * --allow-all under /proc.
 */
export function readWholeFile(path: string): string {
  const c = libc();
  const fd = c.open(cString(path), O.CLOEXEC);
  if (fd < 0) throw new OsError(`open(${path})`, errno());
  try {
    const decoder = new TextDecoder();
    const buf = new Uint8Array(65536);
    let text = "";
    for (;;) {
      const n = c.read(fd, buf, BigInt(buf.length));
      if (n < 0) throw new OsError(`read(${path})`, errno());
      if (n === 0) return text + decoder.decode();
      text += decoder.decode(buf.subarray(0, n), { stream: true });
    }
  } finally {
    c.close(fd);
  }
}

/** Offset of `d_name` in glibc's `struct dirent` on x86_64. */
const D_NAME_OFFSET = 19;

/** errno values and flags used across uexec (x86_64 Linux). */
export const E = {
  EPERM: 1,
  ENOENT: 2,
  ESRCH: 3,
  EINTR: 4,
  EIO: 5,
  E2BIG: 7,
  ENOEXEC: 8,
  EBADF: 9,
  ECHILD: 10,
  EAGAIN: 11,
  ENOMEM: 12,
  EACCES: 13,
  EEXIST: 17,
  ENOTDIR: 20,
  EINVAL: 22,
  ENFILE: 23,
  EMFILE: 24,
  ENOSPC: 28,
  EROFS: 30,
  EPIPE: 32,
  ENODATA: 61,
  EOPNOTSUPP: 95,
} as const;

/** open(2) flags. */
export const O = {
  WRONLY: 1,
  RDWR: 2,
  CREAT: 0o100,
  EXCL: 0o200,
  NOCTTY: 0o400,
  NONBLOCK: 0o4000,
  DIRECTORY: 0o200000,
  NOFOLLOW: 0o400000,
  CLOEXEC: 0o2000000,
  PATH: 0o10000000,
} as const;

/** The `dirfd` that makes *at() calls resolve paths from the working directory. */
export const AT_FDCWD = -100;

/** Flags of the *at() calls. */
export const AT = { SYMLINK_NOFOLLOW: 0x100, REMOVEDIR: 0x200, EMPTY_PATH: 0x1000 } as const;

/** The size of x86_64's `struct stat`, for the buffers stat calls fill. */
export const STAT_SIZE = 144;

/** The file type bits of `st_mode`. */
export const S_IFMT = 0o170000;

/** File types, as `fileType` gives them. */
export const S_IF = {
  REG: 0o100000,
  DIR: 0o040000,
  LNK: 0o120000,
  CHR: 0o020000,
  FIFO: 0o010000,
  SOCK: 0o140000,
} as const;

/** The file type (`st_mode & S_IFMT`, one of {@link S_IF}) in a `struct stat` a call filled. */
export function fileType(stat: Uint8Array): number {
  return new DataView(stat.buffer, stat.byteOffset).getUint32(24, true) & S_IFMT;
}

/** Thrown when a libc call or system call fails; carries errno. */
export class OsError extends Error {
  /** Create an error for `call` failing with `errno`. */
  constructor(readonly call: string, readonly errno: number) {
    super(`${call} failed: ${errnoName(errno)} (errno ${errno})`);
    this.name = "OsError";
  }
}

/** Whether errno `code` says the process (EMFILE) or the system (ENFILE) has no descriptor free. */
export function noDescriptorFree(code: number): boolean {
  return code === E.EMFILE || code === E.ENFILE;
}

/**
 * Whether `err` is a failure to get a file descriptor (EMFILE, ENFILE), however it was
 * reported: an {@link OsError} from our FFI calls, one of Deno's errors (its `code`), or an error
 * that crossed from a worker thread as a message.
 */
export function outOfDescriptors(err: unknown): boolean {
  if (err instanceof OsError) return noDescriptorFree(err.errno);
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: unknown }).code;
  return code === "EMFILE" || code === "ENFILE" ||
    /\bE[MN]FILE\b|Too many open files/.test(err.message);
}

/**
 * What to hand `console.error` for `err`: the error itself (whose stack it prints), or, for a
 * failure to get a descriptor, its one-line text. Printing a stack makes Deno source-map it,
 * which may read an emitted module from its cache: with no descriptor free, Deno 2.9.6 then
 * falls back to parsing the module, whose stack-size probe (stacker) cannot open
 * `/proc/self/maps` and aborts the whole process. Seen when the git guard reported a `.git` it
 * could not open at the descriptor limit (tests/e2e/robust_test.ts).
 */
export function loggable(err: unknown): unknown {
  return outOfDescriptors(err) ? String(err) : err;
}

/** The symbolic name of an errno value, e.g. `ENOENT`. */
export function errnoName(code: number): string {
  return Object.entries(E).find(([, value]) => value === code)?.[0] ?? `errno ${code}`;
}

/** Throw an `OsError` for `call` when `result` is negative, reading errno. */
export function check(call: string, result: number): number {
  if (result < 0) throw new OsError(call, errno());
  return result;
}
