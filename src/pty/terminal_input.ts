/**
 * Whether a terminal's foreground job is waiting for input, seen from the PTY master: the
 * foreground process group (`tcgetpgrp` on the master), and for each of its processes in the
 * session's tree, whether `/proc/<pid>/syscall` shows it blocked reading a descriptor that is
 * this terminal (the descriptor's device is the PTY's slave, or `/dev/tty` in a process whose
 * controlling terminal the PTY is): in `read`, or waiting for it to be readable in
 * `poll`/`ppoll`, `select`/`pselect6` (the descriptor sets, read from `/proc/<pid>/mem`) or
 * `epoll_wait` (the epoll's interest list, from `/proc/<pid>/fdinfo`), as readline-based REPLs
 * and event loops do. Also whether what is typed is shown: not when the terminal has ECHO off in
 * line mode (a password prompt); a program in raw mode (ICANON off: a REPL's line editor, an
 * editor) turns the terminal's ECHO off and shows what is typed itself.
 *
 * A point check: a few ioctls and small /proc reads, all synchronous and through libc (Deno
 * refuses /proc reads of other processes without `--allow-all`). It must never wait, never
 * write to the terminal and never touch a process; the descriptors it holds are closed with it.
 *
 * @module
 */

import { AT_FDCWD, closeAll, cString, libc, O, readSmallFile, STAT_SIZE } from "../ffi/libc.ts";

const TCGETS = 0x5401n;
const TIOCGPGRP = 0x540fn;
const TIOCGPTN = 0x80045430n;
/** `c_lflag` offset in the kernel's struct termios, and its ICANON and ECHO bits. */
const LFLAG = 12;
const ICANON = 0o2;
const ECHO = 0o10;
const SYS = {
  read: 0,
  poll: 7,
  select: 23,
  epoll_wait: 232,
  pselect6: 270,
  ppoll: 271,
  epoll_pwait: 281,
  epoll_pwait2: 441,
} as const;
const POLLIN = 1;
const EPOLLIN = 1;
/** Descriptor sets and poll arrays larger than this are not inspected. */
const MAX_WATCHED = 1024;
/** `st_rdev` offset in x86_64's struct stat. */
const ST_RDEV = 40;
/** The major number of UNIX98 PTY slaves. */
const PTY_SLAVE_MAJOR = 136;
/** `/dev/tty` (major 5, minor 0), in the encoding of `st_rdev` and of `tty_nr` in /proc stat. */
const DEV_TTY = 5 << 8;
const SPACE = 0x20;

/** Buffers reused by every ask (asks are synchronous and never nest). */
const termios = new Uint8Array(60);
const termiosView = new DataView(termios.buffer);
const stat = new Uint8Array(STAT_SIZE);
const statView = new DataView(stat.buffer);
const int = new Int32Array(1);
const intBytes = new Uint8Array(int.buffer);
/** A `/proc/<pid>/syscall`: "nr arg0 ... arg5 sp pc", each argument as 0x-prefixed hex. */
const syscallText = new Uint8Array(256);
const SYSCALL_TEXT_SIZE = BigInt(syscallText.length);
/** The first two arguments of the call parsed from `syscallText` (NaN: absent or past 2^53). */
const args = new Float64Array(2);
/** Descriptor sets and poll arrays read from a process's memory. */
const memory = new Uint8Array(MAX_WATCHED * 8);
const memoryView = new DataView(memory.buffer);
/** NUL-terminated descriptor numbers, the names in a `/proc/<pid>/fd` directory. */
const fdNames: Uint8Array[] = [];

/** What a terminal's foreground job is doing about input. */
export interface TerminalInput {
  /** True when a foreground process is blocked reading the terminal. */
  waiting: boolean;
  /** False when what is typed is not shown: ECHO off in line mode (a password prompt). */
  echo: boolean;
}

function ioctlInt(fd: number, request: bigint): number | undefined {
  return libc().ioctl(fd, request, intBytes) < 0 ? undefined : int[0];
}

/**
 * The device number (`st_rdev`) of the slave of PTY master `master`: major 136, minor the PTY's
 * index (up to 2^20), in Linux's encoding (minor's low byte, major << 8, minor's rest << 12).
 */
