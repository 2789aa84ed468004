/**
 * Waits that end a call when there is something to do, besides exit and `until`: output quiet
 * for `idleMs` (`until_idle_ms`), a process of the session listening on a TCP port
 * (`until_port`), the terminal's foreground job waiting for input (`until_input`).
 *
 * Quiet is a timer that output pushes back. The other two have no kernel event (nothing tells
 * the master side that the slave side started a `read`, or that a socket started listening), so
 * they are point checks (src/pty/terminal_input.ts, ./listening.ts) run at moments chosen by
 * the session's own events, never on a fixed interval:
 * - output arriving: a prompt or a "listening on" banner is printed right before the read or
 *   right around the bind, so a check runs `SETTLE_MS` after output arrives (output never
 *   postpones a check already due sooner), at most one per `SETTLE_MS` while output flows;
 * - quiet: a process that prints nothing (`cat`, a server without a banner) is checked at
 *   doubling intervals from the call's start or its latest output (`SETTLE_MS`, then 2x, 4x…),
 *   so a quiet stretch of length T costs about log2(T / SETTLE_MS) checks, not T / interval.
 *
 * A condition found holding is confirmed by one more check `SETTLE_MS` later before the call
 * returns, so output written just before it (a prompt still in the kernel's terminal buffers)
 * is part of the response. The call's yield bounds every wait. This module must never block, and never write to or
 * signal the session.
 *
 * @module
 */

import { type Deadline, Deadlines } from "./deadlines.ts";
import { InvalidRequestError } from "../errors.ts";
import { sessionListens } from "./listening.ts";
import type { Session } from "./session.ts";
import { type TerminalInput, TerminalProbe } from "../pty/terminal_input.ts";

/** The conditions a call may end on, besides exit, `until` and its yield. */
export interface WaitConditions {
  /** Return once output has been quiet this many milliseconds. */
  idleMs?: number;
  /** Return once a process of the session listens on this TCP port. */
  port?: number;
  /** Return once the terminal's foreground job waits for input (PTY sessions only). */
  input?: boolean;
}

/** How long after output a check runs, and the first interval of a quiet stretch. */
export const SETTLE_MS = 25;

const deadlines = new Deadlines();
/** Each PTY session's probe, closed when the session closes. */
const probes = new WeakMap<Session, TerminalProbe>();

/** What a PTY session's terminal says about input now; undefined for pipes or a closed one. */
export function inputState(session: Session): TerminalInput | undefined {
  const master = session.child.terminal;
  if (master === undefined) return undefined;
  let probe = probes.get(session);
  if (!probe) {
    const made = probe = new TerminalProbe(master, session.child.pid);
    probes.set(session, made);
    session.closed.then(() => made.close());
  }
  return probe.ask();
}

/** Refuse conditions a session cannot meet: `until_input` needs a terminal. */
export function checkWaits(waits: WaitConditions | undefined, tty: boolean): void {
  if (waits?.input && !tty) {
    throw new InvalidRequestError(
      "until_input: only a terminal shows that a program waits for input; it needs tty: true",
    );
  }
}

/** The waits of one call: tell it of output; it calls `met` once a condition holds. */
export class Waits {
  #session: Session;
  #conditions: WaitConditions;
  #met: () => void;
  #idle?: Deadline;
  #lastOutput = performance.now();
  #check?: Deadline;
  #checkDue = Infinity;
  #interval = SETTLE_MS;
  #outputSinceCheck = false;
  /** The last check found a condition holding; the next one confirms it. */
  #confirming = false;

  constructor(session: Session, conditions: WaitConditions, met: () => void) {
    this.#session = session;
    this.#conditions = conditions;
    this.#met = met;
    if (conditions.idleMs !== undefined) this.#armIdle(conditions.idleMs);
    if (conditions.port !== undefined || conditions.input) this.#schedule(SETTLE_MS);
  }

  /** Output arrived. */
  output(): void {
    this.#lastOutput = performance.now();
    this.#outputSinceCheck = true;
    if (this.#checkDue > this.#lastOutput + SETTLE_MS && this.#check) this.#schedule(SETTLE_MS);
  }

  /** The call ended: no condition is watched any more. */
  cancel(): void {
    this.#idle?.cancel();
    this.#check?.cancel();
    this.#check = undefined;
  }

  #armIdle(ms: number): void {
    this.#idle = deadlines.after(ms, () => {
      const quiet = performance.now() - this.#lastOutput;
      if (quiet >= this.#conditions.idleMs!) this.#met();
      else this.#armIdle(this.#conditions.idleMs! - quiet);
    });
  }

  #schedule(ms: number): void {
    this.#check?.cancel();
    this.#checkDue = performance.now() + ms;
    this.#check = deadlines.after(ms, () => this.#run());
  }

  #run(): void {
    if (this.#holds()) {
      // Confirmed by a second check: output written just before the read (the prompt) may
      // still be on its way through the kernel's terminal buffers; it arrives meanwhile.
      if (this.#confirming) return this.#met();
      this.#confirming = true;
      return this.#schedule(SETTLE_MS);
    }
    this.#confirming = false;
    this.#interval = this.#outputSinceCheck ? SETTLE_MS : this.#interval * 2;
    this.#outputSinceCheck = false;
    this.#schedule(this.#interval);
  }

  #holds(): boolean {
    const { port, input } = this.#conditions;
    if (input && inputState(this.#session)?.waiting) return true;
    return port !== undefined && sessionListens(this.#session.child.pid, port);
  }
}
