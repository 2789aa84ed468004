/**
 * The head+tail buffer: Codex's cases, plus ring wrap-around, UTF-8 cut points and reuse of the
 * caller's bytes.
 *
 * @module
 */

import assert from "node:assert/strict";
import { HeadTailBuffer } from "../../../src/output/head_tail.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();
const text = (b: Uint8Array) => dec.decode(b);

function drained(buf: HeadTailBuffer) {
  const d = buf.drain();
  return { head: text(d.head), tail: text(d.tail), omitted: d.omitted };
}

Deno.test("keeps prefix and suffix when over budget", () => {
  const buf = new HeadTailBuffer(10);
  buf.push(enc.encode("0123456789"));
  buf.push(enc.encode("ab"));
  assert.deepEqual(drained(buf), { head: "01234", tail: "789ab", omitted: 2 });
});

Deno.test("fills head then tail across chunks, exactly", () => {
  const buf = new HeadTailBuffer(10);
  for (const c of ["01", "234", "567", "89"]) buf.push(enc.encode(c));
  assert.equal(buf.size, 10);
  assert.equal(buf.omitted, 0);
  buf.push(enc.encode("a"));
  assert.deepEqual(drained(buf), { head: "01234", tail: "6789a", omitted: 1 });
});

Deno.test("a chunk larger than the tail keeps only its end", () => {
  const buf = new HeadTailBuffer(10);
  buf.push(enc.encode("01234"));
  buf.push(enc.encode("ABCDEFGHIJK"));
  assert.deepEqual(drained(buf), { head: "01234", tail: "GHIJK", omitted: 6 });
});

Deno.test("the ring wraps around many times and keeps the newest bytes in order", () => {
  const buf = new HeadTailBuffer(8);
  buf.push(enc.encode("HEAD"));
  let all = "";
  for (let i = 0; i < 100; i++) {
    const chunk = String.fromCharCode(97 + (i % 26)).repeat(1 + (i % 3));
    all += chunk;
    buf.push(enc.encode(chunk));
  }
  assert.deepEqual(drained(buf), { head: "HEAD", tail: all.slice(-4), omitted: all.length - 4 });
});

Deno.test("draining resets; the buffer is reusable", () => {
  const buf = new HeadTailBuffer(10);
  buf.push(enc.encode("0123456789xyz"));
  buf.drain();
  assert.equal(buf.size, 0);
  assert.equal(buf.omitted, 0);
  buf.push(enc.encode("again"));
  assert.deepEqual(drained(buf), { head: "again", tail: "", omitted: 0 });
});

Deno.test("pushed bytes are copied: the caller may reuse its buffer", () => {
  const buf = new HeadTailBuffer(1024);
  const scratch = enc.encode("first");
  buf.push(scratch);
  scratch.set(enc.encode("XXXXX"));
  assert.deepEqual(drained(buf), { head: "first", tail: "", omitted: 0 });
});

Deno.test("cut points fall on UTF-8 boundaries", () => {
  const buf = new HeadTailBuffer(8);
  buf.push(enc.encode("ab€€€€"));
  const d = buf.drain();
  assert.equal(text(d.head), "ab");
  assert.equal(text(d.tail), "€");
  assert.equal(d.head.length + d.tail.length + d.omitted, enc.encode("ab€€€€").length);
});

Deno.test("peek does not take", () => {
  const buf = new HeadTailBuffer(10);
  buf.push(enc.encode("0123456789ab"));
  const peeked = buf.peek();
  assert.deepEqual(
    { head: text(peeked.head), tail: text(peeked.tail), omitted: peeked.omitted },
    drained(buf),
  );
});

Deno.test("the head cut never splits a character, even one split across pushes", () => {
  const buf = new HeadTailBuffer(10);
  const e = enc.encode("é"); // c3 a9
  buf.push(new Uint8Array([...enc.encode("0123"), e[0]])); // exactly fills the head
  buf.push(new Uint8Array([e[1], ...enc.encode("abcdefgh")]));
  const d = buf.drain();
  assert.equal(dec.decode(d.head), "0123");
  assert.equal(dec.decode(d.tail), "defgh");
  assert.equal(d.omitted, 5);
  assert.equal(d.head.length + d.tail.length + d.omitted, 5 + 9);
});
