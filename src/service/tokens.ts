/**
 * Bearer tokens: generation (256 random bits), the digest stored in place of a token, and a
 * constant-time match of a presented token against a set of digests. It must never log, echo
 * or store a token in clear, except where the caller writes the operator's own token file.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import { createHash, timingSafeEqual } from "node:crypto";

const TOKEN_BYTES = 32;

/** A new token: `uexec_` and 256 random bits in base64url. */
export function newToken(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(TOKEN_BYTES));
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return `uexec_${btoa(binary).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "")}`;
}

/** The SHA-256 digest of a token, in hex: what is stored and compared. */
export function tokenDigest(token: string): string {
  return createHash("sha256").update(token).digest("hex");
}

/**
 * The value whose digest equals the presented token's, compared in constant time against every
 * candidate (no early exit, so the position of a match leaks nothing either).
 */
export function matchToken<T>(
  presented: string,
  candidates: Iterable<[digest: string, value: T]>,
): T | undefined {
  const given = Buffer.from(tokenDigest(presented), "hex");
  let found: T | undefined;
  for (const [digest, value] of candidates) {
    if (timingSafeEqual(given, Buffer.from(digest, "hex"))) found = value;
  }
  return found;
}
