/**
 * The screen worker's CPU cgroup (`ScreenCpuGroup`), on this host's real v1 `cpu` hierarchy:
 * made at the lowest weight, the weight following whether a call waits on a screen, the
 * adopted thread (here a `sleep`'s only thread) moved in and, on close, back out before the
 * cgroup is removed. Each test works in a scratch cgroup of its own as "our own cgroup".
 *
 * @module
 */

import assert from "node:assert/strict";
import { v1Own } from "../../../../src/sandbox/containment/hierarchy.ts";
import {
  IDLE_SHARES,
  LOOKED_SHARES,
  screenCpuDir,
  ScreenCpuGroup,
} from "../../../../src/sandbox/containment/screen_cpu.ts";
import { exists } from "../../../helpers/fs.ts";

const CPU = v1Own("cpu");
const ignore = CPU === undefined;

/** The thread ids listed in the v1 cgroup `dir`. */
function tasks(dir: string): number[] {
  return Deno.readTextFileSync(`${dir}/tasks`).split("\n").filter((l) => l).map(Number);
}

function shares(dir: string): number {
  return Number(Deno.readTextFileSync(`${dir}/cpu.shares`).trim());
}

/** A scratch cgroup standing in for our own, and a `sleep` in it; both gone after `body`. */
async function scratch(body: (home: string, pid: number) => void | Promise<void>): Promise<void> {
  const home = `${CPU}/uexec-test-${crypto.randomUUID().slice(0, 8)}`;
  Deno.mkdirSync(home);
  const sleep = new Deno.Command("sleep", { args: ["60"] }).spawn();
  try {
    Deno.writeTextFileSync(`${home}/tasks`, `${sleep.pid}`);
    await body(home, sleep.pid);
  } finally {
    sleep.kill("SIGKILL");
    await sleep.status;
    for (const d of [screenCpuDir(home, "i1-2"), home]) {
      try {
        Deno.removeSync(d);
      } catch {
        // Removed by the code under test, or never made.
      }
    }
  }
}

Deno.test({
  name: "screen cpu group: made at the lowest weight, beside our own cgroup's tasks",
  ignore,
  fn: () =>
    scratch((home) => {
      const group = ScreenCpuGroup.open("i1-2", home)!;
      assert.equal(group.dir, `${home}/uexec-screens-i1-2`);
      assert.equal(shares(group.dir), IDLE_SHARES);
      assert.deepEqual(tasks(group.dir), []);
      group.close();
      assert.equal(exists(group.dir), false);
    }),
});

Deno.test({
  name: "screen cpu group: the weight follows whether a call waits on a screen",
  ignore,
  fn: () =>
    scratch((home) => {
      const group = ScreenCpuGroup.open("i1-2", home)!;
      try {
        group.look(true);
        assert.equal(shares(group.dir), LOOKED_SHARES);
        group.look(true);
        assert.equal(shares(group.dir), LOOKED_SHARES);
        group.look(false);
        assert.equal(shares(group.dir), IDLE_SHARES);
      } finally {
        group.close();
      }
    }),
});

Deno.test({
  name: "screen cpu group: the adopted thread alone moves in, and back out before removal",
  ignore,
  fn: () =>
    scratch((home, pid) => {
      const group = ScreenCpuGroup.open("i1-2", home)!;
      group.adopt(pid);
      assert.deepEqual(tasks(group.dir), [pid]);
      assert.deepEqual(tasks(home), []);
      group.close();
      assert.equal(exists(group.dir), false);
      assert.deepEqual(tasks(home), [pid]);
    }),
});

Deno.test({
  name: "screen cpu group: threads the adopted one started go back out with it",
  ignore,
  fn: () =>
    scratch(async (home, pid) => {
      const group = ScreenCpuGroup.open("i1-2", home)!;
      const started = new Deno.Command("sleep", { args: ["60"] }).spawn();
      try {
        group.adopt(pid);
        // As the kernel does for a thread the worker starts: born in its cgroup.
        Deno.writeTextFileSync(`${group.dir}/tasks`, `${started.pid}`);
        group.close();
        assert.equal(exists(group.dir), false);
        assert.deepEqual(tasks(home).sort(), [pid, started.pid].sort());
      } finally {
        started.kill("SIGKILL");
        await started.status;
      }
    }),
});

Deno.test({
  name: "screen cpu group: closing after the adopted thread ended removes the cgroup",
  ignore,
  fn: () =>
    scratch(async (home) => {
      const group = ScreenCpuGroup.open("i1-2", home)!;
      const child = new Deno.Command("sleep", { args: ["60"] }).spawn();
      group.adopt(child.pid);
      child.kill("SIGKILL");
      await child.status;
      group.close();
      assert.equal(exists(group.dir), false);
    }),
});
