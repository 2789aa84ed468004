/**
 * One-time sign-in codes of the dashboard: what a sign-in link carries instead of a token. A
 * code is 256 random bits, works once and only for a few minutes; redeeming it is how a browser
 * session (web_sessions.ts) is opened. Codes are kept only as digests, so a dump of the map
 * yields nothing to present; expired ones are dropped when a code is minted or redeemed (no
 * timers).
 *
 * It must never let a code be redeemed twice or after its expiry, and never log or return a code
 * except to the one who minted it.
 *
 * @module
 */

import { newToken, tokenDigest } from "./bearer_tokens.ts";

/** At most this many codes are outstanding; minting one more drops the oldest. */
const MAX_CODES = 16;

/** A code just minted (shown this once) and how long it may be redeemed. */
export interface MintedCode {
  code: string;
  expiresInSeconds: number;
}

/** Settings of the codes. */
export interface SignInCodeOptions {
  /** How long a code may be redeemed (`UEXEC_DASHBOARD_CODE_MINUTES`). */
  ttlMs: number;
  now?: () => number;
}

/** Outstanding sign-in codes: code digest -> expiry. */
export class SignInCodes {
  /** How long a code may be redeemed. */
  readonly ttlMs: number;
  readonly #now: () => number;
  /** Insertion order is minting order, so the first entry is the oldest. */
  readonly #expiry = new Map<string, number>();

  constructor(opts: SignInCodeOptions) {
    this.ttlMs = opts.ttlMs;
    this.#now = opts.now ?? Date.now;
  }

  /** A new code. */
  mint(): MintedCode {
    this.#dropExpired();
    while (this.#expiry.size >= MAX_CODES) this.#expiry.delete(this.#expiry.keys().next().value!);
    const code = newToken();
    this.#expiry.set(tokenDigest(code), this.#now() + this.ttlMs);
    return { code, expiresInSeconds: Math.floor(this.ttlMs / 1000) };
  }

  /** Whether `code` is outstanding and unexpired; either way it can never be redeemed again. */
  redeem(code: string): boolean {
    this.#dropExpired();
    return this.#expiry.delete(tokenDigest(code));
  }

  #dropExpired(): void {
    const now = this.#now();
    for (const [digest, expires] of this.#expiry) {
      if (expires <= now) this.#expiry.delete(digest);
    }
  }
}
