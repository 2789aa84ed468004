/**
 * Whether a terminal's foreground job is waiting for input, seen from the PTY master: the
 * foreground process group (`tcgetpgrp` on the master), and for each of its processes in the
 * session's tree, whether `/proc/<pid>/syscall` shows it blocked reading a descriptor that is
 * this terminal (the descriptor's device is the PTY's slave): in `read`, or waiting for it to be
 * readable in `poll`/`ppoll`, `select`/`pselect6` (the descriptor sets, read from
 * `/proc/<pid>/mem`) or `epoll_wait` (the epoll's interest list, from `/proc/<pid>/fdinfo`), as
 * readline-based REPLs and event loops do. Also whether the terminal echoes input (ECHO off: a
 * password prompt).
 *
 * A point check: a few ioctls and small /proc reads, all synchronous and through libc (Deno
 * refuses /proc reads of other processes without `--allow-all`). It must never wait, never
 * write to the terminal and never touch a process; the descriptors it holds are closed with it.
 *
 * @module
 */

import { AT_FDCWD, cString, libc, O, rawSyscall, readSmallFile } from "../ffi/libc.ts";

const TCGETS = 0x5401;
const TIOCGPGRP = 0x540f;
const TIOCGPTN = 0x80045430;
/** `c_lflag` offset in the kernel's struct termios, and its ECHO bit. */
const LFLAG = 12;
const ECHO = 0o10;
const SYS = {
  read: 0,
  poll: 7,
  pread64: 17,
  select: 23,
  epoll_wait: 232,
  pselect6: 270,
  ppoll: 271,
  epoll_pwait: 281,
  epoll_pwait2: 441,
  newfstatat: 262,
} as const;
const POLLIN = 1;
const O_DIRECTORY = 0o200000;
const EPOLLIN = 1;
/** Descriptor sets and poll arrays larger than this are not inspected. */
const MAX_WATCHED = 1024;
/** `st_rdev` offset in x86_64's struct stat (144 bytes). */
const ST_RDEV = 40;
const STAT_SIZE = 144;
/** The first major number of UNIX98 PTY slaves; each major holds 256 of them. */
const PTY_SLAVE_MAJOR = 136;

/** Buffers reused by every ask (asks are synchronous and never nest). */
const decoder = new TextDecoder();
const termios = new Uint8Array(60);
const termiosView = new DataView(termios.buffer);
const stat = new Uint8Array(STAT_SIZE);
const statView = new DataView(stat.buffer);

/** What a terminal's foreground job is doing about input. */
export interface TerminalInput {
  /** True when a foreground process is blocked reading the terminal. */
  waiting: boolean;
  /** False when the terminal does not echo input (a password prompt). */
  echo: boolean;
}

function ioctlInt(fd: number, request: number): number | undefined {
  const out = new Int32Array(1);
  const rc = libc().ioctl(fd, BigInt(request), new Uint8Array(out.buffer));
  return rc < 0 ? undefined : out[0];
}

/** The device number (`st_rdev`) of the slave of PTY master `master`. */
function slaveDevice(master: number): bigint | undefined {
  const n = ioctlInt(master, TIOCGPTN);
  if (n === undefined) return undefined;
  const major = PTY_SLAVE_MAJOR + (n >> 8), minor = n & 0xff;
  return BigInt(minor | (major << 8));
}

/** The device number of what `path` leads to (following a /proc fd link to the open file). */
function deviceOf(path: string): bigint | undefined {
  if (rawSyscall(SYS.newfstatat, AT_FDCWD, cString(path), stat, 0) < 0) return undefined;
  return statView.getBigUint64(ST_RDEV, true);
}

/** The fields of `/proc/<pid>/stat` after the command name (field 3 on). */
function statFields(pid: number): string[] | undefined {
  const stat = readSmallFile(`/proc/${pid}/stat`, 1024);
  return stat === undefined ? undefined : stat.slice(stat.lastIndexOf(")") + 2).split(" ");
}

/**
 * Pids of `leader` and its descendants, through `/proc/<pid>/task/<pid>/children` (children of
 * the main threads; processes reparented away from the tree are not found).
 */
export function processTree(leader: number): number[] {
  const tree: number[] = [];
  const todo = [leader];
  while (todo.length > 0) {
    const pid = todo.pop()!;
    tree.push(pid);
    const children = readSmallFile(`/proc/${pid}/task/${pid}/children`, 65536);
    for (const c of children?.split(" ") ?? []) if (c) todo.push(Number(c));
  }
  return tree;
}

/** `length` bytes of the memory of `pid` at `address`; undefined if unreadable. */
function readMemory(pid: number, address: bigint, length: number): Uint8Array | undefined {
  const c = libc();
  const fd = c.open(cString(`/proc/${pid}/mem`), O.CLOEXEC);
  if (fd < 0) return undefined;
  try {
    const buf = new Uint8Array(length);
    return rawSyscall(SYS.pread64, fd, buf, length, address) === length ? buf : undefined;
  } finally {
    c.close(fd);
  }
}

/** The descriptors an `fd_set` of `nfds` bits at `address` in `pid` holds. */
function fdSet(pid: number, address: bigint, nfds: number): number[] {
  if (address === 0n || nfds <= 0 || nfds > MAX_WATCHED) return [];
  const bits = readMemory(pid, address, Math.ceil(nfds / 64) * 8);
  const fds: number[] = [];
  for (let fd = 0; bits && fd < nfds; fd++) if (bits[fd >> 3] & (1 << (fd & 7))) fds.push(fd);
  return fds;
}

