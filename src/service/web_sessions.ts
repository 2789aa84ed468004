/**
 * Browser sign-in sessions of the dashboard: a one-time sign-in code (sign_in_codes.ts) is
 * exchanged for a random session id that the dashboard's page keeps for its own origin
 * (`sessionStorage`) and sends as a bearer header, never as a cookie. This module is the
 * server-side map from such ids to the principal they stand for, with an expiry.
 *
 * Ids carry 256 random bits and are kept only as digests, so a dump of the map yields nothing to
 * present. Expired sessions are dropped when looked up or when a new one is opened (no timers).
 * A session's end (sign-out, expiry, the operator ending them all) is told to what it opened, so
 * its live streams end too. It must never hand out an id but to the sign-in that just redeemed a
 * code, and never log or return an id except to that sign-in.
 *
 * @module
 */

import type { Principal } from "./principal.ts";
import { newToken, tokenDigest } from "./bearer_tokens.ts";

/** At most this many signed-in browsers; opening one more drops the oldest. */
const MAX_SESSIONS = 64;

/** A session just opened: its id (shown this once) and its lifetime. */
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

/** One signed-in browser. */
interface Entry {
  digest: string;
  /** The session's own principal object, so that what it opened can be told apart and ended. */
  principal: Principal;
  expires: number;
  /** Told once when the session ends (sign-out, expiry, or dropped for a newer one). */
  ended: Set<() => void>;
}

/** Signed-in browsers: session id digest -> principal and expiry. */
export class WebSessions {
  /** How long a sign-in lasts. */
  readonly ttlMs: number;
  readonly #now: () => number;
  /** Insertion order is opening order, so the first entry is the oldest. */
  readonly #byDigest = new Map<string, Entry>();
  /** Every principal a session was opened for, ended or not. */
  readonly #byPrincipal = new WeakMap<Principal, Entry>();

  constructor(opts: WebSessionOptions) {
    this.ttlMs = opts.ttlMs;
    this.#now = opts.now ?? Date.now;
  }

  /**
   * Open a session for `principal`; returns its id. The session stands for a copy of it of its
   * own, which `principal(id)` returns. `known`: a session opened elsewhere (another fleet node),
   * its id and what it has left, of which this is a copy.
   */
  open(principal: Principal, known?: { id: string; ttlMs: number }): OpenedWebSession {
    const now = this.#now();
    for (const entry of this.#byDigest.values()) {
      if (entry.expires <= now) this.#end(entry);
    }
    while (this.#byDigest.size >= MAX_SESSIONS) this.#end(this.#byDigest.values().next().value!);
    const id = known?.id ?? newToken();
    const ttlMs = known?.ttlMs ?? this.ttlMs;
    const entry: Entry = {
      digest: tokenDigest(id),
      principal: Object.freeze({ ...principal }),
      expires: now + ttlMs,
      ended: new Set(),
    };
    this.#byDigest.set(entry.digest, entry);
    this.#byPrincipal.set(entry.principal, entry);
    return { id, maxAgeSeconds: Math.floor(ttlMs / 1000) };
  }

  /** The principal of a live session, or undefined (unknown or expired). */
  principal(id: string): Principal | undefined {
    const entry = this.#byDigest.get(tokenDigest(id));
    if (!entry || !this.#live(entry)) return undefined;
    return entry.principal;
  }

  /** False for the principal of a session that has ended; true for any other principal. */
  current(principal: Principal): boolean {
    const entry = this.#byPrincipal.get(principal);
    return entry === undefined || this.#live(entry);
  }

  /**
   * Call `ended` once when the session `principal` stands for ends (at once if it has); nothing
   * for a principal no session stands for. Returns the unsubscription.
   */
  onEnd(principal: Principal, ended: () => void): () => void {
    const entry = this.#byPrincipal.get(principal);
    if (entry === undefined) return () => {};
    if (!this.#live(entry)) {
      ended();
      return () => {};
    }
    entry.ended.add(ended);
    return () => entry.ended.delete(ended);
  }

  /** End a session (sign-out); unknown ids are ignored. */
  close(id: string): void {
    this.closeDigest(tokenDigest(id));
  }

  /** End the session whose id has digest `digest` (ended on another fleet node). */
  closeDigest(digest: string): void {
    const entry = this.#byDigest.get(digest);
    if (entry) this.#end(entry);
  }

  /** The digests of the sessions held. */
  digests(): string[] {
    return [...this.#byDigest.keys()];
  }

  /** End every session (the operator's "sign out everywhere"); returns how many were live. */
  closeAll(): number {
    const now = this.#now();
    let live = 0;
    for (const entry of [...this.#byDigest.values()]) {
      if (entry.expires > now) live++;
      this.#end(entry);
    }
    return live;
  }

  #live(entry: Entry): boolean {
    if (this.#byDigest.get(entry.digest) !== entry) return false;
    if (entry.expires > this.#now()) return true;
    this.#end(entry);
    return false;
  }

  #end(entry: Entry): void {
    this.#byDigest.delete(entry.digest);
    const told = [...entry.ended];
    entry.ended.clear();
    for (const ended of told) ended();
  }
}
