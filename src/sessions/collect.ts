/**
 * Waiting for a session's output within one call: until the child has closed (and all its
 * output is read), the deadline passes, or the `until` pattern matches what this call saw.
 * It wakes only on output (when it has a pattern to match), close or its deadline (one shared
 * timer serves every call); it never sleeps or polls.
 *
 * @module
 */

import { CharCarry } from "../output/carry.ts";
import { Deadlines } from "./deadlines.ts";
import { CallAbandonedError } from "./errors.ts";
import type { Session, Taken } from "./session.ts";

/** When to stop collecting. */
export interface CollectOptions {
  /** Give up waiting this many milliseconds after the call began. */
  yieldMs: number;
  /** Return as soon as the text collected in this call matches. */
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

const MATCH_WINDOW = 1024 * 1024;
const decoder = new TextDecoder();

/** Text matched against `until`, kept to a bounded window. */
class UntilMatcher {
  #text = "";
  /** A trailing incomplete UTF-8 sequence, decoded once the rest of it arrives. */
  #carry = new CharCarry();
  #matched = false;

  constructor(readonly pattern: RegExp, pending: Uint8Array) {
    this.feed(pending);
  }

  get matched(): boolean {
    return this.#matched;
  }

  feed(bytes: Uint8Array): void {
    if (this.#matched) return;
    this.#text += decoder.decode(this.#carry.complete(bytes));
    if (this.#text.length > 2 * MATCH_WINDOW) this.#text = this.#text.slice(-MATCH_WINDOW);
    this.#matched = this.pattern.test(this.#text);
  }
}

const deadlines = new Deadlines();

function taken(session: Session): Collected {
  return { ...session.take(), exited: session.exit !== undefined };
}

/** Wait per `opts`, then take the session's pending output. */
export function collect(session: Session, opts: CollectOptions): Promise<Collected> {
  const { signal } = opts;
  if (signal?.aborted) return Promise.reject(new CallAbandonedError());
  const matcher = opts.until ? new UntilMatcher(opts.until, session.peekBytes()) : undefined;
  if (session.exit || matcher?.matched) return Promise.resolve(taken(session));
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
        matcher.feed(bytes);
        if (matcher.matched) finish();
      }
      : undefined,
    ended: finish,
  });
  const deadline = deadlines.after(opts.yieldMs, finish);
  return promise;
}
