/**
 * A running child as the server sees it: its output descriptor (PTY master or merged pipe) and
 * its input descriptor, driven by the reactor, and its exit, told by the reaper (./reaper.ts),
 * so an idle PTY session holds one descriptor: its master.
 *
 * It reports output as raw bytes in arrival order and reports its end exactly once, only after
 * the exit status is known and the output reached EOF (or, when a leftover process still holds
 * the terminal, a short grace after the exit), so nothing written before exit is lost. It reaps
 * only its own pid and never waits on any other child of the server.
 *
 * @module
 */

import { ApiError } from "../errors.ts";
import { E, errno, libc } from "../ffi/libc.ts";
import { EPOLLIN, EPOLLOUT, type Reactor, type Registration } from "../io/reactor.ts";
import { resizePty, type WindowSize } from "./open.ts";
import { type ExitStatus, reapIfExited, watchExit } from "./reaper.ts";

export { decodeWaitStatus, type ExitStatus } from "./reaper.ts";

const READ_SIZE = 64 * 1024;
const READ_SIZE_BIG = BigInt(READ_SIZE);
const MAX_READS_PER_WAKE = 64;
/**
 * The most a PTY master's read returns: the line discipline's read buffer (4 KiB) less one byte. A
 * read this long means the writer is ahead of us (a flood); see the reactor's `CATCH_UP_MS`.
 */
const TTY_READ_MAX = 4095;
/** After the exit, how long to wait for EOF while another process still holds the terminal. */
const EOF_GRACE_MS = 200;

/** Callbacks a child reports to. */
export interface ChildSink {
  /** Output bytes; they are valid only during the call (the read buffer is reused). */
  output(bytes: Uint8Array): void;
  ended(status: ExitStatus): void;
}

/** The descriptors of a started child, handed over to a `Child`. */
export interface ChildFds {
  pid: number;
  tty: boolean;
  /** PTY master, or the read end of the merged stdout/stderr pipe. */
  output: number;
  /** PTY master (same as output), or the write end of the stdin pipe. */
  input: number;
}

/** Most bytes queued for a child's input that it has not read yet: 1 MiB. */
export const MAX_QUEUED_INPUT = 1024 * 1024;

/** Writing to a child whose stdin was closed (409 `stdin_closed`). */
export class StdinClosedError extends ApiError {
  readonly code = "stdin_closed";
  constructor() {
    super(
      "chars: stdin of this session is closed (it was sent ^D, or the child ended); " +
        "start a new session to send more input",
    );
  }
}

/** Input beyond what may be queued for a child that is not reading it (429 `stdin_full`). */
export class StdinFullError extends ApiError {
  readonly code = "stdin_full";
  constructor(queued: number, adding: number) {
    super(
      `chars: the session is not reading its input: ${queued} bytes are already queued and ` +
        `${adding} more would pass the limit of ${MAX_QUEUED_INPUT} bytes; ` +
        "wait for it to read, or interrupt it",
    );
  }
}

const readBuf = new Uint8Array(READ_SIZE);

/** A child process driven by the reactor. */
export class Child {
  readonly pid: number;
  readonly tty: boolean;
  #reactor: Reactor;
  #sink: ChildSink;
  #output: number;
  #input: number;
  #outReg?: Registration;
  #inReg?: Registration;
  #queue: Uint8Array[] = [];
  /** Bytes in `#queue`. */
  #queued = 0;
  /** Whether the reactor currently reports writability (only while input is queued). */
  #waitingWritable = false;
  #eof = false;
  #exit?: ExitStatus;
  #graceTimer?: ReturnType<typeof setTimeout>;
  #closed = false;
  /** Output is not read while paused (a slow consumer's backpressure). */
  #paused = false;

