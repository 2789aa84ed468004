/**
 * Bearer tokens: generation (256 random bits), the digest stored in place of a token, and a
 * constant-time match of a presented token against a set of digests. It must never log, echo
 * or store a token in clear, except where the caller writes the operator's own token file.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import { createHash } from "node:crypto";

const TOKEN_BYTES = 32;
const DIGEST_BYTES = 32;

/** A new token: `uexec_` and 256 random bits in base64url. */
export function newToken(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(TOKEN_BYTES));
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return `uexec_${btoa(binary).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "")}`;
}

/** The SHA-256 digest of a token, in hex: what is stored. */
export function tokenDigest(token: string): string {
  return createHash("sha256").update(token).digest("hex");
}

/** A stored hex digest as bytes, as `matchToken` compares it (decode once, when loaded). */
export function digestBytes(hex: string): Uint8Array {
  return new Uint8Array(Buffer.from(hex, "hex"));
}

/**
 * The value whose digest equals the presented token's, compared in constant time against every
 * candidate (no early exit and no branch on a byte, so neither the position of a match nor how
 * much of a digest matched leaks).
 */
export function matchToken<T>(
  presented: string,
  candidates: Iterable<[digest: Uint8Array, value: T]>,
): T | undefined {
  const given = createHash("sha256").update(presented).digest();
  let found: T | undefined;
  for (const [digest, value] of candidates) {
    let diff = digest.length ^ DIGEST_BYTES;
    for (let i = 0; i < DIGEST_BYTES; i++) diff |= given[i] ^ digest[i];
    if (diff === 0) found = value;
  }
  return found;
}

/**
 * Whether two presented tokens are the same, in time that depends on their length only (a
 * token's length is no secret: every token has the same).
 */
export function sameToken(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}
