/**
 * The benches' shared lease on a host-wide setting (bench/host_setting.ts), on a setting kept in
 * a file of the test's own (the real `kernel.pty.max` is the host's, never a test's to change):
 * benches ending in any order, and one killed mid-run, leave the value found first.
 *
 * @module
 */

import assert from "node:assert/strict";
import { type Knob, leaseAtLeast } from "../../../bench/host_setting.ts";

const MODULE = new URL("../../../bench/host_setting.ts", import.meta.url).href;

function fileKnob(path: string): Knob {
  return {
    read: () => Number(Deno.readTextFileSync(path)),
    write: (value) => Deno.writeTextFileSync(path, String(value)),
  };
}

/**
 * Another bench: a process with the bench's permissions that takes a lease for `want`, says
 * "held", and lets go on a line.
 */
async function otherBench(setting: string, dir: string, want: number) {
  const script = `import { leaseAtLeast } from ${JSON.stringify(MODULE)};
const path = ${JSON.stringify(setting)};
const knob = { read: () => Number(Deno.readTextFileSync(path)),
  write: (v) => Deno.writeTextFileSync(path, String(v)) };
const lease = leaseAtLeast(knob, ${want}, ${JSON.stringify(dir)});
console.log("held");
for await (const _ of Deno.stdin.readable) break;
lease.release();
console.log("released");`;
  // Run as `deno task bench` runs: without --allow-all (Deno then refuses /proc/<pid> reads).
  const file = `${setting}.bench.ts`;
  Deno.writeTextFileSync(file, script);
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-ffi", "--allow-read", "--allow-write", file],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const next = async () => (await lines.read()).value?.trim();
  assert.equal(await next(), "held");
  return {
    async release() {
      const w = child.stdin.getWriter();
      await w.write(new TextEncoder().encode("go\n"));
      await w.close();
      assert.equal(await next(), "released");
      assert.equal((await child.status).code, 0);
    },
    async kill() {
      child.kill("SIGKILL");
      await child.status;
      await child.stdin.close().catch(() => {});
      await lines.cancel();
    },
  };
}

Deno.test("host setting: benches ending in any order put back the value found first", async () => {
  const dir = await Deno.makeTempDir({ prefix: "uexec-lease-" });
  try {
    const setting = `${dir}/setting`;
    Deno.writeTextFileSync(setting, "100");
    const knob = fileKnob(setting);
    // This bench raises 100 to 200; another, starting later, finds 200 and needs 300.
    const mine = leaseAtLeast(knob, 200, `${dir}/leases`);
    assert.deepEqual([mine.before, mine.now, knob.read()], [100, 200, 200]);
    const other = await otherBench(setting, `${dir}/leases`, 300);
    assert.equal(knob.read(), 300);
    // The first one ends first: the other still needs 300 (a plain restore would put 100 back
    // under it, and the other's own restore then 200, left on the host for good).
    mine.release();
    assert.equal(knob.read(), 300);
    await other.release();
    assert.equal(knob.read(), 100);
    assert.deepEqual([...Deno.readDirSync(`${dir}/leases`)].map((e) => e.name), ["lock"]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("host setting: a bench killed with its lease held does not leave the host raised", async () => {
  const dir = await Deno.makeTempDir({ prefix: "uexec-lease-" });
  try {
    const setting = `${dir}/setting`;
    Deno.writeTextFileSync(setting, "100");
    const knob = fileKnob(setting);
    const killed = await otherBench(setting, `${dir}/leases`, 300);
    await killed.kill();
    assert.equal(knob.read(), 300);
    // The next bench needs less than is set now: it raises nothing, and puts back what the
    // killed one found when it ends.
    const next = leaseAtLeast(knob, 200, `${dir}/leases`);
    assert.deepEqual([next.before, next.now], [300, 300]);
    next.release();
    assert.equal(knob.read(), 100);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
