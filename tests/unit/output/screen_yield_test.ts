/**
 * A screen no call waits on gives way while a call waits on a session without a screen
 * (`ScreenHost.waitElsewhere`): its producer is paused after every feed until the worker has
 * parsed it, and goes on at once when the screen is attended or the last wait elsewhere ends.
 * Otherwise a screen takes a backlog up to `HIGH_WATER` before pausing. Against the real screen
 * worker; no byte is lost either way.
 *
 * @module
 */

import assert from "node:assert/strict";
import { HIGH_WATER, type Screen, ScreenHost } from "../../../src/output/screen.ts";

const SIZE = { cols: 20, rows: 4 };
const bytes = (s: string) => new TextEncoder().encode(s);

/** Counts the screen's drains; `drained()` resolves at the next one. */
function drains(screen: Screen): { count: () => number; drained: () => Promise<void> } {
  let count = 0;
  let next = Promise.withResolvers<void>();
  screen.ondrain = () => {
    count++;
    next.resolve();
    next = Promise.withResolvers<void>();
  };
  return { count: () => count, drained: () => next.promise };
}

/** Runs `fn` on one screen of a new host (with its drains counted), closing the host after. */
async function onScreen(
  fn: (host: ScreenHost, s: Screen, d: ReturnType<typeof drains>) => Promise<void>,
): Promise<void> {
  const host = new ScreenHost();
  try {
    const s = host.open(SIZE);
    await fn(host, s, drains(s));
  } finally {
    host.close();
  }
}

Deno.test("screen yield: with no call waiting elsewhere, a screen takes a backlog", () =>
  onScreen(async (_host, s, d) => {
    assert.equal(s.feed(bytes("one\r\n")), true);
    assert.equal(s.feed(bytes("two\r\n")), true);
    assert.equal(s.feed(new Uint8Array(HIGH_WATER)), false, "paused past the high water mark");
    await d.drained();
    assert.equal(d.count(), 1);
  }));

Deno.test("screen yield: while a call waits elsewhere, a screen is fed a read at a time", () =>
  onScreen(async (host, s, d) => {
    const end = host.waitElsewhere();
    for (const line of ["a", "b", "c"]) {
      const drained = d.drained();
      assert.equal(s.feed(bytes(`${line}\r\n`)), false, "paused after the read");
      await drained;
      assert.equal(s.backlog, 0, "goes on only once all of it is parsed");
    }
    assert.equal(d.count(), 3);
    end();
    end(); // ending twice counts once
    assert.equal(s.feed(bytes("d")), true, "no call waits elsewhere any more");
    assert.deepEqual((await s.snapshot()).lines, ["a", "b", "c", "d"]);
  }));

Deno.test("screen yield: a call on the screen itself, or the last wait elsewhere ending, lets it go on", () =>
  onScreen(async (host, s, d) => {
    const first = host.waitElsewhere();
    const second = host.waitElsewhere();
    // Attended: the backlog rule, though calls wait elsewhere.
    const unattend = s.attend();
    assert.equal(s.feed(bytes("x\r\n")), true);
    unattend();
    assert.equal(s.feed(bytes("y\r\n")), false, "no call waits on it: a read at a time again");
    // Attending a paused screen lets it go on at once (its backlog is under the low mark).
    const again = s.attend();
    assert.equal(d.count(), 1, "attending resumed it");
    again();
    assert.equal(s.feed(bytes("z\r\n")), false);
    first();
    assert.equal(d.count(), 1, "a call still waits elsewhere");
    second();
    assert.equal(d.count(), 2, "the last wait elsewhere ended: it goes on");
    assert.deepEqual((await s.snapshot()).lines, ["x", "y", "z", ""]);
  }));
