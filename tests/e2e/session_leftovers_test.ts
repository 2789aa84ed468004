/**
 * Nothing one session leaves behind reaches another, end to end through real root servers:
 * a uid comes back only after the whole range went round, across restarts too, and then without
 * the files its earlier session kept to itself.
 *
 * @module
 */

import assert from "node:assert/strict";
import { type Client, startServer } from "../helpers/server.ts";
import { UidPool } from "../../src/sandbox/identity/uids.ts";
import { takeBackFiles } from "../../src/sandbox/identity/uid_files.ts";
import { CURSOR_DIR } from "../../src/sandbox/identity/uid_cursor.ts";

// deno-lint-ignore no-explicit-any
type Body = any;

/**
 * A small explicit range of its own (outside the default pool), so a restart gets it again;
 * `forget` removes the cursor its servers left on the host (uid_cursor.ts).
 */
function uidRange(size: number): { range: string; first: number; forget(): Promise<void> } {
  const first = 1_900_000_000 + Math.floor(Math.random() * 1_000_000) * 64;
  const range = `${first}-${first + size}`;
  // The cursor's range starts at the first session uid (the range's first is the spawners').
  const cursor = `${CURSOR_DIR}/${first + 1}-${first + size}`;
  return { range, first, forget: () => Deno.remove(cursor).catch(() => {}) };
}

/** `POST /v1/exec_command` without a login shell or terminal; asserts 200, returns the body. */
async function exec(client: Client, cmd: string, extra: Record<string, unknown> = {}) {
  const r = await client.post("/v1/exec_command", { cmd, login: false, tty: false, ...extra });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.session_id, undefined, "the command should have ended");
  return r.body as Body;
}

Deno.test("the uid pool goes round the whole range from its cursor; used uids are taken back", async () => {
  const saved: string[] = [];
  const reaped: string[] = [];
  const pool = new UidPool(
    10,
    13,
    (batch, used) => {
      reaped.push(`${batch}|${used}`);
      return Promise.resolve();
    },
    1,
    new Set(),
    { next: 12, wrapped: false, save: (next, wrapped) => void saved.push(`${next} ${wrapped}`) },
  );
  const a = await pool.take();
  const b = await pool.take();
  assert.deepEqual([a, b], [12, 13]);
  pool.give(a);
  pool.give(b);
  const rest = [await pool.take(), await pool.take(), await pool.take(), await pool.take()];
  assert.deepEqual(rest, [10, 11, 12, 13]);
  // Once round the range, every uid is one handed out before: its files are taken back first.
  assert.deepEqual(reaped, ["12|", "13|", "10|10", "11|11", "12|12", "13|13"]);
  assert.deepEqual(saved, ["13 false", "10 true", "11 true", "12 true", "13 true", "10 true"]);
  await assert.rejects(pool.take(), /every sandbox uid is held/);
});

Deno.test("after a restart, another agent cannot read what an earlier session kept to itself", async () => {
  assert.equal(Deno.uid(), 0, "this test needs a root server");
  const { range, forget } = uidRange(16);
  const workspace = await Deno.makeTempDir({ prefix: "uexec-ws-" });
  const stateDir = await Deno.makeTempDir({ prefix: "uexec-state-" });
  const env = { UEXEC_UID_RANGE: range, UEXEC_WORKSPACE: workspace, UEXEC_STATE_DIR: stateDir };
  try {
    const before = await startServer(env);
    let writer: number;
    try {
      const r = await exec(before, "echo secret > kept.txt; chmod 600 kept.txt; id -u");
      writer = Number(r.output.trim());
    } finally {
      await before.stop();
    }
    assert.equal((await Deno.stat(`${workspace}/kept.txt`)).mode! & 0o777, 0o600);
    const after = await startServer(env);
    try {
      const minted = await after.operator.post("/v1/agents", { name: "agent-b" });
      assert.equal(minted.status, 201);
      const other = after.as(minted.body.token);
      const r = await exec(other, "id -u; cat kept.txt", { profile: "read-only" });
      const [uid, ...rest] = r.output.split("\n");
      assert.notEqual(Number(uid), writer, "the restarted server handed out the same uid");
      assert.match(rest.join("\n"), /kept\.txt: Permission denied/);
      assert.doesNotMatch(r.output, /secret/);
    } finally {
      await after.stop();
    }
  } finally {
    await Deno.remove(workspace, { recursive: true });
    await Deno.remove(stateDir, { recursive: true });
    await forget();
  }
});

