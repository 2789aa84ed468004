/**
 * Write grants for one session uid (src/sandbox/grants/write_grant.ts), on real files as root: what
 * gets an ACL entry and what is left alone, and that taking the grant back restores every ACL
 * exactly and gives what the session made to the directory's owner; a grant a killed server
 * held is taken back from its journal record just as exactly.
 *
 * @module
 */

import assert from "node:assert/strict";
import { PERM, permits, readAcl, TAG, writeAcl } from "../../../../src/sandbox/fs/acl.ts";
import { GrantJournal } from "../../../../src/sandbox/grants/grant_journal.ts";
import { GrantThread } from "../../../../src/sandbox/grants/grant_thread.ts";
import { UidPool } from "../../../../src/sandbox/identity/uids.ts";
import { GrantError, WriteGrant } from "../../../../src/sandbox/grants/write_grant.ts";
import { sandboxIds } from "../../../../src/sandbox/identity/identity.ts";

/** This test process's own block of session uids (never the default range a server may hold). */
const IDS = sandboxIds()!;
const UID = IDS.first + 122;
const GID = IDS.gid;
const owners = {
  isUid: (uid: number) => uid >= IDS.spawner && uid <= IDS.last,
  isGid: (gid: number) => gid === GID,
};
const options = { uid: UID, gid: GID, owners, protectedNames: new Set([".git", ".uexec"]) };

/** What the uid may do with `path` now. */
function may(path: string, want: number): boolean {
  const info = Deno.lstatSync(path);
  const owner = { uid: info.uid!, gid: info.gid!, mode: info.mode! & 0o7777 };
  return permits(owner, readAcl(path, "access"), UID, GID, want);
}

/** Every entry's mode and ACLs beneath `dir`, to compare before and after. */
function snapshot(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  const visit = (path: string) => {
    const info = Deno.lstatSync(path);
    out[path] = `${info.uid}:${info.gid} ${(info.mode! & 0o7777).toString(8)} ` +
      JSON.stringify(info.isSymlink ? null : readAcl(path, "access")) +
      (info.isDirectory ? ` ${JSON.stringify(readAcl(path, "default"))}` : "");
    if (info.isDirectory) { for (const e of Deno.readDirSync(path)) visit(`${path}/${e.name}`); }
  };
  visit(dir);
  return out;
}

async function tree(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "uexec-grant-" });
  await Deno.chmod(dir, 0o755);
  await Deno.mkdir(`${dir}/sub`, { mode: 0o755 });
  await Deno.writeTextFile(`${dir}/sub/readable`, "r\n", { mode: 0o644 });
  await Deno.writeTextFile(`${dir}/script`, "#!/bin/sh\n", { mode: 0o755 });
  await Deno.writeTextFile(`${dir}/secret`, "s\n", { mode: 0o600 });
  await Deno.mkdir(`${dir}/closed`, { mode: 0o700 });
  await Deno.writeTextFile(`${dir}/closed/inside`, "i\n", { mode: 0o644 });
  await Deno.writeTextFile(`${dir}/linked`, "l\n", { mode: 0o644 });
  await Deno.link(`${dir}/linked`, `${dir}/sub/link`);
  await Deno.writeTextFile(`${dir}/setuid`, "x\n", { mode: 0o4755 });
  await Deno.chmod(`${dir}/setuid`, 0o4755);
  await Deno.mkdir(`${dir}/.git`, { mode: 0o755 });
  await Deno.mkdir(`${dir}/sub/.git`, { mode: 0o755 });
  await Deno.writeTextFile(`${dir}/sub/.git/HEAD`, "ref\n", { mode: 0o644 });
  await Deno.mkdir(`${dir}/other`, { mode: 0o755 });
  await Deno.chown(`${dir}/other`, IDS.first + 998, GID);
  await Deno.symlink("/etc", `${dir}/etc-link`);
  await Deno.mkdir(`${dir}/shared`);
  await Deno.chmod(`${dir}/shared`, 0o1777);
  await Deno.writeTextFile(`${dir}/shared/theirs`, "t\n", { mode: 0o644 });
  await Deno.chown(`${dir}/shared/theirs`, 1234, 1234);
  return dir;
}

