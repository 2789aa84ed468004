/**
 * The command history end to end: real servers, real commands, `GET /v1/history` and
 * `GET /v1/history/{id}` over HTTP, the SQLite file in the state directory read back across a
 * restart, retention, a database another process holds locked, and who may read what.
 *
 * @module
 */

import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { randomToken, startServer, type TestServer } from "../helpers/server.ts";
import { connectSse } from "../helpers/sse.ts";

// deno-lint-ignore no-explicit-any
type Body = any;

const TAIL = 64 * 1024;

function exec(client: TestServer["operator"], cmd: string, extra: Record<string, unknown> = {}) {
  return client.post("/v1/exec_command", { cmd, login: false, tty: false, ...extra });
}

/** Every item of a listing, following cursors; asserts each page's size. */
async function allPages(client: TestServer["operator"], query: string, limit: number) {
  const items: Body[] = [];
  let cursor: string | null = null;
  for (;;) {
    const r: { status: number; body: Body } = await client.get(
      `/v1/history?${query}&limit=${limit}${cursor ? `&cursor=${cursor}` : ""}`,
    );
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.ok(r.body.items.length <= limit);
    items.push(...r.body.items);
    cursor = r.body.next_cursor;
    if (cursor === null) return items;
    assert.equal(r.body.items.length, limit);
  }
}

/** A directory outside every writable root that DAC would let the sandbox uid write. */
async function outsideDir(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "uexec-history-out-" });
  await Deno.chmod(dir, 0o777);
  return dir;
}

