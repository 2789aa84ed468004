/**
 * The output history ring: offsets, reads that take nothing, losses cut on character boundaries.
 *
 * @module
 */

import assert from "node:assert/strict";
import { OutputHistory } from "../src/output/history.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();

Deno.test("history: offsets count every byte; reads take nothing", () => {
  const h = new OutputHistory(8);
  h.push(enc.encode("abc"));
  h.push(enc.encode("def"));
  assert.equal(h.end, 6);
  assert.deepEqual(h.read(2), { from: 2, bytes: enc.encode("cdef"), lost: 0 });
  assert.deepEqual(h.read(2, 2), { from: 2, bytes: enc.encode("cd"), lost: 0 });
  assert.deepEqual(h.read(6), { from: 6, bytes: new Uint8Array(0), lost: 0 });
  assert.throws(() => h.read(7), RangeError);
  h.push(enc.encode("ghijk")); // wraps: holds "defghijk"
  assert.equal(h.start, 3);
  assert.deepEqual(h.read(0), { from: 3, bytes: enc.encode("defghijk"), lost: 3 });
  h.push(enc.encode("0123456789AB")); // larger than the ring
  assert.equal(h.end, 23);
  assert.deepEqual(h.read(10), { from: 15, bytes: enc.encode("456789AB"), lost: 5 });
});

Deno.test("history: a read after a loss starts on a character boundary", () => {
  const h = new OutputHistory(5);
  h.push(enc.encode("ab€€")); // 2 + 3 + 3 bytes; holds the last 5: a 1-byte tail of € then €
  const got = h.read(0);
  assert.equal(dec.decode(got.bytes), "€");
  assert.equal(got.from, 5);
  assert.equal(got.lost, 5);
});

Deno.test("history: storage grows with use up to the capacity", () => {
  const h = new OutputHistory(1 << 20);
  const chunk = new Uint8Array(100_000).fill(120);
  for (let i = 0; i < 30; i++) h.push(chunk);
  assert.equal(h.end, 3_000_000);
  const all = h.read(0);
  assert.equal(all.bytes.length, 1 << 20);
  assert.equal(all.lost, 3_000_000 - (1 << 20));
});
