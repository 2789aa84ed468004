/**
 * Starting a child with `posix_spawnp`: a new session, default signal dispositions, an empty
 * signal mask, a working directory, an explicit environment, and a new PTY or pipes as stdio;
 * or, given a {@link Placement}, the same started straight inside its cgroups
 * (clone_into_cgroup.ts). No descriptor of the server leaks into the child but the cgroup gate
 * it is given as fd 3. The PTY is opened on the calling thread,
 * so it belongs to that thread's devpts instance (a sandbox domain has its own), and the child
 * opens the slave by path, which makes it its controlling terminal.
 *
 * Call it only through synchronous FFI on the thread whose sandbox the child must inherit (the
 * spawner worker); it must never run on a pool thread.
 *
 * @module
 */

import { cString, cStringArray, E, errno, errnoName, libc, O, OsError } from "../ffi/libc.ts";
import { cloneIntoCgroup, type Placement } from "./clone_into_cgroup.ts";
import { openPty, resizePty, type WindowSize } from "./open.ts";

const POSIX_SPAWN_SETSIGDEF = 0x04;
const POSIX_SPAWN_SETSIGMASK = 0x08;
const POSIX_SPAWN_SETSID = 0x80;

/** How the child's stdin, stdout and stderr are connected: a new terminal, or given pipes. */
export type Stdio =
  | { kind: "pty"; size: WindowSize }
  | { kind: "pipes"; stdin: number; output: number };

/** A started child: its pid and, for a terminal, the master (non-blocking, close-on-exec). */
export interface Spawned {
  pid: number;
  master?: number;
  /** Set when the child could not be put into its cgroups (it waits at its gate). */
  unplaced?: boolean;
}

/** Everything needed to start one child. */
export interface SpawnSpec {
  /** The session's own uid, which a root server's spawner switches to for this spawn. */
  uid?: number;
  /** The file to execute (a path), when it is not `argv[0]`. */
  file?: string;
  argv: string[];
  env: string[];
  cwd: string;
  stdio: Stdio;
  /** The child's cgroup gate (see {@link Gate}). */
  gate?: Gate;
  /** Start the child inside its cgroups instead (an absolute `file`; no `gate` then). */
  placement?: Placement;
}

/**
 * A child that waits at a gate until it is in its cgroups: it gets `fd` (a pipe's read end) as
 * its fd 3; the spawning thread writes its pid to each of `procs` (`cgroup.procs` files the
 * server opened, so the kernel checks the server's credentials, not the thread's), then a line
 * to `release`, the pipe's write end.
 */
export interface Gate {
  fd: number;
  procs: number[];
  release: number;
}

/** A spawn that failed, with the errno posix_spawnp reported. */
export class SpawnError extends Error {
  /** Create the error for `argv0` and errno `code`. */
  constructor(readonly argv0: string, readonly code: number) {
    super(`cannot start ${argv0}: ${errnoName(code)}`);
    this.name = "SpawnError";
  }
}

/** Strings referenced only through raw pointers; held here so GC cannot free them mid-call. */
let pinned: Uint8Array[] = [];

/** A spare-terminal slot holding no terminal. */
export const SPARE_EMPTY = -1;
/** A spare-terminal slot whose worker was stopped: nothing may be put in it any more. */
export const SPARE_STOPPED = -2;

/**
 * A terminal opened ahead on a spawner thread for its next spawn, so that the open
 * (`posix_openpt`, `grantpt`, `unlockpt`, `ptsname_r`: about 50 µs) is off the request's path.
 * Its master is kept in memory shared with the main thread (`slot`), which marks the slot
 * {@link SPARE_STOPPED} and closes what it held when it stops the worker; whoever takes a master
 * out of the slot first owns it, and a terminal opened after the stop is closed by its opener.
 * Only for a thread that neither switches uid (a terminal belongs to whoever opens it) nor spawns
 * in terminal slots (other devpts instances): all its spawns are alike. The one window left: a
 * worker whose JavaScript is stopped between its open's return and its store leaves that one
 * descriptor open (no public API lets the main thread wait for a terminated worker's thread).
 */
export class SparePty {
  /** The slave's path of the master in the slot (this thread's own knowledge). */
  #path?: string;

  constructor(readonly slot: Int32Array) {}

  /** Open one ahead when the slot is empty; nothing when none can be opened now. */
  fill(): void {
    if (Atomics.load(this.slot, 0) !== SPARE_EMPTY) return;
    let pty;
    try {
      pty = openPty({ rows: 24, cols: 80 });
    } catch {
      return; // The next spawn opens its own, and says why it cannot.
    }
    this.#path = pty.slavePath;
    // Stopped meanwhile: the main thread will not close it, so its opener does.
    if (Atomics.compareExchange(this.slot, 0, SPARE_EMPTY, pty.master) !== SPARE_EMPTY) {
      libc().close(pty.master);
    }
  }