Deno.test("a write grant: write where the uid reads, nothing else, and taken back exactly", async () => {
  const dir = await tree();
  try {
    const before = snapshot(dir);
    assert.ok(!may(dir, PERM.W) && !may(`${dir}/sub/readable`, PERM.W), "control");
    const grant = WriteGrant.grant([{ path: dir, protected: false }], options);
    assert.ok(may(dir, 7) && may(`${dir}/sub`, 7));
    assert.ok(may(`${dir}/sub/readable`, PERM.R | PERM.W));
    assert.ok(may(`${dir}/script`, PERM.R | PERM.W | PERM.X), "execute where the owner has it");
    assert.ok(!may(`${dir}/sub/readable`, PERM.X));
    // Never more than it could read before, never through another name, never set-id.
    assert.ok(!may(`${dir}/secret`, PERM.R) && !may(`${dir}/secret`, PERM.W));
    assert.ok(!may(`${dir}/closed`, PERM.W) && !may(`${dir}/closed/inside`, PERM.W));
    assert.ok(!may(`${dir}/linked`, PERM.W), "a file with several links");
    assert.ok(!may(`${dir}/setuid`, PERM.W));
    assert.ok(!may(`${dir}/sub/.git`, PERM.W) && !may(`${dir}/sub/.git/HEAD`, PERM.W));
    assert.ok(!may(`${dir}/.git`, PERM.W), "a .git right beneath the granted directory too");
    assert.ok(!may(`${dir}/shared/theirs`, PERM.W), "another user's file in a sticky directory");
    assert.equal(readAcl(`${dir}/other`, "access"), null, "another session's directory");
    assert.equal(readAcl("/etc", "access"), null, "a symlink is not followed");
    assert.equal(grant.entries, 4);
    // Another session's uid (a concurrent session of the same group) gets none of it.
    for (const path of [dir, `${dir}/sub`, `${dir}/sub/readable`, `${dir}/script`]) {
      const info = Deno.lstatSync(path);
      const owner = { uid: info.uid!, gid: info.gid!, mode: info.mode! & 0o7777 };
      assert.ok(!permits(owner, readAcl(path, "access"), UID + 7, GID, PERM.W), path);
    }
    // What the session makes meanwhile is its own (the test plays the session as root).
    await Deno.writeTextFile(`${dir}/sub/made`, "m\n", { mode: 0o775 });
    await Deno.mkdir(`${dir}/newdir`);
    await Deno.chmod(`${dir}/newdir`, 0o775);
    await Deno.chown(`${dir}/sub/made`, UID, GID);
    await Deno.chown(`${dir}/newdir`, UID, GID);
    grant.revoke();
    const after = snapshot(dir);
    // Given to the directory's owner, with no write for group and others.
    assert.equal(after[`${dir}/sub/made`], `0:0 755 null`, "given to the directory's owner");
    assert.equal(after[`${dir}/newdir`], `0:0 755 null null`);
    delete after[`${dir}/sub/made`];
    delete after[`${dir}/newdir`];
    assert.deepEqual(after, before, "every ACL and mode as it was");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a write grant inside a protected directory: what the session made runs nothing", async () => {
  const dir = await tree();
  const git = `${dir}/sub/.git`;
  try {
    await Deno.mkdir(`${git}/samples`, { mode: 0o755 });
    await Deno.writeTextFile(`${git}/samples/pre-commit.sample`, "#!/bin/sh\n", { mode: 0o755 });
    const grant = WriteGrant.grant([{ path: git, protected: true }], options);
    assert.ok(may(git, 7) && may(`${git}/HEAD`, PERM.W));
    // A script (one the session could rename into hooks/) gets no write: what it runs stays.
    assert.ok(!may(`${git}/samples/pre-commit.sample`, PERM.W));
    await Deno.mkdir(`${git}/hooks`, { mode: 0o777 });
    await Deno.writeTextFile(`${git}/hooks/post-commit`, "#!/bin/sh\n", { mode: 0o777 });
    await Deno.chmod(`${git}/hooks/post-commit`, 0o777);
    await Deno.chmod(`${git}/hooks`, 0o777);
    for (const path of [`${git}/hooks`, `${git}/hooks/post-commit`]) {
      await Deno.chown(path, UID, GID);
    }
    grant.revoke();
    const after = snapshot(git);
    assert.equal(after[`${git}/hooks`], "0:0 755 null null");
    assert.equal(after[`${git}/hooks/post-commit`], "0:0 644 null");
    assert.equal(after[git], "0:0 755 null null");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a granted directory renamed meanwhile, or one above it, is taken back all the same", async () => {
  const dir = await tree();
  try {
    const before = snapshot(`${dir}/sub`);
    const grant = WriteGrant.grant([{ path: `${dir}/sub`, protected: false }], options);
    assert.ok(may(`${dir}/sub/readable`, PERM.W));
    // A sandboxed process that may write the parent moves the granted directory away.
    await Deno.rename(dir, `${dir}-moved`);
    assert.equal(grant.revoke(), true);
    const after = snapshot(`${dir}-moved/sub`);
    assert.deepEqual(
      after,
      Object.fromEntries(
        Object.entries(before).map(([path, state]) => [path.replace(dir, `${dir}-moved`), state]),
      ),
    );
  } finally {
    for (const path of [dir, `${dir}-moved`]) {
      await Deno.remove(path, { recursive: true }).catch(() => {});
    }
  }
});

Deno.test("what a session made in a granted directory is the owner's, not everyone's", async () => {
  const dir = await tree();
  try {
    const grant = WriteGrant.grant([{ path: dir, protected: false }], options);
    // The session makes a world-writable set-gid file and directory, and gives a host user an
    // ACL entry on one (the test plays the session as root).
    await Deno.writeTextFile(`${dir}/sub/open`, "#!/bin/sh\n");
    await Deno.mkdir(`${dir}/opendir`);
    await Deno.chmod(`${dir}/sub/open`, 0o2777);
    await Deno.chmod(`${dir}/opendir`, 0o3777);
    writeAcl(`${dir}/sub/open`, "access", [
      { tag: TAG.USER_OBJ, perm: 7, id: 0xffffffff },
      { tag: TAG.USER, perm: 7, id: 1234 },
      { tag: TAG.GROUP_OBJ, perm: 7, id: 0xffffffff },
      { tag: TAG.MASK, perm: 7, id: 0xffffffff },
      { tag: TAG.OTHER, perm: 7, id: 0xffffffff },
    ]);
    for (const path of [`${dir}/sub/open`, `${dir}/opendir`]) await Deno.chown(path, UID, GID);
    assert.equal(grant.revoke(), true);
    const after = snapshot(dir);
    assert.equal(after[`${dir}/sub/open`], "0:0 755 null");
    assert.equal(after[`${dir}/opendir`], "0:0 755 null null");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a bare repository a session made in a granted directory is not handed over whole", async () => {
  const dir = await tree();
  try {
    const grant = WriteGrant.grant([{ path: dir, protected: false }], options);
    // The session makes a directory shaped like a bare repository, whose configuration git (as
    // the directory's owner, root, once handed over) would trust: core.fsmonitor runs a command.
    const repo = `${dir}/trap`;
    for (const sub of ["", "/objects", "/refs"]) await Deno.mkdir(repo + sub);
    await Deno.writeTextFile(`${repo}/HEAD`, "ref: refs/heads/main\n");
    await Deno.writeTextFile(`${repo}/config`, "[core]\n\tfsmonitor = touch /tmp/pwned\n");
    // And a repository's parts in the granted directory itself, which root owns.
    await Deno.mkdir(`${dir}/objects`);
    await Deno.mkdir(`${dir}/refs`);
    await Deno.writeTextFile(`${dir}/HEAD`, "ref: refs/heads/main\n");
    for (
      const path of [repo, `${repo}/objects`, `${repo}/refs`, `${repo}/HEAD`, `${repo}/config`]
    ) {
      await Deno.chown(path, UID, GID);
    }
    for (const path of [`${dir}/objects`, `${dir}/refs`, `${dir}/HEAD`]) {
      await Deno.chown(path, UID, GID);
    }
    assert.equal(grant.revoke(), true);
    // Handed over (root's now), but without a HEAD git sees no repository in either.
    assert.equal(Deno.lstatSync(repo).uid, 0);
    for (const at of [repo, dir]) {
      const names = [...Deno.readDirSync(at)].map((e) => e.name);
      assert.ok(!names.includes("HEAD"), `${at}: ${names}`);
      assert.ok(names.some((n) => n.startsWith("HEAD.untrusted-")), `${at}: ${names}`);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("an entry renamed out of a granted directory loses the uid's entry all the same", async () => {
  const dir = await tree();
  const away = await Deno.makeTempDir({ prefix: "uexec-grant-away-" });
  try {
    const before = snapshot(`${dir}/sub`);
    const grant = WriteGrant.grant([{ path: dir, protected: false }], options);
    assert.ok(may(`${dir}/sub/readable`, PERM.W) && may(`${dir}/sub`, PERM.W));
    // The session moves a granted file and a granted directory out (same file system).
    await Deno.rename(`${dir}/sub/readable`, `${away}/readable`);
    await Deno.rename(`${dir}/sub`, `${away}/sub`);
    // And deletes another granted entry outright.
    await Deno.remove(`${dir}/script`);
    assert.equal(grant.revoke(), true);
    assert.ok(!may(`${away}/readable`, PERM.W), "the moved file");
    assert.ok(!may(`${away}/sub`, PERM.W), "the moved directory");
    assert.equal(readAcl(`${away}/readable`, "access"), null);
    const moved = snapshot(`${away}/sub`);
    assert.equal(moved[`${away}/sub`], before[`${dir}/sub`]);
  } finally {
    await Deno.remove(dir, { recursive: true });
    await Deno.remove(away, { recursive: true });
  }
});

Deno.test("a write grant fails closed: unreadable root, a symlink on the way, too many entries", async () => {
  const dir = await tree();
  try {
    const shared = WriteGrant.grant([{ path: `${dir}/shared`, protected: false }], options);
    assert.equal(shared.entries, 0, "a sticky world-writable root: the uid may already write");
    await Deno.writeTextFile(`${dir}/shared/mine`, "m\n");
    await Deno.chown(`${dir}/shared/mine`, UID, GID);
    shared.revoke();
    assert.equal(Deno.statSync(`${dir}/shared/mine`).uid, 0, "what it made there is taken back");
    assert.equal(Deno.statSync(`${dir}/shared/theirs`).uid, 1234, "the others' stay theirs");
    assert.throws(
      () => WriteGrant.grant([{ path: `${dir}/closed`, protected: false }], options),
      /cannot grant write access to .*closed: its uid cannot read .*a write grant never widens/,
    );
    assert.throws(
      () => WriteGrant.grant([{ path: `${dir}/etc-link`, protected: false }], options),
      /is gone or is reached through a symlink/,
    );
    const before = snapshot(dir);
    const many = `${dir}/many`;
    await Deno.mkdir(many, { mode: 0o755 });
    for (let i = 0; i < 100; i++) Deno.writeTextFileSync(`${many}/${i}`, "");
    assert.throws(
      () => WriteGrant.grant([{ path: dir, protected: false }], { ...options, maxEntries: 100 }),
      /more than 100 entries; grant a smaller directory/,
    );
    await Deno.remove(many, { recursive: true });
    assert.deepEqual(snapshot(dir), before, "a refused grant leaves nothing behind");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("two sessions granted one directory: each takes back only its own entry", async () => {
  const dir = await tree();
  const file = `${dir}/sub/readable`;
  const held = `${dir}/sub/held`;
  const other = { ...options, uid: UID + 1 };
  const mayOther = (path: string, want: number) => {
    const info = Deno.lstatSync(path);
    const owner = { uid: info.uid!, gid: info.gid!, mode: info.mode! & 0o7777 };
    return permits(owner, readAcl(path, "access"), UID + 1, GID, want);
  };
  try {
    // An ACL whose mask holds a named group to read only, though its entry says more: the
    // uid's entry would need the mask widened, which would widen the group's too.
    await Deno.writeTextFile(held, "h\n", { mode: 0o644 });
    writeAcl(held, "access", [
      { tag: TAG.USER_OBJ, perm: 6, id: 0xffffffff },
      { tag: TAG.GROUP_OBJ, perm: 4, id: 0xffffffff },
      { tag: TAG.GROUP, perm: 6, id: 4242 },
      { tag: TAG.MASK, perm: 4, id: 0xffffffff },
      { tag: TAG.OTHER, perm: 4, id: 0xffffffff },
    ]);
    const before = snapshot(dir);
    const first = WriteGrant.grant([{ path: dir, protected: false }], options);
    const second = WriteGrant.grant([{ path: dir, protected: false }], other);
    assert.ok(may(file, PERM.W) && mayOther(file, PERM.W));
    assert.ok(!may(held, PERM.W) && snapshot(dir)[held] === before[held], "left alone");
    assert.equal(first.revoke(), true);
    assert.ok(!may(file, PERM.W) && !may(dir, PERM.W), "the first uid's entries are gone");
    assert.ok(mayOther(file, PERM.W) && mayOther(dir, PERM.W), "the second keeps its grant");
    assert.equal(second.revoke(), true);
    assert.deepEqual(snapshot(dir), before);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a grant a killed server held: taken back from its record, every entry exactly", async () => {
  const dir = await tree();
  const journalDir = await Deno.makeTempDir({ prefix: "uexec-journal-" });
  try {
    const before = snapshot(dir);
    const journal = new GrantJournal(journalDir);
    const roots = [{ path: dir, protected: false }];
    journal.add(UID, roots);
    const record = `${journalDir}/${UID}.json`;
    assert.equal(Deno.statSync(record).mode! & 0o777, 0o600);
    WriteGrant.grant(roots, options);
    await Deno.writeTextFile(`${dir}/sub/made`, "m\n", { mode: 0o775 });
    await Deno.chown(`${dir}/sub/made`, UID, GID);
    // The server "dies" holding it. While its instance runs, its record is not a dead one.
    assert.deepEqual(journal.dead(), []);
    const held = JSON.parse(Deno.readTextFileSync(record));
    Deno.writeTextFileSync(record, JSON.stringify({ ...held, instance: "i999999999-1" }));
    Deno.writeTextFileSync(`${journalDir}/7.json`, '{"instance":"i1-1","uid":7,"roots":"/"}');
    // A record a dead instance was writing when it died: its grant never began.
    Deno.writeTextFileSync(`${journalDir}/8.json.i999999999-1.part`, "{");
    // One a live instance (this one) is writing now stays.
    const writing = `${journalDir}/9.json.${held.instance}.part`;
    Deno.writeTextFileSync(writing, "{");
    // One whose contents do not match its name cannot be trusted either.
    Deno.writeTextFileSync(`${journalDir}/6.json`, JSON.stringify({ ...held, uid: 5 }));
    const dead = journal.dead().sort((a, b) => a.file.localeCompare(b.file));
    assert.deepEqual(dead, [
      { file: record, uid: UID, record: { instance: "i999999999-1", uid: UID, roots } },
      { file: `${journalDir}/6.json`, uid: 6, error: "not a grant record" },
      { file: `${journalDir}/7.json`, uid: 7, error: "not a grant record" },
    ]);
    assert.deepEqual([...Deno.readDirSync(journalDir)].map((e) => e.name).sort(), [
      `${UID}.json`,
      "6.json",
      "7.json",
      `9.json.${held.instance}.part`,
    ]);
    assert.equal(WriteGrant.takeBack(roots, options), true);
    const after = snapshot(dir);
    assert.equal(after[`${dir}/sub/made`], `0:0 755 null`, "given to the directory's owner");
    delete after[`${dir}/sub/made`];
    assert.deepEqual(after, before, "every ACL and mode as it was");
  } finally {
    await Deno.remove(dir, { recursive: true });
    await Deno.remove(journalDir, { recursive: true });
  }
});

Deno.test("a uid whose grant could not be taken back is never handed out", async () => {
  const reaped: number[] = [];
  const pool = new UidPool(
    10,
    14,
    (batch) => {
      reaped.push(...batch);
      return Promise.resolve();
    },
    8,
    new Set([11, 13]),
  );
  const taken = [await pool.take(), await pool.take(), await pool.take()];
  assert.deepEqual(taken, [10, 12, 14]);
  assert.deepEqual(reaped, [10, 12, 14]);
  await assert.rejects(pool.take(), /every sandbox uid is held/);
});

Deno.test("grants on their own thread: made, taken back exactly, and failing closed", async () => {
  const dir = await tree();
  const thread = new GrantThread();
  const spec = {
    uid: UID,
    ids: IDS,
    protectedNames: [".git", ".uexec"],
  };
  try {
    const before = snapshot(dir);
    const roots = [{ path: dir, protected: false }];
    const grant = await thread.grant(roots, spec);
    assert.ok(may(`${dir}/sub/readable`, PERM.R | PERM.W));
    assert.equal(await thread.revoke(grant), true);
    assert.deepEqual(snapshot(dir), before);
    // Taken back once: a second take-back, or one of a grant the thread never made, is not
    // reported as done.
    assert.equal(await thread.revoke(grant), false);
    const refused = thread.grant([{ path: `${dir}/closed`, protected: false }], spec);
    await assert.rejects(refused, (err) => err instanceof GrantError && err.takenBack);
    // Stopping lets what was asked finish, then refuses what is asked after, as nothing done.
    const pending = thread.grant(roots, spec);
    const closed = thread.close();
    const held = await pending;
    await closed;
    await assert.rejects(
      thread.grant(roots, spec),
      (err) => err instanceof GrantError && err.takenBack,
    );
    assert.equal(await thread.revoke(held), false, "a stopped thread takes nothing back");
    // What it held is taken back as a dead server's is.
    assert.equal(WriteGrant.takeBack(roots, options), true);
    assert.deepEqual(snapshot(dir), before);
  } finally {
    await thread.close();
    await Deno.remove(dir, { recursive: true });
  }
});
