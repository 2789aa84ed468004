/**
 * The screen worker's CPU weight as `ScreenHost` drives it: the worker's own thread is handed
 * over once it starts, the weight is raised exactly while some call waits on a screen (an
 * attendance, or a snapshot until it is answered) and lowered when the last one ends, and the
 * screens' contents do not depend on it. With a recording `ScreenWeight`, and with the real v1
 * `cpu` cgroup where this host has one.
 *
 * @module
 */

import assert from "node:assert/strict";
import { ScreenHost, type ScreenWeight } from "../../../src/output/screen.ts";
import { ScreenCpuGroup } from "../../../src/sandbox/containment/screen_cpu.ts";
import { v1Own } from "../../../src/sandbox/containment/hierarchy.ts";

/** A weight that records what it was told; `adopted` resolves with the first thread. */
class RecordingWeight implements ScreenWeight {
  calls: string[] = [];
  #adopted = Promise.withResolvers<number>();
  adopted = this.#adopted.promise;
  adopt(tid: number): void {
    this.calls.push("adopt");
    this.#adopted.resolve(tid);
  }
  look(looked: boolean): void {
    this.calls.push(looked ? "looked" : "idle");
  }
}

const SIZE = { cols: 20, rows: 3 };
const bytes = (s: string) => new TextEncoder().encode(s);

Deno.test("screen weight: the worker hands over its own thread, once", async () => {
  const weight = new RecordingWeight();
  const host = new ScreenHost({ weight });
  try {
    const a = host.open(SIZE);
    const b = host.open(SIZE);
    const tid = await weight.adopted;
    assert.notEqual(tid, Deno.pid, "the worker's thread, not the main one");
    assert.ok(Deno.statSync(`/proc/self/task/${tid}`).isDirectory, "a thread of this process");
    await a.snapshot();
    await b.snapshot();
    assert.equal(weight.calls.filter((c) => c === "adopt").length, 1);
  } finally {
    host.close();
  }
});

Deno.test("screen weight: raised while any call waits on a screen, lowered after the last", async () => {
  const weight = new RecordingWeight();
  const host = new ScreenHost({ weight });
  try {
    const a = host.open(SIZE);
    const b = host.open(SIZE);
    await weight.adopted;
    weight.calls = [];
    const endA = a.attend();
    assert.deepEqual(weight.calls, ["looked"]);
    const endB = b.attend();
    endA();
    endA(); // ending twice counts once
    assert.deepEqual(weight.calls, ["looked"], "b still waits");
    endB();
    assert.deepEqual(weight.calls, ["looked", "idle"]);
    const asked = a.snapshot();
    assert.deepEqual(weight.calls, ["looked", "idle", "looked"], "a snapshot waits too");
    await asked;
    assert.deepEqual(weight.calls, ["looked", "idle", "looked", "idle"]);
  } finally {
    host.close();
  }
});

Deno.test("screen weight: a snapshot of a closed screen leaves the weight low", async () => {
  const weight = new RecordingWeight();
  const host = new ScreenHost({ weight });
  const a = host.open(SIZE);
  await weight.adopted;
  weight.calls = [];
  host.close();
  await assert.rejects(a.snapshot());
  assert.deepEqual(weight.calls, []);
});

Deno.test("screen weight: a weight that fails leaves screens working", async () => {
  const failing: ScreenWeight = {
    adopt() {
      throw new Error("no cgroup");
    },
    look() {
      throw new Error("no cgroup");
    },
  };
  const host = new ScreenHost({ weight: failing });
  try {
    const s = host.open(SIZE);
    s.feed(bytes("hello"));
    const end = s.attend();
    assert.deepEqual((await s.snapshot()).lines, ["hello", "", ""]);
    end();
  } finally {
    host.close();
  }
});

Deno.test({
  name: "screen weight: in the real cpu cgroup, the screen is the same byte for byte",
  ignore: v1Own("cpu") === undefined,
  async fn() {
    const group = ScreenCpuGroup.open(`i${Deno.pid}-test${crypto.randomUUID().slice(0, 6)}`)!;
    const adopted = Promise.withResolvers<void>();
    const host = new ScreenHost({
      weight: {
        adopt: (tid) => {
          group.adopt(tid);
          adopted.resolve();
        },
        look: (looked) => group.look(looked),
      },
    });
    const plain = new ScreenHost();
    try {
      const output = Array.from({ length: 3000 }, (_, i) => `\x1b[3${i % 8}mline ${i}\r\n`)
        .join("") + "\x1b[2;5Hend";
      const weighed = host.open(SIZE);
      const reference = plain.open(SIZE);
      await adopted.promise;
      const tasks = Deno.readTextFileSync(`${group.dir}/tasks`).trim().split("\n");
      assert.equal(tasks.length, 1, "only the worker's thread is in the cgroup");
      for (let i = 0; i < output.length; i += 4096) {
        weighed.feed(bytes(output.slice(i, i + 4096)));
        reference.feed(bytes(output.slice(i, i + 4096)));
      }
      assert.deepEqual(await weighed.snapshot(), await reference.snapshot());
    } finally {
      host.close();
      plain.close();
      group.close();
    }
  },
});