function slaveDevice(master: number): number | undefined {
  const n = ioctlInt(master, TIOCGPTN);
  if (n === undefined) return undefined;
  return ((n & 0xff) | (PTY_SLAVE_MAJOR << 8) | ((n & ~0xff) << 12)) >>> 0;
}

/**
 * Whether `path` (from `dir`), a /proc fd link of `pid`, leads to the terminal whose device is
 * `tty`: its slave, or `/dev/tty` (which password prompts open: getpass, sudo, ssh) when that is
 * the process's controlling terminal.
 */
function isTerminal(pid: number, dir: number, path: Uint8Array, tty: number): boolean {
  if (libc().fstatat(dir, path, stat, 0) !== 0 || statView.getUint32(ST_RDEV + 4, true) !== 0) {
    return false;
  }
  const device = statView.getUint32(ST_RDEV, true);
  return device === tty || (device === DEV_TTY && Number(statFields(pid)?.[4]) === tty);
}

/** The entry for descriptor `fd` in a `/proc/<pid>/fd` directory, as a C string. */
function fdName(fd: number): Uint8Array {
  if (fd >= 256) return cString(String(fd));
  return fdNames[fd] ??= cString(String(fd));
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

/** Read `length` bytes of the memory of `pid` at `address` into `memory`; false if unreadable. */
function readMemory(pid: number, address: number, length: number): boolean {
  if (!Number.isSafeInteger(address)) return false;
  const c = libc();
  const fd = c.open(cString(`/proc/${pid}/mem`), O.CLOEXEC);
  if (fd < 0) return false;
  try {
    return c.pread(fd, memory, BigInt(length), BigInt(address)) === length;
  } finally {
    c.close(fd);
  }
}

/** The descriptors an `fd_set` of `nfds` bits at `address` in `pid` holds. */
function fdSet(pid: number, address: number, nfds: number): number[] {
  if (address === 0 || !(nfds > 0 && nfds <= MAX_WATCHED)) return [];
  if (!readMemory(pid, address, Math.ceil(nfds / 64) * 8)) return [];
  const fds: number[] = [];
  for (let fd = 0; fd < nfds; fd++) if (memory[fd >> 3] & (1 << (fd & 7))) fds.push(fd);
  return fds;
}

/** The descriptors polled for input in a `struct pollfd` array of `n` at `address` in `pid`. */
function pollFds(pid: number, address: number, n: number): number[] {
  if (!(n > 0 && n <= MAX_WATCHED) || !readMemory(pid, address, n * 8)) return [];
  const fds: number[] = [];
  for (let i = 0; i < n; i++) {
    if (memoryView.getInt16(i * 8 + 4, true) & POLLIN) fds.push(memoryView.getInt32(i * 8, true));
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

function hexDigit(b: number): number {
  if (b >= 0x30 && b <= 0x39) return b - 0x30;
  if (b >= 0x61 && b <= 0x66) return b - 0x57;
  return -1;
}

/**
 * The number of the system call the process whose `/proc/<pid>/syscall` is the first `n` bytes
 * of `syscallText` is blocked in, with its first arguments in `args`; -1 when it is running or
 * not in a system call ("running", "-1 sp pc").
 */
function blockedCall(n: number): number {
  let i = 0, nr = 0;
  for (; i < n && syscallText[i] >= 0x30 && syscallText[i] <= 0x39; i++) {
    nr = nr * 10 + syscallText[i] - 0x30;
  }
  if (i === 0 || i >= n || syscallText[i] !== SPACE) return -1;
  for (let k = 0; k < args.length; k++) {
    args[k] = NaN;
    if (i >= n || syscallText[i] !== SPACE) continue;
    i++;
    if (syscallText[i] === 0x30 && syscallText[i + 1] === 0x78) i += 2; // "0x"
    let value = 0, digits = 0;
    for (let d; i < n && (d = hexDigit(syscallText[i])) >= 0; i++, digits++) value = value * 16 + d;
    if (digits > 0 && value <= Number.MAX_SAFE_INTEGER) args[k] = value;
  }
  return nr;
}

/**
 * The descriptors `pid` is blocked waiting to read, per the first `n` bytes of `syscallText`
 * (its `/proc/<pid>/syscall`).
 */
function awaitedFds(pid: number, n: number): number[] {
  switch (blockedCall(n)) {
    case SYS.read:
      return Number.isNaN(args[0]) ? [] : [args[0]];
    case SYS.poll:
    case SYS.ppoll:
      return pollFds(pid, args[0], args[1]);
    case SYS.select:
    case SYS.pselect6:
      return fdSet(pid, args[1], args[0]);
    case SYS.epoll_wait:
    case SYS.epoll_pwait:
    case SYS.epoll_pwait2:
      return Number.isNaN(args[0]) ? [] : epollFds(pid, args[0]);
    default:
      return [];
  }
}

/** Whether `pid` is blocked waiting to read the terminal whose device is `tty`. */
function readingTerminal(pid: number, tty: number): boolean {
  const c = libc();
  const fd = c.open(cString(`/proc/${pid}/syscall`), O.CLOEXEC);
  if (fd < 0) return false;
  let n;
  try {
    n = c.read(fd, syscallText, SYSCALL_TEXT_SIZE);
  } finally {
    c.close(fd);
  }
  return awaitedFds(pid, n).some((fd) =>
    isTerminal(pid, AT_FDCWD, cString(`/proc/${pid}/fd/${fd}`), tty)
  );
}

/**
 * How many foreground leaders' files are held open at once on this thread (two descriptors
 * each): the most recently asked. Holding them makes an ask about 5 us instead of 13.5 (opening
 * a /proc file and walking a /proc fd path cost more than the reads); the cap keeps the
 * descriptors bounded however many sessions live (a reopened leader costs one slow ask).
 */
export const MAX_HELD = 256;
/** The leaders whose files are open, least recently asked first. */
const held = new Set<LeaderFiles>();

/**
 * The foreground group leader's `/proc/<pid>/syscall` and `/proc/<pid>/fd`, held open between
 * asks while among the MAX_HELD most recently asked. Opened right after the terminal named the
 * pid as its foreground group, they stay bound to that process, so a reused pid never answers
 * for it.
 */
class LeaderFiles {
  #syscall = -1;
  #fdDir = -1;

  constructor(readonly pid: number) {}

  /** Whether the process is blocked waiting to read the terminal whose device is `tty`. */
  reading(tty: number): boolean {
    if (!this.#hold()) return readingTerminal(this.pid, tty);
    const n = libc().pread(this.#syscall, syscallText, SYSCALL_TEXT_SIZE, 0n);
    return awaitedFds(this.pid, n).some((fd) => isTerminal(this.pid, this.#fdDir, fdName(fd), tty));
  }

  /** Release the descriptors (a later ask opens them again). */
  close(): void {
    held.delete(this);
    closeAll([this.#syscall, this.#fdDir]);
    this.#syscall = this.#fdDir = -1;
  }

  /** Open the files unless they are open, as the most recently asked; false if they cannot be. */
  #hold(): boolean {
    if (held.delete(this)) {
      held.add(this);
      return true;
    }
    if (held.size >= MAX_HELD) held.values().next().value!.close();
    const c = libc();
    this.#syscall = c.open(cString(`/proc/${this.pid}/syscall`), O.CLOEXEC);
    this.#fdDir = c.open(cString(`/proc/${this.pid}/fd`), O.CLOEXEC | O.DIRECTORY);
    if (this.#syscall < 0 || this.#fdDir < 0) {
      this.close();
      return false;
    }
    held.add(this);
    return true;
  }
}

/**
 * Asks one PTY what its foreground job does about input, among the processes of the tree of
 * `leader` (the session's first process). `close` it when the session ends.
 */
export class TerminalProbe {
  #master: number;
  #leader: number;
  #tty?: number;
  #files?: LeaderFiles;

  constructor(master: number, leader: number) {
    this.#master = master;
    this.#leader = leader;
  }

  /** What the foreground job does about input now; undefined when the terminal is gone. */
  ask(): TerminalInput | undefined {
    if (libc().ioctl(this.#master, TCGETS, termios) < 0) return undefined;
    const lflag = termiosView.getUint32(LFLAG, true);
    const echo = (lflag & ECHO) !== 0 || (lflag & ICANON) === 0;
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
