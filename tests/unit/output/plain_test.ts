/**
 * The plain renderer on its own: what each control and sequence does to the line, and that a
 * stream cut anywhere (inside an escape sequence, between `\r` and `\n`, inside a surrogate
 * pair's line) renders exactly as the uncut stream.
 *
 * @module
 */

import assert from "node:assert/strict";
import { MAX_LINE, PlainRenderer } from "../../../src/output/plain.ts";

function render(...pieces: string[]): string {
  const r = new PlainRenderer();
  for (const p of pieces) r.feed(p);
  return r.take();
}

const CASES: [string, string][] = [
  ["\x1b[31mred\x1b[0m\r\n", "red\n"],
  ["\x1b[1;38;2;255;0;0mrgb\x1b[m plain\n", "rgb plain\n"],
  ["10%\r20%\r100%\n", "100%\n"],
  ["abcdef\rXY\n", "XYcdef\n"],
  ["abc\b\bX\n", "aXc\n"],
  ["\b\bstart\n", "start\n"],
  ["\x1b]0;title\x07ok\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\\n", "oklink\n"],
  ["\x1bP+q544e\x1b\\dcs\n", "dcs\n"],
  ["\x1b(B\x1b)0\x1b=\x1b>\x1b7\x1b8esc\n", "esc\n"],
  ["\x1b[?25l\x1b[?1049hhidden\x1b[?1049l\x1b[?25h\n", "hidden\n"],
  ["loading...\r\x1b[Kdone\n", "done\n"],
  ["abcdef\x1b[3D\x1b[K!\n", "abc!\n"],
  ["abcdef\x1b[1G\x1b[2Kx\n", "x\n"],
  ["abcdef\x1b[3G\x1b[1K\n", "   def\n"],
  ["a\x1b[3Cb\n", "a   b\n"],
  ["a\tb\x07\x00\x0e\x7fc\n", "a\tbc\n"],
  ["one\vtwo\fthree", "one\ntwo\nthree"],
  ["ü😀 ok\b\b\bX\n", "ü😀Xok\n"],
];

Deno.test("plain: each control and sequence", () => {
  for (const [input, expected] of CASES) {
    assert.equal(render(input), expected, JSON.stringify(input));
  }
});

Deno.test("plain: a stream cut at any point renders as the whole", () => {
  const all = CASES.map(([input]) => input).join("");
  const whole = render(all);
  for (let cut = 0; cut <= all.length; cut++) {
    assert.equal(render(all.slice(0, cut), all.slice(cut)), whole, `cut at ${cut}`);
  }
  const r = new PlainRenderer();
  for (const ch of all) r.feed(ch);
  assert.equal(r.take(), whole);
});

Deno.test("plain: a take shows the unfinished line; the next shows what follows it", () => {
  const r = new PlainRenderer();
  r.feed("Password: ");
  assert.equal(r.take(), "Password: ");
  r.feed("secret\n");
  assert.equal(r.take(), "secret\n");
  r.feed("50%");
  assert.equal(r.take(), "50%");
  r.feed("\r100%\n");
  assert.equal(r.take(), "100%\n");
  r.feed("\x1b[3");
  assert.equal(r.take(), "");
  r.feed("1mred\x1b[0m\n");
  assert.equal(r.take(), "red\n");
});

Deno.test("plain: an unfinished line past MAX_LINE is forgotten once shown", () => {
  const r = new PlainRenderer();
  r.feed("x".repeat(MAX_LINE + 1));
  assert.equal(r.take().length, MAX_LINE + 1);
  r.feed("\ry\n");
  assert.equal(r.take(), "y\n");
});

Deno.test("plain: a progress bar redrawn a million times keeps its last state", () => {
  const r = new PlainRenderer();
  for (let i = 1; i <= 1_000_000; i++) r.feed(`\r\x1b[K[${i}]`);
  r.feed("\n");
  assert.equal(r.take(), "[1000000]\n");
});
