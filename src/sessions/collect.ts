/**
 * Waiting for a session's output within one call: until the child has closed (and all its
 * output is read), the deadline passes, or the `until` pattern matches what this call saw.
 * It wakes only on output (when it has a pattern to match), close or its deadline (one shared
 * timer serves every call); it never sleeps or polls.
 *
 * @module
 */

import { Deadlines } from "./deadlines.ts";
import { CallAbandonedError } from "./errors.ts";
import type { Session, Taken } from "./session.ts";
import { UntilMatcher } from "./until.ts";

/** When to stop collecting. */
export interface CollectOptions {
  /** Give up waiting this many milliseconds after the call began. */
  yieldMs: number;
  /**
   * Return as soon as the latest text collected in this call matches (a pattern from
   * `compileUntil`, matched over a bounded window).
   */
  until?: RegExp;
  /**
   * Aborts when the caller went away: the collection then rejects with `CallAbandonedError`
   * and takes nothing, leaving the output (and the exit) to the next call.
   */
  signal?: AbortSignal;
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
  const matcher = opts.until ? new UntilMatcher(opts.until) : undefined;
  if (session.exit || matcher?.feed(session.peekBytes())) return Promise.resolve(taken(session));
  const { promise, resolve, reject } = Promise.withResolvers<Collected>();
  const stop = () => {
    deadline.cancel();
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
  const unlisten = session.listen({
    output: matcher
      ? (bytes) => {
        if (matcher.feed(bytes)) finish();
      }
      : undefined,
    ended: finish,
  });
  const deadline = deadlines.after(opts.yieldMs, finish);
  return promise;
}
