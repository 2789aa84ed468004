/**
 * The sandbox domain registry's spares: each domain makes its next session's uid and private
 * directory ahead, but only the most recently used `maxSpares` domains keep one, so commands in
 * thousands of directories of their own cannot hold the uid range; and its account files, tried
 * again after a failure. Needs root (the sessions' own uids).
 *
 * @module
 */

import assert from "node:assert/strict";
import { Reactor } from "../src/io/reactor.ts";
import type { DomainOptions, SandboxDomains } from "../src/sandbox/domains.ts";
import { testDomains } from "./helpers/domains.ts";

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
        const choice = await domains.choose("workspace-write", `${workspace}/${name}`);
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
      const choice = await domains.choose("workspace-write", workspace);
      const root = choice.policy.writableRoots.find((p) => /\/uexec-domain-[^/]+$/.test(p))!;
      // A directory where the passwd file goes: writing it fails.
      Deno.mkdirSync(`${root}/passwd`);
      await assert.rejects(choice.restriction!(), /directory/i);
      await assert.rejects(choice.session(), /directory/i);
      Deno.removeSync(`${root}/passwd`);
      const { accounts } = await choice.restriction!();
      assert.deepEqual(accounts, { passwd: `${root}/passwd`, group: `${root}/group` });
      assert.match(Deno.readTextFileSync(accounts.group), /^uexec:x:\d+:$/m);
      const session = await choice.session();
      const listed = Deno.readTextFileSync(accounts.passwd);
      assert.match(listed, new RegExp(`^uexec-${session.uid}:x:${session.uid}:`, "m"));
      session.release();
    }),
});
