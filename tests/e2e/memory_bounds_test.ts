/**
 * Memory bounds across sessions (issue 29, point 6): the memory of all sessions together is
 * capped (`UEXEC_MEMORY_MAX`), each session's by its agent's `max_memory_bytes` or the
 * per-session default (`UEXEC_SESSION_MEMORY_MAX`); a session killed for memory is told so
 * (`usage.killed_by`), and the server and the other sessions go on. Real servers as root.
 *
 * @module
 */

import assert from "node:assert/strict";
import { startServer } from "../helpers/server.ts";

const MiB = 1 << 20;

/** A command that fills `mib` MiB (touched, so resident), then says so. */
function filling(mib: number, then = ""): string {
  return `python3 -c 'b = b"x" * (${mib} << 20); print("held", flush=True)${then}'`;
}

Deno.test("a session allocating past the aggregate cap is killed and told why; the others go on", async () => {
  const server = await startServer({ UEXEC_MEMORY_MAX: `${256 * MiB}` });
  try {
    const minted = await server.operator.post("/v1/agents", {
      name: "big",
      max_memory_bytes: 200 * MiB,
    });
    assert.equal(minted.status, 201, JSON.stringify(minted.body));
    assert.equal(minted.body.max_memory_bytes, 200 * MiB);
    const listed = await server.operator.get("/v1/agents");
    const big = listed.body.agents.find((a: { name: string }) => a.name === "big");
    assert.equal(big.max_memory_bytes, 200 * MiB);
    const over = await server.operator.post("/v1/agents", {
      name: "huge",
      max_memory_bytes: 512 * MiB,
    });
    assert.equal(over.status, 400, JSON.stringify(over.body));
    assert.match(over.body.error.message, /UEXEC_MEMORY_MAX/);

    // Another agent's session holds 100 MiB and waits.
    const holder = await server.post("/v1/exec_command", {
      cmd: filling(100, "; input()"),
      login: false,
      tty: false,
      until: "held",
    });
    assert.equal(holder.status, 200, JSON.stringify(holder.body));
    assert.ok(holder.body.session_id, JSON.stringify(holder.body));

    // 180 MiB is within its own 200 but past the 256 of all sessions together.
    const hog = await server.as(minted.body.token).post("/v1/exec_command", {
      cmd: filling(180),
      login: false,
      tty: false,
      yield_time_ms: 30000,
    });
    assert.equal(hog.status, 200, JSON.stringify(hog.body));
    assert.equal(hog.body.exit_code, 128 + 9, JSON.stringify(hog.body));
    assert.doesNotMatch(hog.body.output, /held/);
    assert.equal(hog.body.usage.killed_by, "memory", JSON.stringify(hog.body.usage));
    // Its history row says so too.
    const rows = (await server.operator.get("/v1/history")).body.items;
    const row = rows.find((i: { agent: string }) => i.agent === "big");
    assert.equal(row.end_reason, "memory", JSON.stringify(row));
    assert.equal(row.status, "killed");

    // The holder still runs and answers; the server too.
    const alive = await server.post("/v1/write_stdin", {
      session_id: holder.body.session_id,
      chars: "\n",
      yield_time_ms: 10000,
    });
    assert.equal(alive.body.exit_code, 0, JSON.stringify(alive.body));
    assert.equal(alive.body.usage.killed_by, undefined, JSON.stringify(alive.body.usage));
    assert.equal((await server.get("/healthz")).status, 200);
    const after = await server.as(minted.body.token).post("/v1/exec_command", {
      cmd: filling(50),
      login: false,
      tty: false,
    });
    assert.equal(after.body.exit_code, 0, JSON.stringify(after.body));
    assert.equal(after.body.usage.killed_by, undefined);
  } finally {
    await server.stop();
  }
});

Deno.test("a session of an agent without its own limit gets the per-session default", async () => {
  const server = await startServer({
    UEXEC_MEMORY_MAX: `${512 * MiB}`,
    UEXEC_SESSION_MEMORY_MAX: `${64 * MiB}`,
  });
  try {
    const hog = await server.post("/v1/exec_command", {
      cmd: filling(100),
      login: false,
      tty: false,
      yield_time_ms: 30000,
    });
    assert.equal(hog.body.exit_code, 128 + 9, JSON.stringify(hog.body));
    assert.equal(hog.body.usage.killed_by, "memory", JSON.stringify(hog.body.usage));
    const small = await server.post("/v1/exec_command", {
      cmd: filling(16),
      login: false,
      tty: false,
    });
    assert.equal(small.body.exit_code, 0, JSON.stringify(small.body));
    assert.equal(small.body.usage.killed_by, undefined);
  } finally {
    await server.stop();
  }
});
