/**
 * Terminal screens for `screen` sessions: each one is a headless terminal emulator in the
 * screen worker (screen_worker.ts), fed a copy of every output byte of its session in order.
 * The worker starts with the first screen and parses off the main thread, so a screen never
 * slows the reactor or the HTTP server, and sessions that did not ask for one cost nothing.
 *
 * Emulation costs several times the CPU of the output it follows, and a screen session's child
 * runs at its emulator's pace, so the worker's weight decides what one screen session's flood
 * takes from the others: where the host lets it be set (a `ScreenWeight`), the worker runs at the
 * lowest weight while no call waits on a screen, and at a normal one while any does (`attend`,
 * and every snapshot until it is answered).
 *
 * The weight alone does not give way: the session's output costs the server's reads and the
 * kernel's terminal work at full weight, whatever the emulator's. So while a call waits on a
 * session without a screen ({@link ScreenHost.waitElsewhere}), a screen no call waits on is fed
 * one read at a time: its child is paused after each read until the emulator has parsed it, and
 * so runs at the pace of the emulator's low weight instead of taking the waited-on session's
 * share. Otherwise a screen pauses its child only behind a backlog of {@link HIGH_WATER}.
 *
 * It must never drop or reorder a byte sent to a screen, never answer a snapshot before every
 * byte sent before it was parsed, and never keep an emulator after its screen was closed.
 *
 * @module
 */

import { startWorker } from "../io/descriptor_reserve.ts";
import type { WindowSize } from "../pty/open.ts";

/** What a terminal shows now. */
export interface ScreenView {
  rows: number;
  cols: number;
  /** Zero-based, within the visible rows. */
  cursor: { row: number; col: number };
  /** The visible rows, top to bottom, trailing blanks trimmed. */
  lines: string[];
  /** True while a full-screen program has switched to the alternate screen. */
  alternate: boolean;
}

/** A snapshot: the view plus the lines that scrolled off the top since the last snapshot. */
export interface ScreenSnapshot extends ScreenView {
  /** Lines that left the visible rows since the last snapshot (wrapped rows joined). */
  scrolled: string[];
  /** True when more lines scrolled off than the scrollback holds: the oldest are gone. */
  scrolled_lost: boolean;
}

/** Messages to the worker. */
export type ScreenRequest =
  | { op: "open"; id: number; cols: number; rows: number; scrollback: number }
  | { op: "feed"; id: number; bytes: Uint8Array }
  | { op: "resize"; id: number; cols: number; rows: number }
  | { op: "snapshot"; id: number; req: number }
  | { op: "close"; id: number };

/** Messages from the worker. */
export type ScreenReply =
  | { kind: "snapshot"; req: number; snapshot: ScreenSnapshot }
  | { kind: "gone"; req: number }
  | { kind: "fed"; id: number; bytes: number }
  | { kind: "thread"; tid: number };

/**
 * The CPU weight of the screen worker's thread, where the host lets it be set (the sandbox's
 * containment provides it: a v1 `cpu` cgroup of the worker's own).
 */
export interface ScreenWeight {
  /** Take the worker's thread `tid` (a thread id of this process), at the low weight. */
  adopt(tid: number): void;
  /** Whether a call waits on a screen now: the normal weight while one does, else the lowest. */
  look(looked: boolean): void;
}

/** Lines a screen keeps above its visible rows. */
export const DEFAULT_SCROLLBACK = 1000;
/** Bytes fed and not yet parsed above which `feed` asks the producer to pause. */
export const HIGH_WATER = 4 * 1024 * 1024;
/** Once a paused screen's backlog falls below this, `ondrain` tells the producer to go on. */
export const LOW_WATER = 1024 * 1024;

/** A screen that is no longer there (closed, or its worker failed). */
export class ScreenGoneError extends Error {
  constructor() {
    super("the session's screen is gone");
  }
}

/** One session's screen. */
export interface Screen {
  /**
   * Send output bytes (copied: the caller may reuse them). False when the backlog is over
   * `HIGH_WATER`: the producer should pause until `ondrain` is called (the bytes were taken).
   */
  feed(bytes: Uint8Array): boolean;
  /** Called when the backlog fell below `LOW_WATER` after a `feed` returned false. */
  ondrain?: () => void;
  resize(size: WindowSize): void;
  /** What the terminal shows once every byte fed so far is parsed. */
  snapshot(): Promise<ScreenSnapshot>;
  /** Bytes fed and not yet parsed. */
  readonly backlog: number;
  /**
   * A call waits on this screen until the returned function is called: the emulator runs at
   * its normal weight meanwhile (see {@link ScreenWeight}).
   */
  attend(): () => void;
  /** Drop the emulator. */
  close(): void;
}

/** Bytes a screen was fed that the worker has not parsed yet. */
interface Backlog {
  bytes: number;
  /** True after a `feed` over its high water mark, until the drain was reported. */
  full: boolean;
  /** Calls waiting on this screen (attendances, snapshots not yet answered). */
  attended: number;
  screen?: Screen;
}

/** The screen worker and the screens in it. */
export class ScreenHost {
  #worker?: Worker;
  #waiting = new Map<number, PromiseWithResolvers<ScreenSnapshot>>();
  #backlogs = new Map<number, Backlog>();
  #nextId = 1;
  #nextReq = 1;
  #scrollback: number;
  #weight?: ScreenWeight;
  /** Calls waiting on a screen (attendances not yet ended, snapshots not yet answered). */
  #looking = 0;
  /** Calls waiting on sessions without a screen (see {@link waitElsewhere}). */
  #elsewhere = 0;
  /** Whether a failure of the weight was reported already (it is said once). */
  #weightFailed = false;