Deno.test("history: rows, tails, filters, pages, scoping, approvals, restart", async (t) => {
  const stateDir = await Deno.makeTempDir({ prefix: "uexec-history-state-" });
  const out = await outsideDir();
  const env = {
    UEXEC_STATE_DIR: stateDir,
    UEXEC_OPERATOR_TOKEN: randomToken(),
    UEXEC_AGENT_TOKEN: randomToken(),
    UEXEC_APPROVAL_POLICY: "on-failure",
  };
  let server = await startServer(env);
  let runningId = "";
  let bToken = "";
  try {
    await t.step(
      "finished and running commands have rows; a running one's row updates",
      async () => {
        const done = await exec(server, "printf 'hello\\n'");
        assert.equal(done.body.exit_code, 0);
        const running = await exec(server, "read x; echo got $x; exit 3", { yield_time_ms: 250 });
        assert.equal(typeof running.body.session_id, "number");
        const list = await server.get("/v1/history");
        assert.equal(list.status, 200);
        const [live, finished] = list.body.items;
        assert.equal(list.body.next_cursor, null);
        assert.equal(list.body.items.length, 2);
        runningId = live.id;
        assert.deepEqual({ ...live, id: undefined, started_at: undefined }, {
          id: undefined,
          agent: "default",
          command: "read x; echo got $x; exit 3",
          workdir: server.workspace,
          profile: "workspace-write",
          tty: false,
          session_id: running.body.session_id,
          status: "running",
          started_at: undefined,
          ended_at: null,
          exit_code: null,
          end_reason: null,
          duration_seconds: null,
          output_bytes: 0,
          usage: { cpu_seconds: null, peak_memory_bytes: null },
          denial: null,
          egress: [],
          approvals: [],
        });
        assert.equal(finished.status, "exited");
        assert.equal(finished.exit_code, 0);
        assert.equal(finished.end_reason, "exit");
        assert.equal(finished.output_bytes, 6);
        assert.ok(finished.duration_seconds > 0);
        assert.ok(Date.parse(finished.ended_at) >= Date.parse(finished.started_at));
        const detail = await server.get(`/v1/history/${finished.id}`);
        assert.equal(detail.body.output_tail, "hello\n");
        const ended = await server.post("/v1/write_stdin", {
          session_id: running.body.session_id,
          chars: "yes\n",
        });
        assert.equal(ended.body.exit_code, 3);
        const after = await server.get(`/v1/history/${runningId}`);
        assert.equal(after.body.status, "failed");
        assert.equal(after.body.exit_code, 3);
        assert.equal(after.body.output_tail, "got yes\n");
        assert.equal(after.body.output_bytes, 8);
      },
    );

    await t.step("the last 64 KiB of a big output is kept, byte for byte", async () => {
      const r = await exec(server, "seq 1 60000", { max_output_tokens: 100 });
      assert.equal(r.body.exit_code, 0);
      const all = Array.from({ length: 60000 }, (_, i) => `${i + 1}\n`).join("");
      const [row] = (await server.get("/v1/history?limit=1")).body.items;
      assert.equal(row.output_bytes, all.length);
      const detail = await server.get(`/v1/history/${row.id}`);
      assert.equal(detail.body.output_tail, all.slice(-TAIL));
    });

    await t.step("filters and pages: no duplicates, no gaps", async () => {
      const minted = await server.operator.post("/v1/agents", { name: "b" });
      assert.equal(minted.status, 201);
      bToken = minted.body.token;
      for (let i = 1; i <= 7; i++) assert.equal((await exec(server, `echo page-${i}`)).status, 200);
      for (let i = 1; i <= 2; i++) {
        assert.equal((await exec(server.as(bToken), `echo page-b${i}`)).status, 200);
      }
      assert.equal((await exec(server, "echo '100%_done'")).status, 200);
      assert.equal((await exec(server, "false")).body.exit_code, 1);

      const everything = await allPages(server.operator, "", 500);
      const paged = await allPages(server.operator, "", 3);
      assert.deepEqual(paged.map((i) => i.id), everything.map((i) => i.id));
      assert.equal(new Set(paged.map((i) => i.id)).size, everything.length);
      const times = everything.map((i) => Date.parse(i.started_at));
      assert.deepEqual(times, [...times].sort((a, b) => b - a));

      const pages = await allPages(server.operator, "q=ECHO%20PAGE-", 4);
      assert.deepEqual(pages.map((i) => i.command), [
        "echo page-b2",
        "echo page-b1",
        ...[7, 6, 5, 4, 3, 2, 1].map((i) => `echo page-${i}`),
      ]);
      const literal = await server.operator.get(`/v1/history?q=${encodeURIComponent("%_")}`);
      assert.deepEqual(literal.body.items.map((i: Body) => i.command), ["echo '100%_done'"]);
      const failed = await server.operator.get("/v1/history?status=failed");
      assert.deepEqual(failed.body.items.map((i: Body) => i.command), [
        "false",
        "read x; echo got $x; exit 3",
      ]);
      const ofB = await server.operator.get("/v1/history?agent=b");
      assert.deepEqual(ofB.body.items.map((i: Body) => i.command), [
        "echo page-b2",
        "echo page-b1",
      ]);
      const future = new Date(Date.now() + 60_000).toISOString();
      assert.deepEqual((await server.operator.get(`/v1/history?since=${future}`)).body.items, []);
      const since = everything.find((i) => i.command === "echo page-b1").started_at;
      const recent = await server.operator.get(`/v1/history?since=${since}&limit=500`);
      assert.deepEqual(recent.body.items.map((i: Body) => i.command), [
        "false",
        "echo '100%_done'",
        "echo page-b2",
        "echo page-b1",
      ]);
      for (
        const bad of ["limit=0", "limit=501", "status=odd", "since=yesterday", "cursor=xyz", "x=1"]
      ) {
        const r = await server.operator.get(`/v1/history?${bad}`);
        assert.equal(r.status, 400, bad);
        assert.equal(r.body.error.code, "invalid_request", bad);
      }
    });

    await t.step("an agent sees only its own history", async () => {
      const b = server.as(bToken);
      const own = await b.get("/v1/history?agent=default&limit=500");
      assert.deepEqual(own.body.items.map((i: Body) => i.command), [
        "echo page-b2",
        "echo page-b1",
      ]);
      const mine = (await server.get("/v1/history?limit=500")).body.items;
      assert.ok(mine.length > 0 && mine.every((i: Body) => i.agent === "default"));
      const foreign = await b.get(`/v1/history/${runningId}`);
      assert.equal(foreign.status, 404);
      assert.equal(foreign.body.error.code, "not_found");
      assert.equal((await b.get(`/v1/history/${own.body.items[0].id}`)).status, 200);
      assert.equal((await server.operator.get(`/v1/history/${runningId}`)).status, 200);
      assert.equal((await server.get("/v1/history/nope")).status, 404);
    });

    await t.step("who may reach the routes", async () => {
      for (const path of ["/v1/history", `/v1/history/${runningId}`]) {
        const none = await server.raw(path, { headers: { authorization: "" } });
        assert.equal(none.status, 401, path);
        const origin = await server.raw(path, { headers: { origin: "https://evil.example" } });
        assert.equal(origin.status, 403, path);
        const page = await server.raw(path, {
          method: "POST",
          headers: { "content-type": "text/plain" },
          body: "{}",
        });
        assert.equal(page.status, 415, path);
      }
    });

    await t.step("a denial and its approvals are on the command's row", async () => {
      const events = await connectSse(`${server.url}/v1/events`, server.operator.auth);
      try {
        const asked = async (n: number) =>
          (await events.until((all) =>
            all.filter((e) => e.event === "approval_requested").length >= n
          )).filter((e) => e.event === "approval_requested")[n - 1].data.approval;
        const approvedCmd = `echo x > ${out}/approved && echo wrote`;
        const pending = exec(server, approvedCmd);
        const first = await asked(1);
        assert.equal(
          (await server.operator.post(`/v1/approvals/${first.id}`, {
            decision: "approved",
          })).status,
          200,
        );
        const r = await pending;
        assert.equal(r.body.exit_code, 0);
        assert.equal(r.body.sandbox.retried, true);
        const deniedCmd = `echo x > ${out}/refused`;
        const refusedPending = exec(server, deniedCmd);
        const second = await asked(2);
        await server.operator.post(`/v1/approvals/${second.id}`, { decision: "denied" });
        assert.equal((await refusedPending).body.sandbox.denied, true);

        const rows = (await server.get("/v1/history?limit=2")).body.items;
        const denial = (target: string) => ({
          kind: "fs-write",
          path: target,
          evidence: `/bin/bash: line 1: ${target}: Read-only file system`,
        });
        assert.equal(rows[0].command, deniedCmd);
        assert.equal(rows[0].status, "denied");
        assert.deepEqual(rows[0].denial, denial(`${out}/refused`));
        assert.deepEqual(rows[0].approvals.map((a: Body) => [a.id, a.status, a.decided_by]), [
          [second.id, "denied", "operator"],
        ]);
        assert.equal(rows[1].command, approvedCmd);
        assert.equal(rows[1].status, "exited");
        assert.equal(rows[1].exit_code, 0);
        assert.deepEqual(rows[1].denial, denial(`${out}/approved`));
        assert.equal(rows[1].approvals.length, 1);
        const [approval] = rows[1].approvals;
        assert.deepEqual({ ...approval, created_at: undefined, decided_at: undefined }, {
          id: first.id,
          status: "approved",
          reason: first.reason,
          runs: first.runs,
          escalation: { write: [out] },
          denial: denial(`${out}/approved`),
          created_at: undefined,
          decided_at: undefined,
          decided_by: "operator",
          granted: { write: [out] },
        });
        assert.ok(Date.parse(approval.decided_at) >= Date.parse(approval.created_at));
        const detail = await server.get(`/v1/history/${rows[1].id}`);
        assert.equal(
          detail.body.output_tail,
          `/bin/bash: line 1: ${out}/approved: Read-only file system\nwrote\n`,
        );
        const escalated = exec(server, "id -u", { sandbox_permissions: "require_escalated" });
        const third = await asked(3);
        await server.operator.post(`/v1/approvals/${third.id}`, { decision: "denied" });
        assert.equal((await escalated).status, 403);
        const [refused] = (await server.get("/v1/history?limit=1")).body.items;
        assert.deepEqual(
          [refused.command, refused.status, refused.end_reason, refused.session_id],
          ["id -u", "denied", "rejected", null],
        );
        assert.deepEqual(refused.approvals.map((a: Body) => [a.id, a.status]), [
          [third.id, "denied"],
        ]);
      } finally {
        await events.close();
      }
    });

    await t.step("the database and its WAL files are 0600", async () => {
      for (const name of ["history.db", "history.db-wal", "history.db-shm"]) {
        const info = await Deno.stat(`${stateDir}/${name}`);
        assert.equal((info.mode ?? 0) & 0o777, 0o600, name);
      }
    });

    await t.step("the history survives a restart; what was running is marked killed", async () => {
      const before = await allPages(server.operator, "", 500);
      const live = await exec(server, "sleep 600", { yield_time_ms: 100 });
      assert.equal(typeof live.body.session_id, "number");
      assert.equal((await server.stop()).code, 0);
      server = await startServer(env);
      const after = await allPages(server.operator, "", 500);
      assert.deepEqual(after.slice(1), before);
      assert.equal(after[0].command, "sleep 600");
      assert.equal(after[0].status, "killed");
      assert.equal(after[0].end_reason, "shutdown");
      const detail = await server.get(`/v1/history/${before.at(-1).id}`);
      assert.equal(detail.body.output_tail, "hello\n");
    });
  } finally {
    await server.stop();
    await Deno.remove(stateDir, { recursive: true });
    await Deno.remove(out, { recursive: true });
  }
});

