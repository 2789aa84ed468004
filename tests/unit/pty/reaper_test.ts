/**
 * The one reaper for all session children (src/pty/reaper.ts), on real children of this test
 * process: exact exit codes and signals from SIGCHLD without a descriptor per child, a child
 * that exited before it was handed over, and a zombie it was not handed (left to its owner,
 * even while it stands first in the kernel's line of exited children).
 *
 * @module
 */

import assert from "node:assert/strict";
import { closeAll, libc } from "../../../src/ffi/libc.ts";
import { Reactor } from "../../../src/io/reactor.ts";
import { whenGone } from "../../../src/pty/gone.ts";
import { openPipe } from "../../../src/pty/open.ts";
import { type ExitStatus, watchedChildren, watchExit } from "../../../src/pty/reaper.ts";
import { spawnChild } from "../../../src/pty/spawn.ts";

/**
 * Starts `sh -c script` with pipes for stdio (this side's ends closed at once; `stdin`, the read
 * end of a pipe of the caller's, instead of a new one): its pid.
 */
function start(script: string, stdin?: number): number {
  const [inRead, inWrite] = stdin === undefined ? openPipe() : [stdin, -1];
  const [outRead, outWrite] = openPipe();
  try {
    return spawnChild({
      argv: ["/bin/sh", "-c", script],
      env: ["PATH=/usr/bin:/bin"],
      cwd: "/",
      stdio: { kind: "pipes", stdin: inRead, output: outWrite },
    }).pid;
  } finally {
    closeAll([...(stdin === undefined ? [inRead, inWrite] : []), outRead, outWrite]);
  }
}

/**
 * The test's reactor: a process's signal listeners do not keep Deno's event loop alive (the
 * server's reactor does, as this one does here).
 */
const reactor = new Reactor();

/** Resolves with `pid`'s status, told by the reaper. */
function exitOf(pid: number): Promise<ExitStatus> {
  const { promise, resolve } = Promise.withResolvers<ExitStatus>();
  watchExit(pid, resolve);
  return promise;
}

/** The descriptors this process has open. */
function openDescriptors(): number {
  return [...Deno.readDirSync("/proc/self/fd")].length;
}

/** Whether `pid` is a zombie of this process, not reaped yet (a /proc look, no wait). */
function isZombie(pid: number): boolean {
  return /^State:\s+Z/m.test(Deno.readTextFileSync(`/proc/${pid}/status`));
}

/** Resolves once `pid` has exited (its pidfd is readable: it is a zombie until reaped). */
async function exited(pid: number): Promise<void> {
  await whenGone(reactor, [pid], 10_000);
}

Deno.test("the reaper tells exact exit codes and signals of many children, with no descriptor each", async () => {
  // One pipe is every child's stdin: all are running (and watched) until its write end closes,
  // when each gets EOF at once.
  const [goRead, goWrite] = openPipe();
  // More than the reaper handles in one turn of the event loop.
  const codes = Array.from({ length: 150 }, (_, i) => i);
  const script = (code: number) => `read x; ` + (code % 10 === 9 ? "kill -9 $$" : `exit ${code}`);
  const exits = [exitOf(start(script(codes[0]), goRead))];
  const fds = openDescriptors();
  for (const code of codes.slice(1)) exits.push(exitOf(start(script(code), goRead)));
  assert.equal(watchedChildren(), codes.length);
  assert.equal(openDescriptors(), fds, "no descriptor is held per watched child");
  closeAll([goRead, goWrite]);
  const got = await Promise.all(exits);
  assert.deepEqual(got, codes.map((code) => code % 10 === 9 ? { code: 137, signal: 9 } : { code }));
  assert.equal(watchedChildren(), 0);
});

Deno.test("a child that exited before it was handed over is told all the same", async () => {
  const pid = start("exit 7");
  // A zombie before anybody told the reaper of it.
  await exited(pid);
  assert.ok(isZombie(pid));
  assert.deepEqual(await exitOf(pid), { code: 7 });
});

Deno.test("a zombie the reaper was not handed is left to its owner, even first in line", async () => {
  // Exits first: the kernel's peek (waitid P_ALL) shows it before the watched ones.
  const foreign = start("exit 5");
  await exited(foreign);
  assert.ok(isZombie(foreign));
  const watched = [start("sleep 0.05; exit 3"), start("sleep 0.05; kill -TERM $$")];
  const got = await Promise.all(watched.map(exitOf));
  assert.deepEqual(got, [{ code: 3 }, { code: 143, signal: 15 }]);
  assert.ok(isZombie(foreign), "the unwatched zombie is still there for its owner to reap");
  const status = new Int32Array(1);
  assert.equal(libc().waitpid(foreign, new Uint8Array(status.buffer), 0), foreign);
  assert.equal((status[0] >> 8) & 0xff, 5);
});

Deno.test("a child no longer watched is never reaped by the reaper", async () => {
  const pid = start("exit 4");
  const { promise, resolve } = Promise.withResolvers<ExitStatus>();
  const unwatch = watchExit(pid, resolve);
  unwatch();
  // Another watched child's exit makes the reaper look at every exited child.
  assert.deepEqual(await exitOf(start("exit 0")), { code: 0 });
  await exited(pid);
  assert.ok(isZombie(pid));
  const status = new Int32Array(1);
  assert.equal(libc().waitpid(pid, new Uint8Array(status.buffer), 0), pid);
  assert.equal((status[0] >> 8) & 0xff, 4);
  assert.equal(await Promise.race([promise, Promise.resolve("untold")]), "untold");
});

Deno.test("close the test's reactor", async () => {
  await reactor.close();
});
