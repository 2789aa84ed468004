/**
 * The terminal probe on real PTYs: a `cat` blocked reading its terminal is waiting for input,
 * asked again and again; and however many terminals are asked, the probes hold the files of at
 * most MAX_HELD foreground leaders open (two descriptors each), while every probe, its files
 * closed or not, still answers.
 *
 * @module
 */

import assert from "node:assert/strict";
import { libc } from "../../../src/ffi/libc.ts";
import { spawnChild } from "../../../src/pty/spawn.ts";
import { MAX_HELD, TerminalProbe } from "../../../src/pty/terminal_input.ts";

function openFds(): number {
  return [...Deno.readDirSync("/proc/self/fd")].length;
}

/** `n` cats on PTYs of their own, each with a probe. */
function cats(n: number) {
  const spawned = Array.from({ length: n }, () =>
    spawnChild({
      argv: ["cat"],
      env: ["PATH=/usr/bin:/bin"],
      cwd: "/",
      stdio: { kind: "pty", size: { cols: 80, rows: 24 } },
    }));
  const probes = spawned.map((s) => new TerminalProbe(s.master!, s.pid));
  return {
    probes,
    /**
     * Waits until every cat reads its terminal: nothing announces that a process blocked in a
     * read, so this asks each probe until it says so (at most 2,000 rounds, 5 ms apart).
     */
    async reading(): Promise<void> {
      const pending = new Set(probes);
      for (let round = 0; pending.size > 0; round++) {
        assert.ok(round < 2000, `${pending.size} of ${n} cats never seen reading`);
        for (const p of pending) if (p.ask()?.waiting) pending.delete(p);
        if (pending.size > 0) await new Promise((resolve) => setTimeout(resolve, 5));
      }
    },
    [Symbol.dispose]() {
      for (const p of probes) p.close();
      for (const s of spawned) {
        Deno.kill(s.pid, "SIGKILL");
        libc().close(s.master!);
        libc().waitpid(s.pid, new Uint8Array(4), 0);
      }
    },
  };
}

Deno.test("terminal probe: at most MAX_HELD leaders' files are open, and every probe answers", async () => {
  const n = MAX_HELD + 20;
  const before = openFds();
  using sessions = cats(n);
  const masters = openFds() - before;
  assert.equal(masters, n);
  await sessions.reading();
  for (let round = 0; round < 2; round++) {
    for (const probe of sessions.probes) {
      assert.deepEqual(probe.ask(), { waiting: true, echo: true });
    }
    assert.equal(openFds() - before - masters, 2 * MAX_HELD);
  }
  // The last asked hold their files; closing a probe releases its two descriptors.
  for (const probe of sessions.probes.slice(-10)) probe.close();
  assert.equal(openFds() - before - masters, 2 * MAX_HELD - 20);
});
