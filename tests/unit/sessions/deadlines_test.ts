/**
 * The shared deadline scheduler: deadlines fire in order, cancelled ones never fire and leave
 * the heap at once, and a shorter deadline set later still fires first.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Deadlines } from "../../../src/sessions/deadlines.ts";

/** A deadline `ms` from now as a promise, plus its record of firing. */
function timed(deadlines: Deadlines, ms: number, fired: string[], name: string) {
  const { promise, resolve } = Promise.withResolvers<void>();
  const deadline = deadlines.after(ms, () => {
    fired.push(name);
    resolve();
  });
  return { reached: promise, cancel: () => deadline.cancel() };
}

Deno.test("deadlines fire in due order and cancelled ones never fire", async () => {
  const deadlines = new Deadlines();
  const fired: string[] = [];
  const late = timed(deadlines, 30, fired, "late");
  const cancelled = timed(deadlines, 10, fired, "cancelled");
  timed(deadlines, 5, fired, "early");
  cancelled.cancel();
  await late.reached;
  assert.deepEqual(fired, ["early", "late"]);
  assert.equal(deadlines.size, 0);
});

Deno.test("a shorter deadline added after a longer one fires first", async () => {
  const deadlines = new Deadlines();
  const fired: string[] = [];
  const long = timed(deadlines, 40, fired, "long");
  const short = timed(deadlines, 1, fired, "short");
  await short.reached;
  assert.deepEqual(fired, ["short"]);
  await long.reached;
  assert.deepEqual(fired, ["short", "long"]);
});

Deno.test("cancelled deadlines leave the heap at once, and the rest fire in order", async () => {
  const deadlines = new Deadlines();
  const fired: string[] = [];
  const all = Array.from(
    { length: 200 },
    (_, i) => timed(deadlines, 1 + ((i * 37) % 50), fired, String(i)),
  );
  for (let i = 0; i < all.length; i += 2) all[i].cancel();
  all[0].cancel();
  assert.equal(deadlines.size, 100);
  await Promise.all(all.filter((_, i) => i % 2 === 1).map((d) => d.reached));
  const kept = fired.map(Number);
  assert.equal(kept.length, 100);
  assert.ok(kept.every((i) => i % 2 === 1));
  const dues = kept.map((i) => 1 + ((i * 37) % 50));
  assert.deepEqual(dues, [...dues].sort((a, b) => a - b));
  assert.equal(deadlines.size, 0);
});
