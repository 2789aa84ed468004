/**
 * Idempotent `exec_command`: a call repeated with the same `Idempotency-Key` by the same agent
 * within 10 minutes starts nothing new and is answered what the first call is answered (waiting
 * for it while it runs); the same key with a different body is refused (422). When every caller
 * of a running call went away, the call is abandoned (its output waits in the session), and the
 * next repeat collects from the session it started instead of starting another.
 *
 * Keys are kept per agent, bounded in number and age. It must never run a command twice for one
 * key, nor answer one agent with another agent's result.
 *
 * @module
 */

import { ApiError, CallAbandonedError, InvalidRequestError } from "../errors.ts";

/** How long a key is remembered after its first call. */
export const IDEMPOTENCY_TTL_MS = 10 * 60_000;
/** Most keys remembered at once (the oldest are forgotten first). */
export const MAX_IDEMPOTENCY_KEYS = 10_000;
const KEY_PATTERN = /^[\x21-\x7e]{1,255}$/;

/** The same key was sent with a different body (422 `idempotency_conflict`). */
export class IdempotencyConflictError extends ApiError {
  readonly code = "idempotency_conflict";
}

interface Call<T> {
  promise: Promise<T>;
  controller: AbortController;
  waiters: number;
}

interface Entry<T> {
  /** Whose key it is. */
  owner: string;
  fingerprint: string;
  at: number;
  /** The call under way or finished; absent once abandoned (the next repeat runs again). */
  call?: Call<T>;
  /** The session an abandoned call started: repeats collect from it. */
  sessionId?: number;
}

/** The body's identity: its JSON (an `until` pattern gives its source, see `UntilPattern`). */
function fingerprint(body: unknown): string {
  return JSON.stringify(body);
}

/** Calls by `Idempotency-Key`. */
export class IdempotentCalls<T> {
  #entries = new Map<string, Entry<T>>();

  /**
   * Answer the call `key` of `owner`: run `start` for a new key (or `resume` with the session an
   * abandoned first call started), else wait for the first call's answer. `signal` aborts when
   * this caller went away.
   */
  run(
    owner: string,
    key: string,
    body: unknown,
    signal: AbortSignal | undefined,
    start: (signal: AbortSignal) => Promise<T>,
    resume: (sessionId: number, signal: AbortSignal) => Promise<T>,
  ): Promise<T> {
    if (!KEY_PATTERN.test(key)) {
      throw new InvalidRequestError(
        "Idempotency-Key: must be 1 to 255 printable ASCII characters without spaces",
      );
    }
    const now = Date.now();
    this.#forget(now);
    const id = JSON.stringify([owner, key]);
    const print = fingerprint(body);
    let entry = this.#entries.get(id);
    if (entry && entry.fingerprint !== print) {
      throw new IdempotencyConflictError(
        `Idempotency-Key: ${key} was used with a different request body in the last ` +
          `${IDEMPOTENCY_TTL_MS / 60_000} minutes; use a new key for a new command`,
      );
    }
    if (!entry) {
      entry = { owner, fingerprint: print, at: now };
      this.#entries.set(id, entry);
    }
    const held = entry;
    held.call ??= this.#begin(
      held,
      (s) => held.sessionId === undefined ? start(s) : resume(held.sessionId, s),
    );
    return this.#wait(held.call, signal);
  }

  #begin(entry: Entry<T>, run: (signal: AbortSignal) => Promise<T>): Call<T> {
    const controller = new AbortController();
    const call: Call<T> = { promise: run(controller.signal), controller, waiters: 0 };
    call.promise.catch((err) => {
      if (!(err instanceof CallAbandonedError) || entry.call !== call) return;
      entry.call = undefined;
      if (err.sessionId !== undefined) entry.sessionId = err.sessionId;
    });
    return call;
  }

  /** The call's answer for one caller; the call is abandoned once all its callers left. */
  #wait(call: Call<T>, signal: AbortSignal | undefined): Promise<T> {
    call.waiters++;
    const { promise, resolve, reject } = Promise.withResolvers<T>();
    const leave = () => {
      if (--call.waiters === 0) call.controller.abort();
      reject(new CallAbandonedError());
    };
    if (signal?.aborted) leave();
    else signal?.addEventListener("abort", leave, { once: true });
    call.promise.then(resolve, reject).finally(() => signal?.removeEventListener("abort", leave));
    return promise;
  }

  /**
   * Forget every key of `owner` (its credential was revoked: an agent minted under its name
   * later is another party and must not be answered its calls).
   */
  forgetOwner(owner: string): void {
    for (const [id, entry] of [...this.#entries]) {
      if (entry.owner === owner) this.#entries.delete(id);
    }
  }

  /** Forget keys older than the TTL, and the oldest beyond the key limit. */
  #forget(now: number): void {
    for (const [id, entry] of this.#entries) {
      if (now - entry.at < IDEMPOTENCY_TTL_MS && this.#entries.size < MAX_IDEMPOTENCY_KEYS) break;
      this.#entries.delete(id);
    }
  }
}
