/**
 * Bearer-token authentication for the /v1 routes. Tokens are compared in constant time (over
 * SHA-256 digests, so their lengths leak nothing either). It must never log or echo a token.
 *
 * @module
 */

import { createHash, timingSafeEqual } from "node:crypto";

function digest(s: string): Uint8Array {
  return createHash("sha256").update(s).digest();
}

/** A checker for `Authorization` header values against `token`. */
export function bearerChecker(token: string): (header: string | undefined) => boolean {
  const expected = digest(token);
  return (header) => {
    const match = /^Bearer (.+)$/.exec(header ?? "");
    const given = digest(match ? match[1] : "");
    return timingSafeEqual(given, expected) && match !== null;
  };
}
