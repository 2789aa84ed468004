/**
 * The sandbox domain registry's spares: each domain makes its next session's uid and private
 * directory ahead, but only the most recently used `maxSpares` domains keep one, so commands in
 * thousands of directories of their own cannot hold the uid range; its account files, tried
 * again after a failure; and the directories dead server instances left. Needs root (the
 * sessions' own uids).
 *
 * @module
 */

import assert from "node:assert/strict";
import { Reactor } from "../../../src/io/reactor.ts";
import { type DomainOptions, SandboxDomains } from "../../../src/sandbox/domains.ts";
import { instanceName } from "../../../src/sandbox/instance.ts";
import { exists } from "../../helpers/fs.ts";
import { testDomains } from "../../helpers/domains.ts";

/** Runs `fn` with a registry over a fresh world-writable workspace, closed and removed after. */
async function withDomains(
  extra: Partial<DomainOptions>,
  fn: (domains: SandboxDomains, workspace: string) => Promise<void>,
): Promise<void> {
  const workspace = Deno.makeTempDirSync({ prefix: "uexec-domains-" });
  Deno.chmodSync(workspace, 0o777);
  const reactor = new Reactor();
  const domains = testDomains(workspace, reactor, extra);
  try {
    await fn(domains, workspace);
  } finally {
    await domains.close();
    await reactor.close();
    Deno.removeSync(workspace, { recursive: true });
  }
}

Deno.test({
  name: "domains: only the most recently used keep a spare uid and directory",
  ignore: Deno.uid() !== 0,
  fn: () =>
    withDomains({ maxSpares: 2 }, async (domains, workspace) => {
      for (const name of ["a", "b", "c", "a"]) {
        Deno.mkdirSync(`${workspace}/${name}`, { recursive: true });
        const choice = domains.choose("workspace-write", `${workspace}/${name}`);
        const session = await choice.session();
        assert.ok(session.uid !== undefined && session.uid > 0);
        session.release();
        assert.ok(domains.spares <= 2, `${domains.spares} domains hold a spare`);
      }
      // "b" and "a", most recently used; "a" had given its spare up to "c" and made a new one.
      assert.equal(domains.spares, 2);
    }),
});

Deno.test({
  name: "domains: account files that could not be written are written on the next start",
  ignore: Deno.uid() !== 0,
  fn: () =>
    withDomains({}, async (domains, workspace) => {
      const choice = domains.choose("workspace-write", workspace);
      const root = choice.policy.writableRoots.find((p) =>
        /\/uexec-i\d+-\d+\/domain-[^/]+$/.test(p)
      )!;
      // A directory where the passwd file goes: writing it fails.
      Deno.mkdirSync(`${root}/passwd`);
      assert.throws(() => choice.restriction!(), /directory/i);
      await assert.rejects(choice.session(), /directory/i);
      Deno.removeSync(`${root}/passwd`);
      const { accounts } = choice.restriction!();
      assert.deepEqual(accounts, { passwd: `${root}/passwd`, group: `${root}/group` });
      assert.match(Deno.readTextFileSync(accounts.group), /^uexec:x:\d+:$/m);
      const session = await choice.session();
      const listed = Deno.readTextFileSync(accounts.passwd);
      assert.match(listed, new RegExp(`^uexec-${session.uid}:x:${session.uid}:`, "m"));
      session.release();
    }),
});

Deno.test({
  name: "domains: directories of dead instances go; a live one's and another user's stay",
  ignore: Deno.uid() !== 0,
  fn: async () => {
    const tmp = Deno.makeTempDirSync({ prefix: "uexec-tmpdir-" });
    const saved = Deno.env.get("TMPDIR");
    Deno.env.set("TMPDIR", tmp);
    try {
      const live = `${tmp}/uexec-${instanceName()}`;
      const dead = `${tmp}/uexec-i4194305-1`; // above any pid_max: no such process
      const foreign = `${tmp}/uexec-i4194306-1`;
      const other = `${tmp}/uexec-domain-0123`;
      for (const dir of [live, dead, foreign, other]) {
        Deno.mkdirSync(`${dir}/domain-x/s/home`, { recursive: true });
      }
      Deno.chownSync(foreign, 12345, 12345);
      assert.equal(await SandboxDomains.removeDead(), 1);
      assert.deepEqual([live, dead, foreign, other].map(exists), [true, false, true, true]);
    } finally {
      if (saved === undefined) Deno.env.delete("TMPDIR");
      else Deno.env.set("TMPDIR", saved);
      Deno.removeSync(tmp, { recursive: true });
    }
  },
});

Deno.test("a server that is not root removes its plain instance directory (no umount to refuse)", async () => {
  const dir = Deno.makeTempDirSync({ prefix: `uexec-${instanceName()}-plain-` });
  const NOBODY = 65534;
  Deno.chownSync(dir, NOBODY, NOBODY);
  const worker = new Worker(
    new URL("../../fixtures/unprivileged_remove_worker.ts", import.meta.url),
    { type: "module" },
  );
  try {
    const failed = await new Promise<string | null>((resolve, reject) => {
      worker.onmessage = (e) => resolve(e.data);
      worker.onerror = (e) => reject(e);
      worker.postMessage({ dir, uid: NOBODY });
    });
    assert.equal(failed, null);
    assert.equal(exists(dir), false);
  } finally {
    worker.terminate();
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
});
