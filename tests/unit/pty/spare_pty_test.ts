/**
 * The terminal a spawner thread opens ahead (pty/spawn.ts SparePty): taken once, and none put in
 * the slot of a worker the main thread stopped.
 *
 * @module
 */

import assert from "node:assert/strict";
import { SPARE_EMPTY, SPARE_STOPPED, SparePty } from "../../../src/pty/spawn.ts";
import { closeAll } from "../../../src/ffi/libc.ts";

function openFds(): number {
  return [...Deno.readDirSync("/proc/self/fd")].length;
}

Deno.test("a spare terminal is taken once, in the size asked for", () => {
  const slot = new Int32Array(new SharedArrayBuffer(4)).fill(SPARE_EMPTY);
  const spare = new SparePty(slot);
  spare.fill();
  const master = Atomics.load(slot, 0);
  assert.ok(master >= 0);
  spare.fill(); // Full already: nothing more is opened.
  assert.equal(Atomics.load(slot, 0), master);
  const taken = spare.take({ rows: 30, cols: 100 });
  assert.equal(taken?.master, master);
  assert.match(taken!.slavePath, /^\/dev\/pts\/\d+$/);
  assert.equal(Atomics.load(slot, 0), SPARE_EMPTY);
  assert.equal(spare.take({ rows: 30, cols: 100 }), undefined);
  closeAll([master]);
});

Deno.test("a stopped worker's slot gets no terminal and gives none", () => {
  // The main thread stops the worker: the slot is marked stopped; a fill that comes after opens
  // nothing (one already under way closes its own terminal: the compare-exchange in fill).
  const slot = new Int32Array(new SharedArrayBuffer(4)).fill(SPARE_EMPTY);
  const spare = new SparePty(slot);
  const before = openFds();
  Atomics.store(slot, 0, SPARE_STOPPED);
  spare.fill();
  assert.equal(Atomics.load(slot, 0), SPARE_STOPPED);
  assert.equal(openFds(), before);
  assert.equal(spare.take({ rows: 24, cols: 80 }), undefined);
  assert.equal(Atomics.load(slot, 0), SPARE_STOPPED);
});
