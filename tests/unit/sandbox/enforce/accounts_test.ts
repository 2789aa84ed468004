/**
 * A domain's account files: the host's entries, then one fixed-size slot per live session that
 * is written in place and blanked when the session ends, so no other session's line moves.
 *
 * @module
 */

import assert from "node:assert/strict";
import { DomainAccounts } from "../../../../src/sandbox/enforce/accounts.ts";

const GID = 2000000000;

/**
 * The slots after the host's entries: `#` for a blank one, else its entry (each entry is
 * followed by a comment line that pads its slot).
 */
function slots(text: string, host: string): string[] {
  const lines = text.slice(host.length).split("\n");
  assert.equal(lines.pop(), "", "the file ends with a newline");
  const found: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    assert.match(lines[i], /^(#\s*|uexec-\d+:.*)$/);
    found.push(lines[i].startsWith("#") ? "#" : lines[i]);
    if (!lines[i].startsWith("#")) assert.match(lines[++i], /^#\s*$/, "padding");
  }
  return found;
}

Deno.test("accounts: sessions get slots in place, reused once free; the host's entries come first", async () => {
  const root = await Deno.makeTempDir({ prefix: "uexec-accounts-" });
  try {
    const host = await Deno.readTextFile("/etc/passwd");
    const accounts = DomainAccounts.create(root, GID);
    assert.ok(accounts);
    const { passwd, group } = accounts.files;
    assert.equal((await Deno.stat(passwd)).mode! & 0o777, 0o644);
    assert.equal((await Deno.stat(group)).mode! & 0o777, 0o644);
    assert.equal(await Deno.readTextFile(passwd), host);
    assert.equal(
      await Deno.readTextFile(group),
      `${await Deno.readTextFile("/etc/group")}uexec:x:${GID}:\n`,
    );

    const entry = (uid: number) =>
      `uexec-${uid}:x:${uid}:${GID}:uexec session:${root}/s${uid}/home:/bin/sh`;
    const unlistA = accounts.add(2000000001, `${root}/s2000000001/home`);
    const unlistB = accounts.add(2000000002, `${root}/s2000000002/home`);
    const two = await Deno.readTextFile(passwd);
    assert.ok(two.startsWith(host));
    assert.deepEqual(slots(two, host), [entry(2000000001), entry(2000000002)]);

    unlistA();
    unlistA(); // once is enough; a second call changes nothing
    const freed = await Deno.readTextFile(passwd);
    assert.deepEqual(slots(freed, host), ["#", entry(2000000002)]);
    assert.equal(freed.length, two.length, "B's line did not move");
    assert.equal(freed.indexOf(entry(2000000002)), two.indexOf(entry(2000000002)));

    const unlistC = accounts.add(2000000003, `${root}/s2000000003/home`);
    const reused = await Deno.readTextFile(passwd);
    assert.deepEqual(slots(reused, host), [entry(2000000003), entry(2000000002)]);
    assert.equal(reused.length, two.length, "C took A's slot");

    unlistB();
    unlistC();
    assert.deepEqual(slots(await Deno.readTextFile(passwd), host), ["#", "#"]);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("accounts: a group the host already has is not added again", async () => {
  const root = await Deno.makeTempDir({ prefix: "uexec-accounts-" });
  try {
    const accounts = DomainAccounts.create(root, 0);
    assert.equal(
      await Deno.readTextFile(accounts!.files.group),
      await Deno.readTextFile("/etc/group"),
    );
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("accounts: none for a directory whose path an entry cannot hold", async () => {
  const parent = await Deno.makeTempDir({ prefix: "uexec-accounts-" });
  const root = `${parent}/a:b`;
  try {
    await Deno.mkdir(root);
    assert.equal(DomainAccounts.create(root, GID), null);
    assert.deepEqual([...Deno.readDirSync(root)], []);
  } finally {
    await Deno.remove(parent, { recursive: true });
  }
});