  constructor(reactor: Reactor, fds: ChildFds, sink: ChildSink) {
    this.pid = fds.pid;
    this.tty = fds.tty;
    this.#reactor = reactor;
    this.#sink = sink;
    this.#output = fds.output;
    this.#input = fds.input;
    this.#watchOutput();
    watchExit(this.pid, (status) => this.#exited(status));
  }

  #watchOutput(): void {
    const events = this.tty && this.#waitingWritable ? EPOLLIN | EPOLLOUT : EPOLLIN;
    this.#outReg = this.#reactor.add(this.#output, events, {
      readable: () => this.#drain(),
      writable: () => this.#flush(),
    });
  }

  /**
   * Stop reading output until `resume`: the kernel buffer fills and the child blocks on its
   * writes, as behind a slow terminal. (A PTY's queued input waits too; it shares the watch.)
   */
  pause(): void {
    if (this.#paused || this.#eof || this.#closed) return;
    this.#paused = true;
    if (this.#outReg) this.#reactor.remove(this.#outReg);
    this.#outReg = undefined;
  }

  /** Read output again after `pause`. */
  resume(): void {
    if (!this.#paused) return;
    this.#paused = false;
    if (!this.#eof && !this.#closed) this.#watchOutput();
  }

  /** True once the end has been reported. */
  get closed(): boolean {
    return this.#closed;
  }

  /** True once the child was reaped: its pid may name another process from then on. */
  get exited(): boolean {
    return this.#exit !== undefined;
  }

  /** The PTY master while the child is open (for asking the terminal); undefined for pipes. */
  get terminal(): number | undefined {
    return this.tty && !this.#closed ? this.#output : undefined;
  }

  /** True while input can still be written. */
  get stdinOpen(): boolean {
    return this.#input >= 0 && !this.#closed;
  }

  /** Queue bytes for the child's input; never blocks, and never queues past the limit. */
  write(bytes: Uint8Array): void {
    if (!this.stdinOpen) throw new StdinClosedError();
    if (bytes.length === 0) return;
    if (this.#queued + bytes.length > MAX_QUEUED_INPUT) {
      throw new StdinFullError(this.#queued, bytes.length);
    }
    this.#queue.push(bytes);
    this.#queued += bytes.length;
    if (this.#queue.length === 1) this.#flush();
  }

  /** Close the child's stdin (pipes only; a PTY gets `^D` through `write`). */
  closeStdin(): void {
    if (this.tty || this.#input < 0) return;
    this.#queue = [];
    this.#queued = 0;
    if (this.#inReg) this.#reactor.remove(this.#inReg);
    this.#inReg = undefined;
    libc().close(this.#input);
    this.#input = -1;
  }

  /** Resize the terminal (PTY only). */
  resize(size: WindowSize): void {
    if (this.tty && !this.#closed) resizePty(this.#output, size);
  }

  /** Send `sig` to the child's process group. */
  signal(sig: number): void {
    if (!this.#closed) libc().kill(-this.pid, sig);
  }

  #flush(): void {
    const c = libc();
    while (this.#queue.length > 0 && this.#input >= 0) {
      const chunk = this.#queue[0];
      const n = c.write(this.#input, chunk, BigInt(chunk.length));
      if (n < 0) {
        const code = errno();
        if (code === E.EINTR) continue;
        if (code === E.EAGAIN) break;
        this.#queue = [];
        this.#queued = 0;
        break;
      }
      this.#queued -= n;
      if (n < chunk.length) this.#queue[0] = chunk.subarray(n);
      else this.#queue.shift();
    }
    this.#wantWritable(this.#queue.length > 0);
  }

  #wantWritable(want: boolean): void {
    if (want === this.#waitingWritable) return;
    this.#waitingWritable = want;
    if (this.tty) {
      if (this.#outReg) this.#reactor.modify(this.#outReg, want ? EPOLLIN | EPOLLOUT : EPOLLIN);
    } else if (want && !this.#inReg && this.#input >= 0) {
      this.#inReg = this.#reactor.add(this.#input, EPOLLOUT, { writable: () => this.#flush() });
    } else if (!want && this.#inReg) {
      this.#reactor.remove(this.#inReg);
      this.#inReg = undefined;
    }
  }

  /** Reads what is there; true when the last read was full (more is most likely coming). */
  #drain(): boolean {
    const c = libc();
    for (let i = 0; i < MAX_READS_PER_WAKE && !this.#eof && !this.#paused; i++) {
      const n = c.read(this.#output, readBuf, READ_SIZE_BIG);
      if (n > 0) {
        this.#sink.output(readBuf.subarray(0, n));
        // A short read took all there was; the (level-triggered) reactor reports what comes next.
        if (n < READ_SIZE) return n >= TTY_READ_MAX;
        continue;
      }
      if (n < 0) {
        const code = errno();
        if (code === E.EINTR) continue;
        if (code === E.EAGAIN) return false;
      }
      this.#onEof();
    }
    return !this.#eof && !this.#paused;
  }

  #onEof(): void {
    this.#eof = true;
    if (this.#outReg) this.#reactor.remove(this.#outReg);
    this.#outReg = undefined;
    // Its end of output usually is its exit: asked at once (this calls #exited if so).
    if (!this.#exit) reapIfExited(this.pid);
    else this.#finish();
  }

  #exited(status: ExitStatus): void {
    this.#exit = status;
    if (this.#eof) this.#finish();
    else this.#graceTimer = setTimeout(() => this.#finish(), EOF_GRACE_MS);
  }

  #finish(): void {
    if (this.#closed) return;
    // Closed first: the last drain may reach EOF, whose handler must not finish a second time.
    this.#closed = true;
    this.#paused = false;
    if (!this.#eof) this.#drain();
    clearTimeout(this.#graceTimer);
    const c = libc();
    for (const reg of [this.#outReg, this.#inReg]) if (reg) this.#reactor.remove(reg);
    c.close(this.#output);
    if (!this.tty && this.#input >= 0) c.close(this.#input);
    this.#input = -1;
    this.#sink.ended(this.#exit!);
  }
}
