/**
 * The session uids of a root server: each live session holds one uid of the range, and a uid
 * goes back to the pool only when its session ended and its private directory is gone. Before
 * a uid is handed out (for the first time too: an earlier server may have left processes
 * behind), every process still running as it is killed, so a daemon left by one session never
 * shares a uid with the next. Unused uids come first and returned ones oldest first, so a uid
 * is reused as late as possible; a few are reaped ahead so a session need not wait.
 *
 * This module must never hand out a uid that a live session holds or whose reap failed.
 *
 * @module
 */

import { SandboxUnavailableError } from "./errors.ts";

/** Kills every process of each uid; resolves once the signals are sent. */
export type Reap = (uids: number[]) => Promise<void>;

/** Uids kept ready ahead of demand, by default; refilled in one batch once half are taken. */
const SPARE = 8;

/** The free session uids of one range. */
export class UidPool {
  #next: number;
  #last: number;
  #returned: number[] = [];
  #ready: number[] = [];
  #reaping = new Set<Promise<void>>();
  /** How many uids the batches in `#reaping` hold. */
  #inFlight = 0;
  /** Uids of ended sessions whose files are being removed. */
  #returning = new Set<Promise<void>>();
  #reap: Reap;
  #spare: number;
  #broken?: Error;
  /** Uids never to hand out (an earlier server's grant on them could not be taken back). */
  #retired: ReadonlySet<number>;

  /**
   * A pool of the uids `first`..`last` but `retired`, each passed to `reap` before it is handed
   * out.
   */
  constructor(
    first: number,
    last: number,
    reap: Reap,
    spare = SPARE,
    retired: ReadonlySet<number> = new Set(),
  ) {
    this.#next = first;
    this.#last = last;
    this.#reap = reap;
    this.#spare = spare;
    this.#retired = retired;
    this.#topUp();
  }

  /** A uid for a new session; `give` it back once the session ended and its files are gone. */
  async take(): Promise<number> {
    for (;;) {
      if (this.#broken) {
        throw new SandboxUnavailableError(`cannot free sandbox uids: ${this.#broken.message}`);
      }
      const uid = this.#ready.shift();
      this.#topUp();
      if (uid !== undefined) return uid;
      const waits = this.#reaping.size > 0 ? this.#reaping : this.#returning;
      if (waits.size === 0) {
        throw new SandboxUnavailableError(
          "every sandbox uid is held by a live session; widen UEXEC_UID_RANGE or end sessions",
        );
      }
      await Promise.race(waits);
    }
  }

  /**
   * Return the uid of an ended session once `cleanup` (removing its files) succeeded; a uid
   * whose cleanup failed is never handed out again.
   */
  give(uid: number, cleanup: Promise<void> = Promise.resolve()): void {
    const returning: Promise<void> = cleanup.then(
      () => {
        this.#returned.push(uid);
        this.#topUp();
      },
      // One line: formatting an Error's stack can abort Deno when descriptors ran out (README).
      (err) => console.error(`uexec: sandbox uid ${uid} retired, its cleanup failed: ${err}`),
    ).finally(() => this.#returning.delete(returning));
    this.#returning.add(returning);
  }

  #candidate(): number | undefined {
    for (;;) {
      const uid = this.#next <= this.#last ? this.#next++ : this.#returned.shift();
      if (uid === undefined || !this.#retired.has(uid)) return uid;
    }
  }

  #topUp(): void {
    if (this.#broken || this.#ready.length + this.#inFlight > this.#spare / 2) return;
    const batch: number[] = [];
    while (this.#ready.length + this.#inFlight + batch.length < this.#spare) {
      const uid = this.#candidate();
      if (uid === undefined) break;
      batch.push(uid);
    }
    if (batch.length === 0) return;
    this.#inFlight += batch.length;
    const reaping: Promise<void> = this.#reap(batch).then(
      () => void this.#ready.push(...batch),
      (err) => void (this.#broken = err instanceof Error ? err : new Error(String(err))),
    ).finally(() => {
      this.#inFlight -= batch.length;
      this.#reaping.delete(reaping);
    });
    this.#reaping.add(reaping);
  }
}