/** The descriptors polled for input in a `struct pollfd` array of `n` at `address` in `pid`. */
function pollFds(pid: number, address: bigint, n: number): number[] {
  if (n <= 0 || n > MAX_WATCHED) return [];
  const raw = readMemory(pid, address, n * 8);
  if (!raw) return [];
  const view = new DataView(raw.buffer);
  const fds: number[] = [];
  for (let i = 0; i < n; i++) {
    if (view.getInt16(i * 8 + 4, true) & POLLIN) fds.push(view.getInt32(i * 8, true));
  }
  return fds;
}

/** The descriptors an epoll instance `epfd` of `pid` watches for input. */
function epollFds(pid: number, epfd: number): number[] {
  const info = readSmallFile(`/proc/${pid}/fdinfo/${epfd}`, 65536) ?? "";
  const fds: number[] = [];
  for (const m of info.matchAll(/^tfd:\s*(\d+)\s+events:\s*([0-9a-f]+)/gm)) {
    if (parseInt(m[2], 16) & EPOLLIN) fds.push(Number(m[1]));
  }
  return fds;
}

/**
 * The descriptors `pid` is blocked waiting to read, per `syscall` (the text of its
 * `/proc/<pid>/syscall`).
 */
function awaitedFds(pid: number, syscall: string | undefined): number[] {
  const fields = syscall?.trim().split(" ");
  if (!fields || !/^\d+$/.test(fields[0])) return []; // "running", or not blocked
  const nr = Number(fields[0]);
  const arg = (i: number) => BigInt(fields[i + 1]);
  switch (nr) {
    case SYS.read:
      return [Number(arg(0))];
    case SYS.poll:
    case SYS.ppoll:
      return pollFds(pid, arg(0), Number(arg(1)));
    case SYS.select:
    case SYS.pselect6:
      return fdSet(pid, arg(1), Number(arg(0)));
    case SYS.epoll_wait:
    case SYS.epoll_pwait:
    case SYS.epoll_pwait2:
      return epollFds(pid, Number(arg(0)));
    default:
      return [];
  }
}

/** Whether `pid` is blocked waiting to read a descriptor whose device is `tty`. */
function readingTerminal(pid: number, tty: bigint): boolean {
  return awaitedFds(pid, readSmallFile(`/proc/${pid}/syscall`, 256))
    .some((fd) => deviceOf(`/proc/${pid}/fd/${fd}`) === tty);
}

/**
 * The foreground group leader's `/proc/<pid>/syscall` and `/proc/<pid>/fd`, held open between
 * asks: re-reading them skips two /proc path walks (half the cost of an ask). They stay bound to
 * that process, so a reused pid never answers for it.
 */
class LeaderFiles {
  readonly syscall: number;
  readonly fdDir: number;
  #buf = new Uint8Array(256);

  constructor(readonly pid: number) {
    const c = libc();
    this.syscall = c.open(cString(`/proc/${pid}/syscall`), O.CLOEXEC);
    this.fdDir = c.open(cString(`/proc/${pid}/fd`), O.CLOEXEC | O_DIRECTORY);
  }

  /** Whether the process is blocked waiting to read a descriptor whose device is `tty`. */
  reading(tty: bigint): boolean {
    if (this.syscall < 0 || this.fdDir < 0) return readingTerminal(this.pid, tty);
    const n = rawSyscall(SYS.pread64, this.syscall, this.#buf, this.#buf.length, 0);
    if (n <= 0) return false;
    // Not blocked in a system call ("running"): nothing to parse.
    if (this.#buf[0] < 0x30 || this.#buf[0] > 0x39) return false;
    const text = decoder.decode(this.#buf.subarray(0, n));
    return awaitedFds(this.pid, text).some((fd) =>
      rawSyscall(SYS.newfstatat, this.fdDir, cString(String(fd)), stat, 0) === 0 &&
      statView.getBigUint64(ST_RDEV, true) === tty
    );
  }

  close(): void {
    for (const fd of [this.syscall, this.fdDir]) if (fd >= 0) libc().close(fd);
  }
}

/**
 * Asks one PTY what its foreground job does about input, among the processes of the tree of
 * `leader` (the session's first process). `close` it when the session ends.
 */
export class TerminalProbe {
  #master: number;
  #leader: number;
  #tty?: bigint;
  #files?: LeaderFiles;

  constructor(master: number, leader: number) {
    this.#master = master;
    this.#leader = leader;
  }

  /** What the foreground job does about input now; undefined when the terminal is gone. */
  ask(): TerminalInput | undefined {
    if (libc().ioctl(this.#master, BigInt(TCGETS), termios) < 0) return undefined;
    const echo = (termiosView.getUint32(LFLAG, true) & ECHO) !== 0;
    const group = ioctlInt(this.#master, TIOCGPGRP);
    const tty = this.#tty ??= slaveDevice(this.#master);
    if (group === undefined || tty === undefined) return undefined;
    if (this.#files?.pid !== group) {
      this.#files?.close();
      this.#files = new LeaderFiles(group);
    }
    // The group's leader first (the usual reader, found without walking the tree); any process
    // of the foreground group belongs to the terminal's session.
    const waiting = this.#files.reading(tty) ||
      processTree(this.#leader).some((pid) =>
        pid !== group && Number(statFields(pid)?.[2]) === group && readingTerminal(pid, tty)
      );
    return { waiting, echo };
  }

  /** Release the descriptors held open. */
  close(): void {
    this.#files?.close();
    this.#files = undefined;
  }
}
