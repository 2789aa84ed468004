/**
 * The spawner pool with real workers: sessions of a domain share its worker, a domain's worker
 * is stopped once idle and a new one is bound on the next lease, at most `maxIdle` idle domains
 * keep theirs (least recently used stopped first), a failed restriction is never reused, and a
 * worker that dies is forgotten at once.
 *
 * @module
 */

import assert from "node:assert/strict";
import { libc } from "../../../src/ffi/libc.ts";
import { SandboxUnavailableError } from "../../../src/sandbox/errors.ts";
import type { ResolvedPolicy } from "../../../src/sandbox/policy/policy.ts";
import { MAX_OPEN_WORKERS, SpawnerPool, SpawnFailure } from "../../../src/workers/pool.ts";
import { DIE } from "../../fixtures/spawner_death/marker.ts";

function reap(pid: number): number {
  const status = new Int32Array(1);
  libc().waitpid(pid, new Uint8Array(status.buffer), 0);
  return (status[0] >> 8) & 0xff;
}

const spec = {
  argv: ["/bin/sh", "-c", "exit 7"],
  env: [],
  cwd: "/",
  stdio: { kind: "pipes" as const, stdin: 0, output: 1 },
};

Deno.test("leases share a domain's worker; an idle domain's worker is replaced", async () => {
  const pool = new SpawnerPool({ warm: 1, idleMs: 20 });
  try {
    const a = await pool.acquire("d");
    const b = await pool.acquire("d");
    assert.equal(a.spawner, b.spawner);
    assert.equal(reap((await a.spawner.spawn(spec)).pid), 7);
    a.release();
    a.release();
    b.release();
    const retired = a.spawner;
    await retired.stopped;
    const c = await pool.acquire("d");
    assert.notEqual(c.spawner, retired);
    assert.equal(reap((await c.spawner.spawn(spec)).pid), 7);
    c.release();
  } finally {
    await pool.close();
  }
});

Deno.test("an unrestricted domain spawns on more workers while all are busy, up to the most", async () => {
  const pool = new SpawnerPool({ warm: 1, idleMs: 20 });
  try {
    const lease = await pool.acquire("open");
    const idle = lease.spawner;
    assert.equal(lease.spawner, idle, "an idle worker is taken again");
    const used = new Set();
    const spawns = Array.from({ length: 2 * MAX_OPEN_WORKERS }, () => {
      const spawner = lease.spawner;
      used.add(spawner);
      return spawner.spawn(spec);
    });
    assert.equal(used.size, MAX_OPEN_WORKERS);
    assert.deepEqual(pool.workers(), { warm: 1, bound: MAX_OPEN_WORKERS });
    for (const spawned of await Promise.all(spawns)) assert.equal(reap(spawned.pid), 7);
    lease.release();
    // The domain's idle time stops all of its workers.
    await Promise.all([...used].map((w) => (w as typeof idle).stopped));
    assert.deepEqual(pool.workers(), { warm: 1, bound: 0 });
  } finally {
    await pool.close();
  }
});

Deno.test("idle domains keep at most maxIdle workers: the least recently used go first", async () => {
  // An hour: only the cap may stop them within this test.
  const pool = new SpawnerPool({ warm: 1, idleMs: 3_600_000, maxIdle: 2 });
  try {
    const busy = await pool.acquire("busy");
    const leases = [];
    for (const domain of ["a", "b", "c", "d"]) leases.push(await pool.acquire(domain));
    assert.deepEqual(pool.workers(), { warm: 1, bound: 5 });
    for (const lease of leases) lease.release();
    // "a" and "b" went idle first: stopped once "c" and "d" were idle too (checked before
    // awaiting, so that a pool without the cap fails here rather than waits an hour).
    assert.deepEqual(pool.workers(), { warm: 1, bound: 3 });
    await leases[0].spawner.stopped;
    await leases[1].spawner.stopped;
    // Reused while idle, "c" is the most recent: "d" goes when "a" comes back and leaves.
    const c = await pool.acquire("c");
    assert.equal(c.spawner, leases[2].spawner);
    c.release();
    const a = await pool.acquire("a");
    assert.notEqual(a.spawner, leases[0].spawner);
    a.release();
    assert.deepEqual(pool.workers(), { warm: 1, bound: 3 });
    await leases[3].spawner.stopped;
    assert.equal(reap((await busy.spawner.spawn(spec)).pid), 7, "a busy domain was stopped");
    busy.release();
  } finally {
    await pool.close();
  }
});