  constructor(opts: { scrollback?: number; weight?: ScreenWeight } = {}) {
    this.#scrollback = opts.scrollback ?? DEFAULT_SCROLLBACK;
    this.#weight = opts.weight;
  }

  /** One more call waits on a screen; the returned function ends that (once). */
  #attend(): () => void {
    if (this.#looking++ === 0) this.#weigh((w) => w.look(true));
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      if (--this.#looking === 0) this.#weigh((w) => w.look(false));
    };
  }

  /**
   * A call waits on a session without a screen until the returned function is called (once):
   * meanwhile the screens no call waits on are fed a read at a time (see the module doc).
   */
  waitElsewhere(): () => void {
    this.#elsewhere++;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      if (--this.#elsewhere === 0) { for (const b of this.#backlogs.values()) this.#resume(b); }
    };
  }

  /** Let a paused screen's child go on if its backlog is below what now applies to it. */
  #resume(backlog: Backlog): void {
    const below = this.#yielding(backlog) ? 1 : LOW_WATER;
    if (!backlog.full || backlog.bytes >= below) return;
    backlog.full = false;
    backlog.screen?.ondrain?.();
  }

  /** One read at a time while no call waits on the screen and one waits elsewhere. */
  #yielding(backlog: Backlog): boolean {
    return backlog.attended === 0 && this.#elsewhere > 0;
  }

  /** Apply `change` to the weight; a failure leaves the worker where it was, said once. */
  #weigh(change: (weight: ScreenWeight) => void): void {
    if (!this.#weight) return;
    try {
      change(this.#weight);
    } catch (err) {
      if (this.#weightFailed) return;
      this.#weightFailed = true;
      console.error("uexec: the screen worker's CPU weight cannot be set:", err);
    }
  }

  /** A new screen of `size`. */
  open(size: WindowSize): Screen {
    const id = this.#nextId++;
    const worker = this.#start();
    const backlog: Backlog = { bytes: 0, full: false, attended: 0 };
    this.#backlogs.set(id, backlog);
    worker.postMessage(
      { op: "open", id, cols: size.cols, rows: size.rows, scrollback: this.#scrollback },
    );
    let open = true;
    const attend = () => {
      const end = this.#attend();
      backlog.attended++;
      this.#resume(backlog);
      let ended = false;
      return () => {
        if (ended) return;
        ended = true;
        backlog.attended--;
        end();
      };
    };
    const send = (msg: ScreenRequest, transfer: Transferable[] = []) => {
      if (open && this.#worker === worker) worker.postMessage(msg, transfer);
    };
    const screen: Screen = {
      feed: (bytes) => {
        if (!open || this.#worker !== worker) return true;
        const copy = bytes.slice();
        backlog.bytes += copy.length;
        send({ op: "feed", id, bytes: copy }, [copy.buffer]);
        if (backlog.bytes > (this.#yielding(backlog) ? 0 : HIGH_WATER)) backlog.full = true;
        return !backlog.full;
      },
      resize: (size) => send({ op: "resize", id, cols: size.cols, rows: size.rows }),
      snapshot: () => {
        if (!open || this.#worker !== worker) return Promise.reject(new ScreenGoneError());
        const req = this.#nextReq++;
        const waiting = Promise.withResolvers<ScreenSnapshot>();
        this.#waiting.set(req, waiting);
        const end = attend();
        worker.postMessage({ op: "snapshot", id, req } satisfies ScreenRequest);
        return waiting.promise.finally(end);
      },
      get backlog() {
        return backlog.bytes;
      },
      attend,
      close: () => {
        send({ op: "close", id });
        open = false;
        this.#backlogs.delete(id);
      },
    };
    backlog.screen = screen;
    return screen;
  }

  /** Stop the worker (server shutdown). */
  close(): void {
    this.#worker?.terminate();
    this.#fail();
  }

  #start(): Worker {
    if (this.#worker) return this.#worker;
    const worker = startWorker(new URL("./screen_worker.ts", import.meta.url));
    worker.onmessage = (e: MessageEvent<ScreenReply>) => {
      const reply = e.data;
      if (reply.kind === "thread") return this.#weigh((w) => w.adopt(reply.tid));
      if (reply.kind === "fed") {
        const backlog = this.#backlogs.get(reply.id);
        if (!backlog) return;
        backlog.bytes -= reply.bytes;
        this.#resume(backlog);
        return;
      }
      const waiting = this.#waiting.get(reply.req);
      this.#waiting.delete(reply.req);
      if (reply.kind === "snapshot") waiting?.resolve(reply.snapshot);
      else waiting?.reject(new ScreenGoneError());
    };
    worker.onerror = (e) => {
      e.preventDefault();
      console.error("uexec: screen worker failed; its screens are gone:", e.message);
      worker.terminate();
      this.#fail();
    };
    this.#worker = worker;
    return worker;
  }

  /** The worker is gone: so are its screens; pending snapshots fail. */
  #fail(): void {
    this.#worker = undefined;
    const backlogs = [...this.#backlogs.values()];
    this.#backlogs.clear();
    for (const b of backlogs) if (b.full) b.screen?.ondrain?.();
    const waiting = [...this.#waiting.values()];
    this.#waiting.clear();
    for (const w of waiting) w.reject(new ScreenGoneError());
  }
}
