/**
 * Waiting for a session's output within one call: until the child has closed (and all its
 * output is read), the deadline passes, or the `until` pattern matches what this call saw.
 * It wakes only on output, close or its deadline (one shared timer serves every call); it never
 * sleeps or polls.
 *
 * @module
 */

import { Deadlines } from "./deadlines.ts";
import type { Session, Taken } from "./session.ts";

/** When to stop collecting. */
export interface CollectOptions {
  /** Give up waiting this many milliseconds after the call began. */
  yieldMs: number;
  /** Return as soon as the text collected in this call matches. */
  until?: RegExp;
}

/** What a collection produced. */
export interface Collected extends Taken {
  /** True when the child closed during or before this call. */
  exited: boolean;
}

/** Text matched against `until`, kept to a bounded window. */
class UntilMatcher {
  #text: string;
  #decoder = new TextDecoder();
  #matched: boolean;

  constructor(readonly pattern: RegExp, initial: string) {
    this.#text = initial;
    this.#matched = pattern.test(initial);
  }

  get matched(): boolean {
    return this.#matched;
  }

  feed(bytes: Uint8Array): void {
    if (this.#matched) return;
    this.#text += this.#decoder.decode(bytes, { stream: true });
    if (this.#text.length > 2 * MATCH_WINDOW) this.#text = this.#text.slice(-MATCH_WINDOW);
    this.#matched = this.pattern.test(this.#text);
  }
}

const MATCH_WINDOW = 1024 * 1024;

const deadlines = new Deadlines();

/** Wait per `opts`, then take the session's pending output. */
export async function collect(session: Session, opts: CollectOptions): Promise<Collected> {
  const matcher = opts.until ? new UntilMatcher(opts.until, session.peekText()) : undefined;
  const unlisten = matcher ? session.listen((bytes) => matcher.feed(bytes)) : undefined;
  const deadline = deadlines.after(opts.yieldMs);
  try {
    while (!session.exit && !deadline.expired && !matcher?.matched) {
      await Promise.race([session.pulse.wait(), deadline.reached]);
    }
  } finally {
    deadline.cancel();
    unlisten?.();
  }
  return { ...session.take(), exited: session.exit !== undefined };
}