Deno.test("a restriction that fails is reported and its worker is not reused", async () => {
  const pool = new SpawnerPool({ warm: 1, idleMs: 20 });
  const broken: ResolvedPolicy = {
    profile: "broken",
    enforce: true,
    readableRoots: ["/"],
    writableRoots: [],
    readOnlySubpaths: [],
    denyRead: ["/proc/sys/kernel"],
    network: "none",
    limits: {},
  };
  try {
    await assert.rejects(() => pool.acquire("x", { policy: broken }), SandboxUnavailableError);
    await assert.rejects(() => pool.acquire("x", { policy: broken }), SandboxUnavailableError);
    const ok = await pool.acquire("y");
    assert.equal(reap((await ok.spawner.spawn(spec)).pid), 7);
    ok.release();
  } finally {
    await pool.close();
  }
});

Deno.test("a worker that dies is forgotten: its child is reported, its domain bound afresh", async () => {
  // Workers that die on a spawn marked with DIE (see tests/fixtures/spawner_death/spawner.ts).
  const module = new URL("../../fixtures/spawner_death/spawner.ts", import.meta.url);
  const pool = new SpawnerPool({ warm: 1, idleMs: 20, module });
  try {
    const a = await pool.acquire("d");
    const b = await pool.acquire("d");
    const died = await a.spawner.spawn({ ...spec, argv: [...spec.argv, DIE] }).then(
      () => assert.fail("the spawn was answered"),
      (err) => err,
    );
    assert.ok(died instanceof SpawnFailure);
    assert.equal(died.kind, "died");
    assert.equal(reap(died.orphan!.pid), 7, "the child it started is not the orphan reported");
    await a.spawner.stopped;
    assert.deepEqual(pool.workers(), { warm: 1, bound: 0 });
    await assert.rejects(() => b.spawner.spawn(spec), SpawnFailure);
    const c = await pool.acquire("d");
    assert.notEqual(c.spawner, a.spawner);
    assert.equal(reap((await c.spawner.spawn(spec)).pid), 7);
    a.release();
    b.release();
    c.release();
  } finally {
    await pool.close();
  }
});

/** The terminal masters (`/dev/ptmx`) this process holds open. */
function ptmxOpen(): number {
  let n = 0;
  for (const e of Deno.readDirSync("/proc/self/fd")) {
    try {
      if (Deno.readLinkSync(`/proc/self/fd/${e.name}`) === "/dev/ptmx") n++;
    } catch { /* closed meanwhile */ }
  }
  return n;
}

/** What an exited child wrote to its terminal (then the master reads EIO: no slave is open). */
function drain(master: number): string {
  const buf = new Uint8Array(4096);
  let out = "";
  for (let n = libc().read(master, buf, 4096n); n > 0; n = libc().read(master, buf, 4096n)) {
    out += new TextDecoder().decode(buf.subarray(0, n));
  }
  return out;
}

Deno.test("a worker opens the next spawn's terminal ahead, in the size asked for; stopping it closes that one", async () => {
  const pool = new SpawnerPool({ warm: 1, idleMs: 60_000 });
  const before = ptmxOpen();
  try {
    const lease = await pool.acquire("open");
    const tty = (rows: number, cols: number) => ({
      argv: ["/bin/sh", "-c", "stty size"],
      env: [],
      cwd: "/",
      stdio: { kind: "pty" as const, size: { rows, cols } },
    });
    const outputs: string[] = [];
    for (const [rows, cols] of [[24, 80], [30, 100], [7, 33]]) {
      const child = await lease.spawner.spawn(tty(rows, cols));
      assert.equal(reap(child.pid), 0);
      outputs.push(drain(child.master!).trim());
      libc().close(child.master!);
    }
    // The first opened its own; the next two took the one opened ahead after each reply.
    assert.deepEqual(outputs, ["24 80", "30 100", "7 33"]);
    assert.equal(ptmxOpen(), before + 1, "one terminal is held ahead");
    lease.release();
  } finally {
    await pool.close();
  }
  assert.equal(ptmxOpen(), before, "the terminal held ahead outlived its worker");
});
