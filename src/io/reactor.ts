/**
 * One epoll instance that wakes uexec on file-descriptor readiness: PTY masters, pipes and
 * pidfds of processes waited for. A single pool thread sits in `epoll_wait`; everything else
 * runs on the main thread when it returns. While a watcher reports a flood (its read filled the
 * kernel's buffer), the main thread waits for the next data itself, for at most `CATCH_UP_MS`
 * per turn of the event loop. There is no timer and no polling here: only kernel events.
 *
 * This module must never read or write the watched descriptors itself; watchers do that.
 *
 * @module
 */

import { check, libc, loggable } from "../ffi/libc.ts";

/** epoll event bits. */
export const EPOLLIN = 0x1;
/** Writable. */
export const EPOLLOUT = 0x4;
const EPOLLERR = 0x8;
const EPOLLHUP = 0x10;

const EPOLL_CTL_ADD = 1;
const EPOLL_CTL_DEL = 2;
const EPOLL_CTL_MOD = 3;
const EPOLL_CLOEXEC = 0o2000000;
const EFD_CLOEXEC = 0o2000000;
const EFD_NONBLOCK = 0o4000;
const EVENT_SIZE = 12;
const MAX_EVENTS = 256;
const WAKE_TOKEN = 0;
/**
 * After a batch, descriptors that became ready while it was handled are taken at once with a
 * zero-timeout wait on this thread (a trip through the pool thread costs two thread wake-ups, and
 * under a flood the PTY is ready again after nearly every read), batch after batch for at most
 * this many milliseconds before control goes back to the event loop. A PTY read returns at most
 * the line discipline's 4 KiB, so a bound in batches (it was 2) sent a flood through the pool
 * thread every 12 KiB. While a batch had a read that filled the kernel's buffer (a flood: the
 * writer is ahead), the next wait may block on this thread for what is left of the turn: the
 * kernel then wakes this thread itself when the next chunk is there, as it wakes `script` in its
 * `poll`, instead of the pool thread waking it. Small reads (echoes, prompts, many sessions'
 * round trips) never block here: their next requests wait in the event loop. The event loop
 * waits at most this long either way.
 */
const CATCH_UP_MS = 2;

/** What a watched descriptor does when the kernel reports it ready. */
export interface Watcher {
  /**
   * Called on readability, hang-up or error. Returns true when what it read filled the kernel's
   * buffer, so that more is most likely on its way (a flood); see `CATCH_UP_MS`.
   */
  readable?(): boolean | void;
  /** Called when writable (only while registered with EPOLLOUT). */
  writable?(): void;
}

/** A registration, used to change or drop interest. */
export interface Registration {
  readonly fd: number;
  readonly token: number;
}

/** The event loop for descriptors. Create one per process, on the main thread. */
export class Reactor {
  #epfd: number;
  #wakeFd: number;
  #watchers = new Map<number, Watcher>();
  #nextToken = 1;
  #closed = false;
  #events = new Uint8Array(EVENT_SIZE * MAX_EVENTS);
  #ctlBuf = new Uint8Array(EVENT_SIZE);
  #done: Promise<void>;

  constructor() {
    const c = libc();
    this.#epfd = check("epoll_create1", c.epoll_create1(EPOLL_CLOEXEC));
    this.#wakeFd = check("eventfd", c.eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    this.#ctl(EPOLL_CTL_ADD, this.#wakeFd, EPOLLIN, WAKE_TOKEN);
    this.#done = this.#run();
  }

  /** Watch `fd` for `events` (EPOLLIN and/or EPOLLOUT). */
  add(fd: number, events: number, watcher: Watcher): Registration {
    const token = this.#nextToken++;
    this.#watchers.set(token, watcher);
    this.#ctl(EPOLL_CTL_ADD, fd, events, token);
    return { fd, token };
  }

  /** Change the events a registration waits for. */
  modify(reg: Registration, events: number): void {
    this.#ctl(EPOLL_CTL_MOD, reg.fd, events, reg.token);
  }

  /** Stop watching. Call before closing the descriptor. */
  remove(reg: Registration): void {
    if (!this.#watchers.delete(reg.token)) return;
    libc().epoll_ctl(this.#epfd, EPOLL_CTL_DEL, reg.fd, this.#ctlBuf);
  }

  /** Stop the loop and release the epoll instance. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    libc().write(this.#wakeFd, new BigUint64Array([1n]), 8n);
    await this.#done;
    libc().close(this.#epfd);
    libc().close(this.#wakeFd);
  }

  #ctl(op: number, fd: number, events: number, token: number): void {
    const view = new DataView(this.#ctlBuf.buffer);
    view.setUint32(0, events, true);
    view.setBigUint64(4, BigInt(token), true);
    check("epoll_ctl", libc().epoll_ctl(this.#epfd, op, fd, this.#ctlBuf));
  }

  async #run(): Promise<void> {
    const view = new DataView(this.#events.buffer);
    const c = libc();
    while (!this.#closed) {
      let n = await c.epoll_wait_async(this.#epfd, this.#events, MAX_EVENTS, -1);
      const until = performance.now() + CATCH_UP_MS;
      while (n > 0) {
        let flood = false;
        for (let i = 0; i < n; i++) {
          const bits = view.getUint32(i * EVENT_SIZE, true);
          const token = Number(view.getBigUint64(i * EVENT_SIZE + 4, true));
          if (token === WAKE_TOKEN) continue;
          if (this.#dispatch(token, bits)) flood = true;
        }
        const left = until - performance.now();
        if (this.#closed || left <= 0) break;
        n = c.epoll_wait(this.#epfd, this.#events, MAX_EVENTS, flood ? Math.floor(left) : 0);
      }
    }
  }

  /** Runs the watcher; true when its read reported a flood. */
  #dispatch(token: number, bits: number): boolean {
    let flood = false;
    try {
      if (bits & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        flood = this.#watchers.get(token)?.readable?.() === true;
      }
      if (bits & EPOLLOUT) this.#watchers.get(token)?.writable?.();
    } catch (err) {
      console.error("uexec: descriptor watcher failed:", loggable(err));
    }
    return flood;
  }
}
