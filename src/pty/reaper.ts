/**
 * One reaper for every session child of the server: exits are learned from SIGCHLD, so a running
 * child costs no descriptor (a pidfd per child was one descriptor per idle session). On each
 * SIGCHLD (signals coalesce: one may stand for many exits) it peeks at the next exited child with
 * `waitid(P_ALL, WEXITED | WNOHANG | WNOWAIT)`, which reaps nothing, and reaps that pid with
 * `waitpid(pid, WNOHANG)` when it was handed to it; it repeats until no exited child is left.
 * A zombie it was not handed (a `Deno.Command` child, which Deno reaps itself, or a session child
 * whose start has not handed it over yet) would hide the others behind it from the peek: then it
 * asks each watched pid once instead. A pid handed over is looked at once right away too, for a
 * child that exited before.
 *
 * Children are started on spawner worker threads; a thread of a process may wait for the
 * children of every other thread in it, and a child whose thread ended belongs to another thread
 * of the process, so the main thread reaps them all.
 *
 * A signal listener does not keep Deno's event loop alive: the process's reactor does (its
 * `epoll_wait` is always pending), so a watched child's exit is always heard. Once listened for,
 * SIGCHLD stays caught for the process's life (Deno keeps its handler, with SA_RESTART): the
 * few system calls that fail with EINTR instead of restarting (a cgroup memory limit's write,
 * `epoll_wait`) are tried again where they are made.
 *
 * It must never reap a pid it was not handed (that child belongs to whoever started it), never
 * reap a pid twice, and never act on a pid after it reaped it: a watched child stays a zombie
 * until reaped here, so its pid cannot be reused by another process while it is watched. It
 * never polls: it wakes on SIGCHLD only, and listens for it only while it watches a child.
 *
 * @module
 */

import { setImmediate } from "node:timers";
import { E, errno, libc } from "../ffi/libc.ts";

/** How a child ended: `code` is the exit code, or 128 + signal for a signal death. */
export interface ExitStatus {
  code: number;
  signal?: number;
}

const P_ALL = 0;
const WNOHANG = 1;
const WEXITED = 4;
const WNOWAIT = 0x01000000;
/** `siginfo_t` is 128 bytes; `si_pid` is the int at byte 16 on Linux. */
const SIGINFO_INTS = 32;
const SI_PID = 4;
/**
 * Children reaped (and their ends handled) in one turn of the event loop; the rest in the next
 * turns. 10,000 sessions killed together exit within milliseconds, and handling every end in one
 * turn (about 0.3 ms each) held the loop, shutdown's time limit included, for seconds.
 */
const MAX_REAPED_PER_TURN = 64;

/** Decode a waitpid status word. */
export function decodeWaitStatus(status: number): ExitStatus {
  const sig = status & 0x7f;
  if (sig === 0) return { code: (status >> 8) & 0xff };
  return { code: 128 + sig, signal: sig };
}

/** Told once of a watched child's end. */
export type ExitListener = (status: ExitStatus) => void;

class Reaper {
  #watched = new Map<number, ExitListener>();
  #listening = false;
  #info = new Int32Array(SIGINFO_INTS);
  #infoBytes = new Uint8Array(this.#info.buffer);
  #status = new Int32Array(1);
  #statusBytes = new Uint8Array(this.#status.buffer);
  #onSignal = () => this.#reapExited();
  /** Whether a turn that reaps the exited children left over is queued. */
  #continuing = false;

  watch(pid: number, listener: ExitListener): () => void {
    if (this.#watched.has(pid)) throw new Error(`child ${pid} is watched already`);
    this.#watched.set(pid, listener);
    if (!this.#listening) {
      Deno.addSignalListener("SIGCHLD", this.#onSignal);
      this.#listening = true;
    }
    // It may have exited before the listener was there; told after the caller's turn, as a
    // SIGCHLD would be.
    queueMicrotask(() => this.#reap(pid));
    return () => {
      if (this.#watched.get(pid) === listener) this.#forget(pid);
    };
  }

  /** Reap `pid` now if it is watched and has exited (one `waitpid`, no scan). */
  reapNow(pid: number): void {
    this.#reap(pid);
  }

  get watching(): number {
    return this.#watched.size;
  }

  /**
   * Reap every watched child that has exited, at most {@link MAX_REAPED_PER_TURN} in this turn
   * (each step reaps one, or stops).
   */
  #reapExited(): void {
    const c = libc();
    for (let reaped = 0;; reaped++) {
      if (reaped === MAX_REAPED_PER_TURN) return this.#continueNextTurn();
      this.#info.fill(0);
      const rc = c.waitid(P_ALL, 0, this.#infoBytes, WEXITED | WNOHANG | WNOWAIT);
      const pid = this.#info[SI_PID];
      if (rc < 0 || pid === 0) return;
      if (!this.#reap(pid)) break;
    }
    // A zombie that is not ours to reap is first in line: ask each watched child instead.
    for (const pid of [...this.#watched.keys()]) this.#reap(pid);
  }

  /** Reap what is left in the next turn of the event loop (once, however often asked). */
  #continueNextTurn(): void {
    if (this.#continuing) return;
    this.#continuing = true;
    setImmediate(() => {
      this.#continuing = false;
      this.#reapExited();
    });
  }

  /** Reap `pid` if it is watched and has exited; true if it was reaped (and its end told). */
  #reap(pid: number): boolean {
    const listener = this.#watched.get(pid);
    if (!listener) return false;
    const rc = libc().waitpid(pid, this.#statusBytes, WNOHANG);
    if (rc === 0) return false;
    let status: ExitStatus;
    if (rc === pid) status = decodeWaitStatus(this.#status[0]);
    else if (errno() === E.ECHILD) status = { code: -1 };
    else return false;
    this.#forget(pid);
    try {
      listener(status);
    } catch (err) {
      console.error(`uexec: the exit of child ${pid} could not be handled:`, err);
    }
    return true;
  }

  #forget(pid: number): void {
    this.#watched.delete(pid);
    if (this.#watched.size > 0 || !this.#listening) return;
    Deno.removeSignalListener("SIGCHLD", this.#onSignal);
    this.#listening = false;
  }
}

let reaper: Reaper | undefined;

/**
 * Be told once when child `pid` (a child of this process that nobody else waits for) exits;
 * it is reaped then. Returns a function that stops watching it (it is then never reaped here).
 */
export function watchExit(pid: number, listener: ExitListener): () => void {
  reaper ??= new Reaper();
  return reaper.watch(pid, listener);
}

/**
 * Reap watched child `pid` now if it has exited: a hint from its own events (its terminal hung
 * up), cheaper than the SIGCHLD path's look at every child (`waitid(P_ALL)` walks the list of
 * the process's children, which holds every live session).
 */
export function reapIfExited(pid: number): void {
  reaper?.reapNow(pid);
}

/** How many children are watched now. */
export function watchedChildren(): number {
  return reaper?.watching ?? 0;
}
