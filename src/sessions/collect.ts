/**
 * Waiting for a session's output within one call: until the child has closed (and all its
 * output is read), the deadline passes, the `until` pattern matches what this call saw, or one
 * of the call's `waits` holds (./waits.ts). It wakes only on output (when it has a pattern to
 * match or waits to tell), close, its deadline (one shared timer serves every call) or the
 * waits' own timers; it never sleeps or polls. With no time to wait (a yield of 0) it takes what
 * is pending at once.
 *
 * @module
 */

import { Deadlines } from "./deadlines.ts";
import { CallAbandonedError } from "../errors.ts";
import type { Session, Taken } from "./session.ts";
import { UntilMatcher, type UntilPattern } from "./until.ts";
import { type WaitConditions, Waits } from "./waits.ts";

/** When to stop collecting. */
export interface CollectOptions {
  /** Give up waiting this many milliseconds after the call began. */
  yieldMs: number;
  /**
   * Return as soon as the latest text collected in this call matches (a pattern from
   * `compileUntil`, matched over a bounded window).
   */
  until?: UntilPattern;
  /**
   * Aborts when the caller went away: the collection then rejects with `CallAbandonedError`
   * and takes nothing, leaving the output (and the exit) to the next call.
   */
  signal?: AbortSignal;
  /** Return as soon as one of these holds. */
  waits?: WaitConditions;
}

/** What a collection produced. */
export interface Collected extends Taken {
  /** True when the child closed during or before this call. */
  exited: boolean;
}

const deadlines = new Deadlines();

function taken(session: Session): Collected {
  return { ...session.take(), exited: session.exit !== undefined };
}

/** Wait per `opts`, then take the session's pending output. */
export function collect(session: Session, opts: CollectOptions): Promise<Collected> {
  const { signal } = opts;
  if (signal?.aborted) return Promise.reject(new CallAbandonedError());
  const matcher = opts.until ? new UntilMatcher(opts.until, () => finish()) : undefined;
  // A yield of 0 (a front door that pushes output, see the service's `writeStreaming`) takes
  // what is pending now: no deadline, whose timer would hold the answer a millisecond or more.
  if (session.exit || matcher?.feed(session.peekBytes()) || opts.yieldMs <= 0) {
    matcher?.close();
    return Promise.resolve(taken(session));
  }
  const { promise, resolve, reject } = Promise.withResolvers<Collected>();
  const stop = () => {
    matcher?.close();
    deadline.cancel();
    waits?.cancel();
    unlisten();
    signal?.removeEventListener("abort", abandon);
  };
  const finish = () => {
    stop();
    resolve(taken(session));
  };
  const abandon = () => {
    stop();
    reject(new CallAbandonedError());
  };
  signal?.addEventListener("abort", abandon, { once: true });
  const waits = opts.waits && new Waits(session, opts.waits, finish);
  const unlisten = session.listen({
    output: matcher || waits
      ? (bytes) => {
        if (matcher?.feed(bytes)) finish();
        else waits?.output();
      }
      : undefined,
    ended: finish,
  });
  const deadline = deadlines.after(opts.yieldMs, finish);
  return promise;
}
