/**
 * Tokens are matched by their SHA-256 digest, kept as bytes: the presented token's digest is
 * compared against every candidate, and only an exact 32-byte digest matches.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  digestBytes,
  matchToken,
  newToken,
  tokenDigest,
} from "../../../src/service/bearer_tokens.ts";

Deno.test("tokens: a token matches the candidate with its digest, and only that one", () => {
  const [a, b, c] = [newToken(), newToken(), newToken()];
  const candidates: [Uint8Array, string][] = [
    [digestBytes(tokenDigest(a)), "a"],
    [digestBytes(tokenDigest(b)), "b"],
  ];
  assert.equal(matchToken(a, candidates), "a");
  assert.equal(matchToken(b, candidates), "b");
  assert.equal(matchToken(c, candidates), undefined);
  assert.equal(matchToken(a, []), undefined);
  assert.equal(
    tokenDigest("abc"),
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
  );
  assert.deepEqual(
    digestBytes(tokenDigest("abc")).subarray(0, 4),
    new Uint8Array([0xba, 0x78, 0x16, 0xbf]),
  );
});

Deno.test("tokens: a digest of another length never matches, not even its prefix", () => {
  const token = newToken();
  const digest = digestBytes(tokenDigest(token));
  assert.equal(matchToken(token, [[digest.subarray(0, 16), "short"]]), undefined);
  const longer = new Uint8Array(33);
  longer.set(digest);
  assert.equal(matchToken(token, [[longer, "long"]]), undefined);
  assert.equal(matchToken(token, [[new Uint8Array(0), "empty"]]), undefined);
});