Deno.test("a uid handed out again no longer owns what its earlier session kept", async () => {
  assert.equal(Deno.uid(), 0, "this test needs a root server");
  // Three session uids: the range goes round within a few sessions.
  const { range, first: resting, forget } = uidRange(3);
  const server = await startServer({ UEXEC_UID_RANGE: range });
  try {
    const first = await exec(server, "echo secret > kept.txt; chmod 600 kept.txt; id -u");
    const writer = Number(first.output.trim());
    let reader: Body | undefined;
    for (let i = 0; i < 10 && !reader; i++) {
      const r = await exec(server, "id -u; cat kept.txt 2>&1; true");
      if (Number(r.output.split("\n")[0]) === writer) reader = r;
    }
    assert.ok(reader, `uid ${writer} never came back`);
    assert.equal(reader.output, `${writer}\ncat: kept.txt: Permission denied\n`);
    const info = await Deno.stat(`${server.workspace}/kept.txt`);
    // The range's first uid: what spawners rest as, never a session's.
    assert.equal(info.uid, resting);
    assert.equal(info.mode! & 0o777, 0o600);
  } finally {
    await server.stop();
    await forget();
  }
});

/** The `0x...` rows of `ipcs` output: one per segment, queue or semaphore set. */
function ipcRows(output: string): string[] {
  return output.split(/\r?\n/).filter((line) => line.startsWith("0x"));
}

/** Rows of a host /proc/sysvipc file whose owner (uid column) is `uid`. */
async function hostIpcOf(file: "shm" | "msg", uid: number): Promise<string[]> {
  const [head, ...rows] = (await Deno.readTextFile(`/proc/sysvipc/${file}`)).split("\n");
  const col = head.trim().split(/\s+/).indexOf("uid");
  return rows.filter((row) => Number(row.trim().split(/\s+/)[col]) === uid);
}

Deno.test("System V IPC objects are private to their session and go with it", async () => {
  assert.equal(Deno.uid(), 0, "this test needs a root server");
  const server = await startServer();
  try {
    const make = await server.post("/v1/exec_command", {
      cmd: "id -u; readlink /proc/self/ns/ipc; ipcmk -M 4096; ipcmk -Q; ipcs -m -q; " +
        "echo ready; exec sleep 600",
      login: false,
      tty: false,
      until: "ready\\n",
      yield_time_ms: 10000,
    });
    assert.equal(make.status, 200, JSON.stringify(make.body));
    const [uid, ns] = make.body.output.split("\n");
    assert.match(make.body.output, /Shared memory id: \d+\nMessage queue id: \d+\n/);
    assert.equal(ipcRows(make.body.output).length, 2, make.body.output);
    // Not on the host, even while the session holds them.
    assert.deepEqual(await hostIpcOf("shm", Number(uid)), []);
    assert.deepEqual(await hostIpcOf("msg", Number(uid)), []);
    // Not in another session of the same domain, nor of another one.
    for (const profile of ["workspace-write", "read-only"]) {
      const other = await exec(server, "readlink /proc/self/ns/ipc; ipcs -m -q -s", { profile });
      assert.deepEqual(ipcRows(other.output), [], other.output);
      assert.notEqual(other.output.split("\n")[0], ns);
    }
    assert.equal((await server.del(`/v1/sessions/${make.body.session_id}`)).status, 200);
    const after = await exec(server, "readlink /proc/self/ns/ipc; ipcs -m -q -s");
    assert.deepEqual(ipcRows(after.output), [], after.output);
    assert.notEqual(after.output.split("\n")[0], ns);
    assert.notEqual(ns, await Deno.readLink("/proc/self/ns/ipc"));
    // Children cannot make a namespace of their own (the filter lets the spawner alone).
    const unshare = await exec(server, "unshare --ipc true 2>&1; echo $?");
    assert.match(unshare.output, /Operation not permitted\n1\n$/);
  } finally {
    await server.stop();
  }
});

/** Opens terminals until refused (at most 100); prints how many, then holds them until stdin ends. */
const OPEN_PTYS = `import os, sys
fds = []
why = "none refused"
try:
    while len(fds) < 100:
        fds.append(os.openpty())
except OSError as e:
    why = e.strerror
print("opened", len(fds), why, flush=True)
sys.stdin.read()`;

