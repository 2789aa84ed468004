/**
 * The CSI count clamp in front of the screen emulator (fuzz finding: `ESC [ 999999999 L` and
 * `x ESC [ 999999999 b` froze the screen worker for every agent).
 *
 * @module
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import xterm from "@xterm/headless";
import { CsiClamp, MAX_SEQUENCE } from "../../../src/output/csi_clamp.ts";

const enc = (s: string) => new TextEncoder().encode(s);
const dec = (b: Uint8Array) => new TextDecoder().decode(b);

/** `text` through a fresh filter in chunks cut at `cuts`, joined. */
function through(text: string, cuts: number[] = [], cols = 80, rows = 24): string {
  const bytes = enc(text);
  const clamp = new CsiClamp();
  const out: Uint8Array[] = [];
  let at = 0;
  for (const cut of [...cuts.filter((c) => c > 0 && c < bytes.length)].sort((a, b) => a - b)) {
    out.push(clamp.filter(bytes.subarray(at, cut), cols, rows));
    at = cut;
  }
  out.push(clamp.filter(bytes.subarray(at), cols, rows));
  const joined = new Uint8Array(out.reduce((n, b) => n + b.length, 0));
  let offset = 0;
  for (const b of out) {
    joined.set(b, offset);
    offset += b.length;
  }
  return dec(joined);
}

Deno.test("csi clamp: counts beyond the screen are cut to it; everything else passes", () => {
  assert.equal(through("a\x1b[999999999Lb"), "a\x1b[24Lb");
  assert.equal(through("x\x1b[999999999b"), "x\x1b[80b");
  assert.equal(through("\x1b[5M\x1b[25M\x1b[100@\x1b[3P"), "\x1b[5M\x1b[24M\x1b[80@\x1b[3P");
  assert.equal(through("\u009b999999999S"), "\u009b24S");
  // Not a count: cursor positions and colours are left alone, however large.
  const plain = "\x1b[1;31mred\x1b[0m\x1b[999;999H\x1b[38;2;255;0;0m\x1b[?2004h";
  assert.equal(through(plain), plain);
  // A sequence aborted by CAN or ESC keeps its bytes.
  assert.equal(through("\x1b[99999\x18L"), "\x1b[99999\x18L");
  // An absurdly long one is dropped whole and cancelled.
  const long = `\x1b[${"0".repeat(MAX_SEQUENCE + 10)}999999999Lafter`;
  assert.equal(through(long), "\x1b[\x18after");
});

Deno.test("csi clamp: every way the emulator enters a CSI from its escape state is seen", () => {
  // xterm.js stays in its escape state over C0 controls and DEL, and takes U+009B (C1 CSI) as a
  // CSI from any state, its escape state included.
  assert.equal(through("\x1b\x07[999999999L"), "\x1b\x07[24L");
  assert.equal(through("\x1b\x00\x1f[999999999b"), "\x1b\x00\x1f[80b");
  assert.equal(through("\x1b\x7f[999999999L"), "\x1b\x7f[24L");
  assert.equal(through("\x1b\u009b999999999L"), "\x1b\u009b24L");
  assert.equal(through("\x1b\u009b999999999L", [1, 2]), "\x1b\u009b24L");
  // CAN ends the escape state; what follows is text.
  assert.equal(through("\x1b\x18[999999999L"), "\x1b\x18[999999999L");
});

Deno.test("csi clamp: the same result wherever the chunks are cut, and unchanged chunks are not copied", () => {
  fc.assert(
    fc.property(
      fc.array(
        fc.constantFrom(
          "a",
          "\x1b[",
          "9",
          "99999999",
          ";",
          "L",
          "b",
          "m",
          "\x1b",
          "\x18",
          "\n",
          "\u009b",
          "é",
        ),
        { maxLength: 40 },
      ),
      fc.array(fc.nat(200), { maxLength: 6 }),
      (parts, cuts) => {
        const text = parts.join("");
        assert.equal(through(text, cuts), through(text));
      },
    ),
  );
  const chunk = enc("plain output \x1b[1mbold\x1b[0m\r\n");
  assert.equal(new CsiClamp().filter(chunk, 80, 24), chunk);
});

Deno.test("csi clamp: xterm.js shows the same screen for the bounded sequence, in no time", async () => {
  const show = async (text: string) => {
    const term = new xterm.Terminal({ cols: 20, rows: 5, allowProposedApi: true });
    await new Promise<void>((resolve) => term.write(text, resolve));
    const lines = [];
    for (let y = 0; y < 5; y++) lines.push(term.buffer.active.getLine(y)!.translateToString(true));
    term.dispose();
    return lines;
  };
  const bounded = through("1\r\n2\r\n3\x1b[2A\x1b[999999999L\r\nx\x1b[999999999b", [], 20, 5);
  assert.deepEqual(await show(bounded), await show("1\r\n2\r\n3\x1b[2A\x1b[5L\r\nx\x1b[20b"));
  assert.deepEqual(await show(bounded), ["", "xxxxxxxxxxxxxxxxxxxx", "x", "", ""]);
});
