/**
 * The session uids of a root server: each live session holds one uid of the range, and a uid
 * goes back to the pool only when its session ended and its private directory is gone. Uids are
 * handed out in a cycle through the whole range from a cursor that outlives the server
 * (uid_cursor.ts): a restarted server, or the next one to lease the range, continues after the
 * last uid handed out instead of at the range's start, so a uid comes back only after every
 * other uid of the range was handed out. Before a uid is handed out (for the first time too: an
 * earlier server may have left processes behind), every process still running as it is killed;
 * a uid that was handed out before (the cursor went round the range since) also has the files
 * it owns taken back (uid_files.ts), so no agent reads what an earlier session of that uid left.
 * A few are prepared ahead so a session need not wait.
 *
 * This module must never hand out a uid that a live session holds or whose cleanup failed, nor
 * a used uid whose files were not taken back.
 *
 * @module
 */

import { SandboxUnavailableError } from "../errors.ts";

/**
 * Kills every process of each uid of `uids`, and takes back the files of each of `used` (a
 * subset: uids handed out before); resolves once done.
 */
export type Reap = (uids: number[], used: number[]) => Promise<void>;

/** Where the pool's position is kept between runs (see uid_cursor.ts). */
export interface UidCursor {
  /** The next uid to consider. */
  next: number;
  /** Whether the position went round the range at least once: every uid was handed out. */
  wrapped: boolean;
  /** Records a new position; throws when it cannot (the pool then hands out nothing more). */
  save(next: number, wrapped: boolean): void;
}

/** Uids kept ready ahead of demand, by default; refilled in one batch once half are taken. */
const SPARE = 8;

/** The free session uids of one range. */
export class UidPool {
  #first: number;
  #last: number;
  #next: number;
  #wrapped: boolean;
  #cursor?: UidCursor;
  /** Uids handed out, being prepared, ready, or whose cleanup is under way or failed. */
  #held = new Set<number>();
  #ready: number[] = [];
  #reaping = new Set<Promise<void>>();
  /** How many uids the batches in `#reaping` hold. */
  #inFlight = 0;
  /** Uids of ended sessions whose files are being removed. */
  #returning = new Set<Promise<void>>();
  #reap: Reap;
  #spare: number;
  #broken?: Error;
  /** Why the last batch could not be recorded (and so was not handed out). */
  #unsaved?: Error;
  /** Uids never to hand out (an earlier server's grant on them could not be taken back). */
  #retired: ReadonlySet<number>;

  /**
   * A pool of the uids `first`..`last` but `retired`, each passed to `reap` before it is handed
   * out, starting at `cursor`'s position (default: the range's start, nothing used yet).
   */
  constructor(
    first: number,
    last: number,
    reap: Reap,
    spare = SPARE,
    retired: ReadonlySet<number> = new Set(),
    cursor?: UidCursor,
  ) {
    this.#first = first;
    this.#last = last;
    const inRange = cursor && cursor.next >= first && cursor.next <= last;
    this.#next = inRange ? cursor.next : first;
    // A position outside the range says nothing about which uids are fresh: assume none is.
    this.#wrapped = cursor ? cursor.wrapped || !inRange : false;
    this.#cursor = cursor;
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
      const unsaved = this.#unsaved;
      this.#unsaved = undefined;
      if (unsaved && this.#reaping.size === 0) {
        throw new SandboxUnavailableError(`cannot record the sandbox uid cursor: ${unsaved}`);
      }
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
        this.#held.delete(uid);
        this.#topUp();
      },
      // One line: formatting an Error's stack can abort Deno when descriptors ran out
      // (docs/api.md, "Nothing lost, nothing unbounded").
      (err) => console.error(`uexec: sandbox uid ${uid} retired, its cleanup failed: ${err}`),
    ).finally(() => this.#returning.delete(returning));
    this.#returning.add(returning);
  }

  /** The next free uid at the cursor, and whether it was handed out before; none if all held. */
  #candidate(): { uid: number; used: boolean } | undefined {
    for (let seen = this.#first; seen <= this.#last; seen++) {
      const uid = this.#next;
      const used = this.#wrapped;
      if (uid < this.#last) this.#next++;
      else [this.#next, this.#wrapped] = [this.#first, true];
      if (!this.#held.has(uid) && !this.#retired.has(uid)) return { uid, used };
    }
    return undefined;
  }

  #topUp(): void {
    if (this.#broken || this.#ready.length + this.#inFlight > this.#spare / 2) return;
    const batch: number[] = [];
    const used: number[] = [];
    const start = { next: this.#next, wrapped: this.#wrapped };
    while (this.#ready.length + this.#inFlight + batch.length < this.#spare) {
      const found = this.#candidate();
      if (found === undefined) break;
      batch.push(found.uid);
      if (found.used) used.push(found.uid);
      this.#held.add(found.uid);
    }
    if (batch.length === 0) return;
    try {
      // Recorded before any of them is used: a crash never hands them out again from the start.
      this.#cursor?.save(this.#next, this.#wrapped);
    } catch (err) {
      // None of them is handed out; the next take tries again (descriptors may be short now).
      for (const uid of batch) this.#held.delete(uid);
      [this.#next, this.#wrapped] = [start.next, start.wrapped];
      this.#unsaved = err instanceof Error ? err : new Error(String(err));
      return;
    }
    this.#inFlight += batch.length;
    const reaping: Promise<void> = this.#reap(batch, used).then(
      () => void this.#ready.push(...batch),
      (err) => void (this.#broken = err instanceof Error ? err : new Error(String(err))),
    ).finally(() => {
      this.#inFlight -= batch.length;
      this.#reaping.delete(reaping);
    });
    this.#reaping.add(reaping);
  }
}
