/**
 * `GET /v1/usage`: CPU time and resident memory of live sessions, read from `/proc` over each
 * session's process tree, with the same scoping as `GET /v1/sessions` (the operator sees every
 * session, an agent its own only).
 *
 * @module
 */

import assert from "node:assert/strict";
import { treeUsage } from "../../src/sessions/usage.ts";
import { startServer } from "../helpers/server.ts";

Deno.test("GET /v1/usage: a session tree's CPU and memory, scoped like the sessions", async (t) => {
  const server = await startServer();
  try {
    const other = await server.operator.post("/v1/agents", { name: "other" });
    assert.equal(other.status, 201);
    // A shell whose child burns CPU and is reaped, then a live child (sleep) holding memory.
    const started = await server.post("/v1/exec_command", {
      cmd: "sh -c 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done'; echo burned; sleep 600",
      login: false,
      until: "burned",
      yield_time_ms: 30000,
    });
    assert.equal(started.status, 200);
    assert.match(started.body.output, /burned/);
    const id = started.body.session_id;

    await t.step("the owning agent sees its session's usage", async () => {
      const r = await server.get("/v1/usage");
      assert.equal(r.status, 200);
      assert.equal(r.body.usage.length, 1);
      const [usage] = r.body.usage;
      assert.deepEqual(Object.keys(usage), ["session_id", "cpu_seconds", "rss_bytes"]);
      assert.equal(usage.session_id, id);
      assert.ok(usage.cpu_seconds > 0, `the reaped loop's CPU counts: ${usage.cpu_seconds}`);
      assert.ok(usage.rss_bytes >= 1024 * 1024, `shell and sleep are resident: ${usage.rss_bytes}`);
    });

    await t.step("the operator sees it too; another agent sees nothing", async () => {
      const op = await server.operator.get("/v1/usage");
      assert.equal(op.status, 200);
      assert.deepEqual(op.body.usage.map((u: { session_id: number }) => u.session_id), [id]);
      const theirs = await server.as(other.body.token).get("/v1/usage");
      assert.equal(theirs.status, 200);
      assert.deepEqual(theirs.body.usage, []);
    });

    await t.step("no token: 401; a foreign Origin: 403", async () => {
      assert.equal((await server.get("/v1/usage", { authorization: "" })).status, 401);
      const foreign = await server.get("/v1/usage", { origin: "http://evil.example" });
      assert.equal(foreign.status, 403);
      assert.equal(foreign.body.error.code, "forbidden_origin");
    });

    await t.step("an ended session has no usage", async () => {
      assert.equal((await server.del(`/v1/sessions/${id}`)).status, 200);
      assert.deepEqual((await server.get("/v1/usage")).body.usage, []);
    });
  } finally {
    await server.stop();
  }
});

Deno.test("treeUsage: this process is readable, a gone one is not", () => {
  const own = treeUsage(Deno.pid);
  assert.ok(own && own.cpu_seconds > 0 && own.rss_bytes > 0);
  assert.equal(treeUsage(2 ** 22 + 1), undefined); // above pid_max's ceiling: never a process
});