Deno.test("history: retention is per agent: one agent's flood keeps another's history", async () => {
  const server = await startServer({
    UEXEC_HISTORY_MAX_ROWS: "5",
    // Room for about three rows of `head -c 20000` (output tail plus 512 bytes each).
    UEXEC_HISTORY_MAX_BYTES: String(3 * (20_000 + 512 + 40)),
  });
  try {
    const other = await server.operator.post("/v1/agents", { name: "other" });
    const o = server.as(other.body.token);
    for (let i = 1; i <= 2; i++) assert.equal((await exec(o, `echo mine-${i}`)).status, 200);
    for (let i = 1; i <= 8; i++) assert.equal((await exec(server, `echo keep-${i}`)).status, 200);
    const commands = async (agent: string) =>
      (await server.operator.get(`/v1/history?agent=${agent}&limit=500`)).body.items
        .map((i: Body) => i.command);
    assert.deepEqual(await commands("default"), [8, 7, 6, 5, 4].map((i) => `echo keep-${i}`));
    assert.deepEqual(await commands("other"), ["echo mine-2", "echo mine-1"]);
    // Bytes: big outputs push out the agent's own oldest rows, and only those.
    for (let i = 1; i <= 4; i++) {
      assert.equal((await exec(server, `head -c 20000 /dev/zero | tr '\\0' ${i}`)).status, 200);
    }
    assert.deepEqual(
      await commands("default"),
      [4, 3, 2].map((i) => `head -c 20000 /dev/zero | tr '\\0' ${i}`),
    );
    assert.deepEqual(await commands("other"), ["echo mine-2", "echo mine-1"]);
  } finally {
    await server.stop();
  }
});

