/**
 * Whether a terminal's foreground job is waiting for input, seen from the PTY master: the
 * foreground process group (`tcgetpgrp` on the master), and for each of its processes in the
 * session's tree, whether `/proc/<pid>/syscall` shows it blocked in `read` on a descriptor that
 * is this terminal (the descriptor's device is the PTY's slave). Also whether the terminal
 * echoes input (ECHO off: a password prompt).
 *
 * A point check: a few ioctls and small /proc reads, all synchronous and through libc (Deno
 * refuses /proc reads of other processes without `--allow-all`). It must never wait, never
 * write to the terminal and never touch a process.
 *
 * @module
 */

import { AT_FDCWD, cString, libc, rawSyscall, readSmallFile } from "../ffi/libc.ts";

const TCGETS = 0x5401;
const TIOCGPGRP = 0x540f;
const TIOCGPTN = 0x80045430;
/** `c_lflag` offset in the kernel's struct termios, and its ECHO bit. */
const LFLAG = 12;
const ECHO = 0o10;
const SYS_READ = 0;
const SYS_NEWFSTATAT = 262;
/** `st_rdev` offset in x86_64's struct stat (144 bytes). */
const ST_RDEV = 40;
const STAT_SIZE = 144;
/** The first major number of UNIX98 PTY slaves; each major holds 256 of them. */
const PTY_SLAVE_MAJOR = 136;

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
  const st = new Uint8Array(STAT_SIZE);
  if (rawSyscall(SYS_NEWFSTATAT, AT_FDCWD, cString(path), st, 0) < 0) return undefined;
  return new DataView(st.buffer).getBigUint64(ST_RDEV, true);
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

/** Whether `pid` is blocked in `read` on a descriptor whose device is `tty`. */
function readingTerminal(pid: number, tty: bigint): boolean {
  const syscall = readSmallFile(`/proc/${pid}/syscall`, 256)?.split(" ");
  if (!syscall || Number(syscall[0]) !== SYS_READ) return false;
  return deviceOf(`/proc/${pid}/fd/${Number(syscall[1])}`) === tty;
}

/**
 * What the foreground job of the terminal on `master` does about input, among the processes of
 * the tree of `leader` (the session's first process). Undefined when the terminal cannot be
 * asked (it is gone).
 */
export function terminalInput(master: number, leader: number): TerminalInput | undefined {
  const termios = new Uint8Array(60);
  if (libc().ioctl(master, BigInt(TCGETS), termios) < 0) return undefined;
  const echo = (new DataView(termios.buffer).getUint32(LFLAG, true) & ECHO) !== 0;
  const group = ioctlInt(master, TIOCGPGRP);
  const tty = slaveDevice(master);
  if (group === undefined || tty === undefined) return undefined;
  const waiting = processTree(leader).some((pid) =>
    Number(statFields(pid)?.[2]) === group && readingTerminal(pid, tty)
  );
  return { waiting, echo };
}
