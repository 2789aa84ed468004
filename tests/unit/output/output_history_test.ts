/**
 * The output rings: the history's (offsets, reads that take nothing, losses cut on character
 * boundaries) and the history row's tail read from it, each checked against every byte pushed.
 *
 * @module
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import { outputTail } from "../../../src/history/recorder.ts";
import { OutputRing } from "../../../src/output/output_ring.ts";
import { nextBoundary } from "../../../src/output/utf8.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();

Deno.test("history: offsets count every byte; reads take nothing", () => {
  const h = new OutputRing(8);
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
  const h = new OutputRing(5);
  h.push(enc.encode("ab€€")); // 2 + 3 + 3 bytes; holds the last 5: a 1-byte tail of € then €
  const got = h.read(0);
  assert.equal(dec.decode(got.bytes), "€");
  assert.equal(got.from, 5);
  assert.equal(got.lost, 5);
});

Deno.test("history: storage grows with use up to the capacity", () => {
  const h = new OutputRing(1 << 20);
  const chunk = new Uint8Array(100_000).fill(120);
  for (let i = 0; i < 30; i++) h.push(chunk);
  assert.equal(h.end, 3_000_000);
  const all = h.read(0);
  assert.equal(all.bytes.length, 1 << 20);
  assert.equal(all.lost, 3_000_000 - (1 << 20));
});

/** Every byte of `chunks`, in order. */
function concatAll(chunks: Uint8Array[]): Uint8Array {
  const all = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let at = 0;
  for (const c of chunks) all.set(c, (at += c.length) - c.length);
  return all;
}

const chunk = fc.uint8Array({ maxLength: 40 });
const chunks = fc.array(chunk, { maxLength: 30 });
const capacity = fc.integer({ min: 1, max: 32 });

Deno.test("history: any sequence of chunks reads back as the last bytes pushed", () => {
  fc.assert(fc.property(chunks, capacity, (chunks, cap) => {
    const h = new OutputRing(cap);
    for (const c of chunks) h.push(c);
    const all = concatAll(chunks);
    assert.equal(h.end, all.length);
    assert.equal(h.start, Math.max(0, all.length - cap));
    // A read from what is held is exactly those bytes (no loss, so no boundary cut).
    const held = h.read(h.start);
    assert.deepEqual(held.bytes, all.subarray(h.start));
    assert.equal(held.lost, 0);
  }));
});

Deno.test("history tail: an earlier tail and any chunks keep the last bytes, from a character start", () => {
  fc.assert(fc.property(chunk, chunks, capacity, (earlier, chunks, cap) => {
    const output = new OutputRing(64);
    for (const c of chunks) output.push(c);
    const all = concatAll([earlier, ...chunks]);
    const last = all.subarray(Math.max(0, all.length - cap));
    const expected = all.length < cap ? last : last.subarray(nextBoundary(last, 0));
    assert.deepEqual(outputTail(earlier, output, cap), expected);
  }));
});