  /** The terminal in the slot, in `size`, when there is one (it is then this caller's). */
  take(size: WindowSize): { master: number; slavePath: string } | undefined {
    const master = Atomics.load(this.slot, 0);
    if (master < 0 || this.#path === undefined) return undefined;
    if (Atomics.compareExchange(this.slot, 0, master, SPARE_EMPTY) !== master) return undefined;
    try {
      resizePty(master, size);
    } catch {
      libc().close(master);
      return undefined;
    }
    return { master, slavePath: this.#path };
  }
}

/**
 * Start the child of `spec`; its pid is also its session and group id. Its terminal from
 * `spare` when that holds one (see {@link SparePty}), else a new one. No pseudo-terminal left
 * (the system's `kernel.pty.max` reached) is a `SpawnError` of ENOSPC.
 */
export function spawnChild(spec: SpawnSpec, spare?: SparePty): Spawned {
  if (spec.stdio.kind === "pipes") return { pid: spawnWith(spec, spec.stdio) };
  let pty;
  try {
    pty = spare?.take(spec.stdio.size) ?? openPty(spec.stdio.size);
  } catch (err) {
    if (err instanceof OsError && err.errno === E.ENOSPC) {
      throw new SpawnError("a terminal", E.ENOSPC);
    }
    throw err;
  }
  try {
    return { pid: spawnWith(spec, { path: pty.slavePath }), master: pty.master };
  } catch (err) {
    libc().close(pty.master);
    throw err;
  }
}

/** posix_spawnp with stdio from a slave path (opened by the child) or from given pipes. */
function spawnWith(
  spec: SpawnSpec,
  stdio: { path: string } | { stdin: number; output: number },
): number {
  if (spec.placement) {
    const file = spec.file ?? spec.argv[0];
    if (!file.startsWith("/") || spec.gate) throw new Error("a placed child needs no gate, a path");
    try {
      return cloneIntoCgroup({ ...spec, file }, stdio, spec.placement);
    } catch (err) {
      if (err instanceof OsError) throw new SpawnError(spec.argv[0], err.errno);
      throw err;
    }
  }
  const c = libc();
  const actions = new Uint8Array(256);
  const attr = new Uint8Array(512);
  const sigs = new Uint8Array(128);
  c.posix_spawn_file_actions_init(actions);
  c.posix_spawnattr_init(attr);
  try {
    c.posix_spawnattr_setflags(
      attr,
      POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK,
    );
    c.sigfillset(sigs);
    c.posix_spawnattr_setsigdefault(attr, sigs);
    c.sigemptyset(sigs);
    c.posix_spawnattr_setsigmask(attr, sigs);
    c.posix_spawn_file_actions_addchdir_np(actions, cString(spec.cwd));
    if ("path" in stdio) {
      c.posix_spawn_file_actions_addopen(actions, 0, cString(stdio.path), O.RDWR, 0);
      c.posix_spawn_file_actions_adddup2(actions, 0, 1);
    } else {
      c.posix_spawn_file_actions_adddup2(actions, stdio.stdin, 0);
      c.posix_spawn_file_actions_adddup2(actions, stdio.output, 1);
    }
    c.posix_spawn_file_actions_adddup2(actions, 1, 2);
    if (spec.gate !== undefined) c.posix_spawn_file_actions_adddup2(actions, spec.gate.fd, 3);
    c.posix_spawn_file_actions_addclosefrom_np(actions, spec.gate === undefined ? 3 : 4);
    pinned = [];
    const file = cString(spec.file ?? spec.argv[0]);
    const argv = cStringArray(spec.argv, pinned);
    const envp = cStringArray(spec.env, pinned);
    const pid = new Int32Array(1);
    const pidBuf = new Uint8Array(pid.buffer);
    const rc = c.posix_spawnp(pidBuf, file, actions, attr, argv, envp);
    if (rc !== 0) throw new SpawnError(spec.argv[0], rc);
    return pid[0];
  } finally {
    c.posix_spawn_file_actions_destroy(actions);
    c.posix_spawnattr_destroy(attr);
  }
}

const encoder = new TextEncoder();

/**
 * Put the child `pid`, waiting at its gate, into its cgroups and let it run; false when it
 * cannot be placed (it is not let through, and ends at its closed gate without running).
 *
 * The first write into an empty cgroup can hold up this thread (not the child) for about half a
 * millisecond: the cgroup's populated notification wakes a kernel worker that preempts it, and
 * the child, still starting on the same CPU, then runs until it sleeps at the gate.
 */
export function openGate(pid: number, gate: Gate): boolean {
  const line = encoder.encode(`${pid}\n`);
  return gate.procs.every((fd) => writeAll(fd, line)) && writeAll(gate.release, line.subarray(-1));
}

/** One write of all of `bytes`, written again if a caught signal (SIGCHLD) interrupted it. */
function writeAll(fd: number, bytes: Uint8Array): boolean {
  const c = libc();
  for (let tries = 0; tries < 100; tries++) {
    if (c.write(fd, bytes, BigInt(bytes.length)) === bytes.length) return true;
    if (errno() !== E.EINTR) return false;
  }
  return false;
}