/** Tries to join its own mount namespace again (as the spawner joins a slot's). */
const SETNS = `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open("/proc/self/ns/mnt", os.O_RDONLY)
rc = libc.setns(fd, 0x20000)
print("joined" if rc == 0 else "setns: " + os.strerror(ctypes.get_errno()))`;

Deno.test("a session opening terminals until refused leaves other sessions theirs", async () => {
  assert.equal(Deno.uid(), 0, "this test needs a root server");
  const server = await startServer({ UEXEC_MAX_PTYS_PER_SESSION: "8" });
  try {
    const hog = await server.post("/v1/exec_command", {
      cmd: `python3 -c '${OPEN_PTYS}'`,
      login: false,
      tty: true,
      until: "opened [^\\n]*\\n",
      yield_time_ms: 10000,
    });
    assert.equal(hog.status, 200, JSON.stringify(hog.body));
    // Its own terminal is one of the eight.
    assert.match(hog.body.output, /opened 7 No space left on device\r\n/);
    assert.equal(typeof hog.body.session_id, "number");
    // Another session of the same domain, and one of another, still get a terminal and more.
    for (const profile of ["workspace-write", "read-only"]) {
      const r = await server.post("/v1/exec_command", {
        cmd: "tty; python3 -c 'import os; os.openpty(); print(\"pty ok\")'",
        login: false,
        tty: true,
        profile,
      });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.match(r.body.output, /^\/dev\/pts\/0\r\npty ok\r\n$/);
    }
    // Only the spawner joins a slot: a child, with no capability, cannot setns (nor mount).
    const join = await exec(server, `python3 -c '${SETNS}'`);
    assert.equal(join.output, "setns: Operation not permitted\n");
    assert.equal((await server.del(`/v1/sessions/${hog.body.session_id}`)).status, 200);
  } finally {
    await server.stop();
  }
});

Deno.test("taking back a uid's files never follows a link, and reaches names that are not UTF-8", async () => {
  assert.equal(Deno.uid(), 0, "this test needs root (it changes owners)");
  const [uid, other, resting] = [1_900_000_001, 1_900_000_002, 1_900_000_000];
  const root = await Deno.makeTempDir({ prefix: "uexec-takeback-" });
  const outside = await Deno.makeTempDir({ prefix: "uexec-takeback-outside-" });
  try {
    await Deno.mkdir(`${root}/d`);
    await Deno.writeTextFile(`${root}/d/kept`, "x");
    await Deno.writeTextFile(`${root}/theirs`, "x");
    await Deno.writeTextFile(`${outside}/beyond`, "x");
    await Deno.symlink(outside, `${root}/d/link`);
    // A name that is not UTF-8 (0xff), made through a descriptor-free shell call.
    const made = await new Deno.Command("sh", {
      args: ["-c", `printf x > "$1/$(printf '\\377')"`, "sh", root],
    }).output();
    assert.ok(made.success);
    const odd = [...Deno.readDirSync(root)].find((e) => e.name.includes("\ufffd"));
    assert.ok(odd, "the odd name was not made");
    for (const path of [root, `${root}/d`, `${root}/d/kept`, outside, `${outside}/beyond`]) {
      await Deno.chown(path, uid, null);
    }
    await new Deno.Command("chown", { args: ["-h", String(uid), `${root}/d/link`] }).output();
    await new Deno.Command("sh", { args: ["-c", `chown ${uid} "$1"/*`, "sh", root] }).output();
    await Deno.chown(`${root}/theirs`, other, null);
    const changed = takeBackFiles([root], [uid], resting);
    const owner = (path: string) => Deno.lstatSync(path).uid;
    assert.equal(owner(root), resting);
    assert.equal(owner(`${root}/d`), resting);
    assert.equal(owner(`${root}/d/kept`), resting);
    assert.equal(owner(`${root}/d/link`), resting);
    assert.equal(owner(`${root}/theirs`), other);
    // Nothing through the link: what it points at keeps its owner.
    assert.equal(owner(outside), uid);
    assert.equal(owner(`${outside}/beyond`), uid);
    const unowned = await new Deno.Command("find", { args: [root, "-uid", String(uid)] }).output();
    assert.equal(new TextDecoder().decode(unowned.stdout), "", "an entry kept its owner");
    assert.equal(changed, 5);
  } finally {
    await Deno.remove(root, { recursive: true });
    await Deno.remove(outside, { recursive: true });
  }
});
