/**
 * The shared deadline scheduler: deadlines fire in order, cancelled ones never fire, and a
 * shorter deadline set later still fires first.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Deadlines } from "../src/sessions/deadlines.ts";

Deno.test("deadlines fire in due order and cancelled ones never fire", async () => {
  const deadlines = new Deadlines();
  const fired: string[] = [];
  const late = deadlines.after(30);
  late.reached.then(() => fired.push("late"));
  const cancelled = deadlines.after(10);
  cancelled.reached.then(() => fired.push("cancelled"));
  const early = deadlines.after(5);
  early.reached.then(() => fired.push("early"));
  cancelled.cancel();
  await late.reached;
  assert.deepEqual(fired, ["early", "late"]);
  assert.equal(early.expired, true);
  assert.equal(late.expired, true);
  assert.equal(cancelled.expired, false);
});

Deno.test("a shorter deadline added after a longer one fires first", async () => {
  const deadlines = new Deadlines();
  const long = deadlines.after(40);
  const short = deadlines.after(1);
  await short.reached;
  assert.equal(long.expired, false);
  await long.reached;
  assert.equal(long.expired, true);
});

Deno.test("many cancelled deadlines leave a later one on time", async () => {
  const deadlines = new Deadlines();
  for (let i = 0; i < 1000; i++) deadlines.after(1 + (i % 20)).cancel();
  const kept = deadlines.after(25);
  await kept.reached;
  assert.equal(kept.expired, true);
});
