/**
 * Browser sign-in sessions of the dashboard: the operator's token, presented once in the sign-in
 * URL, is exchanged for a random session id that the browser keeps in an `HttpOnly` cookie. This
 * module is the server-side map from such ids to the principal they stand for, with an expiry.
 *
 * Ids carry 256 random bits and are kept only as digests, so a dump of the map yields nothing to
 * present. Expired sessions are dropped when looked up or when a new one is opened (no timers).
 * It must never hand out an id for anyone but the caller that was just authenticated, and never
 * log or return an id except to the sign-in that created it.
 *
 * @module
 */

import type { Principal } from "./principal.ts";
import { newToken, tokenDigest } from "./tokens.ts";

/** At most this many signed-in browsers; opening one more drops the oldest. */
const MAX_SESSIONS = 64;

/** A session just opened: the id for the cookie (shown this once) and its lifetime. */
export interface OpenedWebSession {
  id: string;
  maxAgeSeconds: number;
}

/** Settings of the map. */
export interface WebSessionOptions {
  /** How long a sign-in lasts. */
  ttlMs: number;
  now?: () => number;
}

/** Signed-in browsers: session id digest -> principal and expiry. */
export class WebSessions {
  readonly #ttlMs: number;
  readonly #now: () => number;
  /** Insertion order is opening order, so the first entry is the oldest. */
  readonly #byDigest = new Map<string, { principal: Principal; expires: number }>();

  constructor(opts: WebSessionOptions) {
    this.#ttlMs = opts.ttlMs;
    this.#now = opts.now ?? Date.now;
  }

  /** Open a session for `principal`; returns its id (for the cookie). */
  open(principal: Principal): OpenedWebSession {
    const now = this.#now();
    for (const [digest, entry] of this.#byDigest) {
      if (entry.expires <= now) this.#byDigest.delete(digest);
    }
    while (this.#byDigest.size >= MAX_SESSIONS) {
      this.#byDigest.delete(this.#byDigest.keys().next().value!);
    }
    const id = newToken();
    this.#byDigest.set(tokenDigest(id), { principal, expires: now + this.#ttlMs });
    return { id, maxAgeSeconds: Math.floor(this.#ttlMs / 1000) };
  }

  /** The principal of a live session, or undefined (unknown or expired). */
  principal(id: string): Principal | undefined {
    const digest = tokenDigest(id);
    const entry = this.#byDigest.get(digest);
    if (!entry) return undefined;
    if (entry.expires <= this.#now()) {
      this.#byDigest.delete(digest);
      return undefined;
    }
    return entry.principal;
  }

  /** End a session (sign-out); unknown ids are ignored. */
  close(id: string): void {
    this.#byDigest.delete(tokenDigest(id));
  }
}
