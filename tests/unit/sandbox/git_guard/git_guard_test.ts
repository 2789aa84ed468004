/**
 * The git guard (src/sandbox/git_guard/git_guard.ts) when the server has no descriptor free: a
 * `.git` that appears then cannot be opened to be secured (the kernel's event for it cannot even be
 * resolved, so every root must be looked through again), and each start that asks is refused as the
 * server's shortage (`out_of_resources`, a 503 to try again), not as a sandbox failure or an
 * internal error, until descriptors are back and the next start's look succeeds. The shortage is
 * this process's own, for one synchronous call: the soft limit of open files is lowered to what is
 * open, then put back.
 *
 * @module
 */

import assert from "node:assert/strict";
import { GitGuard } from "../../../../src/sandbox/git_guard/git_guard.ts";
import { sandboxOwners } from "../../../../src/sandbox/identity/identity.ts";
import { Reactor } from "../../../../src/io/reactor.ts";
import { OutOfResourcesError } from "../../../../src/errors.ts";
import { errno, rawSyscall } from "../../../../src/ffi/libc.ts";
import { limitLeaving, openFiles } from "../../../helpers/descriptors.ts";

const SYS_PRLIMIT64 = 302;
const RLIMIT_NOFILE = 7;

/** The bytes of a `struct rlimit` (soft, hard). */
function bytes(limit: BigUint64Array<ArrayBuffer>): Uint8Array<ArrayBuffer> {
  return new Uint8Array(limit.buffer);
}

/** Runs `fn` (synchronous) with no descriptor free in this process, then puts the limit back. */
function withNoDescriptorFree<T>(fn: () => T): T {
  const old = new BigUint64Array(2);
  assert.equal(rawSyscall(SYS_PRLIMIT64, 0, RLIMIT_NOFILE, 0, bytes(old)), 0, `errno ${errno()}`);
  const soft = limitLeaving(openFiles(Deno.pid), 0, () => true);
  const low = new BigUint64Array([BigInt(soft), old[1]]);
  assert.equal(rawSyscall(SYS_PRLIMIT64, 0, RLIMIT_NOFILE, bytes(low), 0), 0, `errno ${errno()}`);
  try {
    return fn();
  } finally {
    assert.equal(rawSyscall(SYS_PRLIMIT64, 0, RLIMIT_NOFILE, bytes(old), 0), 0, `errno ${errno()}`);
  }
}

Deno.test("git guard: a .git it cannot open for want of a descriptor is out_of_resources, then secured", async () => {
  const reactor = new Reactor();
  const workspace = await Deno.makeTempDir({ prefix: "uexec-guard-" });
  // A uid range no file here belongs to: the sandbox's owners.
  const owners = sandboxOwners({
    spawner: 2_000_000,
    first: 2_000_001,
    last: 2_000_009,
    gid: 2_000_000,
  });
  const guard = new GitGuard({ names: new Set([".git"]), owners, reactor });
  try {
    guard.guard(workspace);
    guard.settle();
    const settled = () => {
      try {
        guard.settle();
        return undefined;
      } catch (err) {
        return err;
      }
    };
    const [refused, again] = withNoDescriptorFree(() => {
      Deno.mkdirSync(`${workspace}/.git`);
      // The second start is refused too: what could not be looked at is not forgotten.
      return [settled(), settled()];
    });
    assert.ok(refused instanceof OutOfResourcesError, String(refused));
    assert.ok(again instanceof OutOfResourcesError, String(again));
    assert.equal(refused.code, "out_of_resources");
    assert.match(
      refused.message,
      /^the server is out of file descriptors \((cannot make .*\/\.git read-only for the sandbox|cannot look through the workspaces for new protected directories): .*(EMFILE|Too many open files).*\); nothing was started/,
    );
    // Descriptors back: the next start's settle secures it and lets the start go on.
    guard.settle();
  } finally {
    guard.close();
    await reactor.close();
    await Deno.remove(workspace, { recursive: true });
  }
});
