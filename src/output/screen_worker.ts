/**
 * The screen worker: a headless terminal emulator (`@xterm/headless`) per `screen` session,
 * fed that session's output bytes in order, off the server's main thread, and asked for
 * snapshots of what the terminal shows. Protocol: `ScreenRequest` messages in,
 * `ScreenReply` messages out (see screen.ts, its only user).
 *
 * It must never reorder or skip a session's bytes (each terminal parses one chunk at a time,
 * in arrival order, and a snapshot waits for every chunk sent before it), and never hold more
 * than a terminal's scrollback plus the chunks not yet parsed.
 *
 * @module
 */

import xterm from "@xterm/headless";
import { rawSyscall } from "../ffi/libc.ts";
import { CsiClamp } from "./csi_clamp.ts";
import type { ScreenReply, ScreenRequest, ScreenSnapshot } from "./screen.ts";

type Terminal = InstanceType<typeof xterm.Terminal>;
type Marker = NonNullable<ReturnType<Terminal["registerMarker"]>>;

/** Work waiting for a terminal: a chunk to parse, a resize, or a snapshot to take. */
type Work = Uint8Array | { resize: [number, number] } | { snapshot: number };

/** One session's emulator. */
interface Emulator {
  term: Terminal;
  /** Bounds the counts of control sequences before `term` parses them (see csi_clamp.ts). */
  clamp: CsiClamp;
  /** Work in arrival order; a chunk is parsed before anything after it runs. */
  queue: Work[];
  busy: boolean;
  scrollback: number;
  /** Bytes parsed since the last `fed` report. */
  unreported: number;
  /**
   * The last line above the viewport at the last snapshot (in the scrollback, where no erase
   * reaches it); none when the viewport then began at the first line.
   */
  mark?: Marker;
}

/** Parsed bytes are reported when the queue runs dry, or after this many. */
const REPORT_BYTES = 256 * 1024;

const emulators = new Map<number, Emulator>();

/**
 * The worker thread's nice value: under CPU contention the reactor, the HTTP server and the
 * children come first, and a screen catches up afterwards (its bytes wait, in order). Within
 * the server's own scheduling group only: the weight that counts against other processes is
 * the cgroup's the server moves this thread into where it can (see screen.ts `ScreenWeight`).
 */
const SCREEN_NICE = 10;
const SYSCALLS = Deno.build.arch === "x86_64"
  ? { gettid: 186, setpriority: 141 }
  : { gettid: 178, setpriority: 140 };
const PRIO_PROCESS = 0;
const tid = rawSyscall(SYSCALLS.gettid);
// Lowering one's own priority is always allowed; were it refused, screens would only be faster.
rawSyscall(SYSCALLS.setpriority, PRIO_PROCESS, tid, SCREEN_NICE);

function post(reply: ScreenReply): void {
  self.postMessage(reply);
}

post({ kind: "thread", tid });

/** The logical lines of `buffer` from `from` up to (not including) `to`: wrapped rows joined. */
function logicalLines(
  buffer: Terminal["buffer"]["normal"],
  from: number,
  to: number,
): string[] {
  const lines: string[] = [];
  for (let y = from; y < to; y++) {
    const line = buffer.getLine(y);
    if (!line) continue;
    const text = line.translateToString(true);
    if (line.isWrapped && lines.length > 0) lines[lines.length - 1] += text;
    else lines.push(text);
  }
  return lines;
}

function snapshot(emu: Emulator): ScreenSnapshot {
  const { term } = emu;
  const active = term.buffer.active;
  const lines: string[] = [];
  for (let y = 0; y < term.rows; y++) {
    lines.push(active.getLine(active.baseY + y)?.translateToString(true) ?? "");
  }
  const normal = term.buffer.normal;
  // Lines are gone when the marked line was trimmed off (or the scrollback cleared), or, with
  // no mark, when the buffer filled up (lines may have been trimmed since: said conservatively).
  const lost = emu.mark ? emu.mark.isDisposed : normal.length >= term.rows + emu.scrollback;
  const from = emu.mark && !lost ? emu.mark.line + 1 : 0;
  const scrolled = logicalLines(normal, from, normal.baseY);
  if (active.type === "normal") {
    emu.mark?.dispose();
    emu.mark = active.baseY > 0 ? term.registerMarker(-active.cursorY - 1) : undefined;
  }
  return {
    rows: term.rows,
    cols: term.cols,
    cursor: { row: active.cursorY, col: active.cursorX },
    lines,
    alternate: active.type === "alternate",
    scrolled,
    scrolled_lost: lost,
  };
}

/** Run the emulator's queue: one chunk at a time, each parsed before the next is written. */
function pump(id: number, emu: Emulator): void {
  while (!emu.busy && emu.queue.length > 0) {
    const work = emu.queue.shift()!;
    if ("snapshot" in work) {
      post({ kind: "snapshot", req: work.snapshot, snapshot: snapshot(emu) });
    } else if ("resize" in work) {
      emu.term.resize(...work.resize);
    } else {
      emu.busy = true;
      emu.term.write(emu.clamp.filter(work, emu.term.cols, emu.term.rows), () => {
        emu.busy = false;
        emu.unreported += work.length;
        if (emu.queue.length === 0 || emu.unreported >= REPORT_BYTES) {
          post({ kind: "fed", id, bytes: emu.unreported });
          emu.unreported = 0;
        }
        if (emulators.get(id) === emu) pump(id, emu);
      });
    }
  }
}

function enqueue(id: number, work: Work): void {
  const emu = emulators.get(id);
  if (!emu) return;
  emu.queue.push(work);
  pump(id, emu);
}

self.onmessage = (e: MessageEvent<ScreenRequest>) => {
  const msg = e.data;
  switch (msg.op) {
    case "open": {
      const term = new xterm.Terminal({
        cols: msg.cols,
        rows: msg.rows,
        scrollback: msg.scrollback,
        allowProposedApi: true,
      });
      emulators.set(msg.id, {
        term,
        clamp: new CsiClamp(),
        queue: [],
        busy: false,
        scrollback: msg.scrollback,
        unreported: 0,
      });
      return;
    }
    case "feed":
      return enqueue(msg.id, msg.bytes);
    case "resize":
      return enqueue(msg.id, { resize: [msg.cols, msg.rows] });
    case "snapshot":
      if (!emulators.has(msg.id)) return post({ kind: "gone", req: msg.req });
      return enqueue(msg.id, { snapshot: msg.req });
    case "close": {
      const emu = emulators.get(msg.id);
      emulators.delete(msg.id);
      emu?.mark?.dispose();
      emu?.term.dispose();
      return;
    }
  }
};