Deno.test("history: a locked database never fails a command; /healthz and the log say so", async () => {
  const server = await startServer();
  let stopped = false;
  try {
    assert.equal((await exec(server, "echo first")).status, 200);
    assert.deepEqual((await server.get("/healthz")).body.history, { ok: true, enabled: true });
    const db = new DatabaseSync(`${server.stateDir}/history.db`);
    db.exec("PRAGMA busy_timeout = 0");
    db.exec("BEGIN EXCLUSIVE");
    const r = await exec(server, "echo while-locked");
    assert.equal(r.status, 200);
    assert.equal(r.body.exit_code, 0);
    assert.equal(r.body.output, "while-locked\n");
    const health = (await server.get("/healthz")).body.history;
    assert.deepEqual(health, { ok: false, enabled: true, error: "database is locked" });
    db.exec("ROLLBACK");
    db.close();
    assert.equal((await exec(server, "echo after")).status, 200);
    assert.deepEqual((await server.get("/healthz")).body.history, { ok: true, enabled: true });
    const commands = (await server.get("/v1/history")).body.items.map((i: Body) => i.command);
    assert.deepEqual(commands, ["echo after", "echo while-locked", "echo first"]);
    const { stderr } = await server.stop();
    stopped = true;
    const warnings = stderr.split("\n").filter((l) => l.includes('"history_write_failed"'));
    assert.equal(warnings.length, 1, stderr);
    const warning = JSON.parse(warnings[0]);
    assert.equal(warning.level, "warn");
    assert.equal(warning.error, "database is locked");
  } finally {
    if (!stopped) await server.stop();
  }
});

Deno.test("history: UEXEC_HISTORY=off answers 404 and writes no database", async () => {
  const server = await startServer({ UEXEC_HISTORY: "off" });
  try {
    assert.equal((await exec(server, "echo x")).status, 200);
    const r = await server.get("/v1/history");
    assert.equal(r.status, 404);
    assert.deepEqual((await server.get("/healthz")).body.history, { ok: true, enabled: false });
    await assert.rejects(Deno.stat(`${server.stateDir}/history.db`), Deno.errors.NotFound);
  } finally {
    await server.stop();
  }
});

Deno.test("history: a full disk never fails a command; /healthz says so", async () => {
  const stateDir = await Deno.makeTempDir({ prefix: "uexec-history-full-" });
  const mount = await new Deno.Command("mount", {
    args: ["-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", stateDir],
  }).output();
  assert.equal(mount.code, 0, new TextDecoder().decode(mount.stderr));
  // No free-space floor, which would refuse these starts (507) before the disk is full.
  const server = await startServer({ UEXEC_STATE_DIR: stateDir, UEXEC_DISK_FLOOR_BYTES: "0" });
  try {
    assert.equal((await exec(server, "echo first")).status, 200);
    assert.deepEqual((await server.get("/healthz")).body.history, { ok: true, enabled: true });
    const fill = await Deno.open(`${stateDir}/fill`, { write: true, create: true });
    const block = new Uint8Array(4096);
    try {
      for (;;) await fill.write(block);
    } catch (err) {
      assert.equal((err as Error).message.includes("No space left on device"), true, String(err));
    } finally {
      fill.close();
    }
    const r = await exec(server, "seq 1 20000");
    assert.equal(r.status, 200);
    assert.equal(r.body.exit_code, 0);
    const health = (await server.get("/healthz")).body.history;
    assert.deepEqual(health, { ok: false, enabled: true, error: "database or disk is full" });
    await Deno.remove(`${stateDir}/fill`);
    assert.equal((await exec(server, "echo after")).status, 200);
    assert.deepEqual((await server.get("/healthz")).body.history, { ok: true, enabled: true });
    const commands = (await server.get("/v1/history")).body.items.map((i: Body) => i.command);
    assert.deepEqual(commands, ["echo after", "seq 1 20000", "echo first"]);
  } finally {
    await server.stop();
    await new Deno.Command("umount", { args: [stateDir] }).output();
    await Deno.remove(stateDir, { recursive: true });
  }
});
