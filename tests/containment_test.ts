/**
 * Containment (issue 11): every session in a cgroup of its own, so that nothing it starts
 * outlives it, whatever it did with sessions or process groups; limits and usage of its whole
 * tree; and what a killed server left is killed by the next one.
 *
 * @module
 */

import assert from "node:assert/strict";
import { startServer, type TestServer } from "./helpers/server.ts";

/** Whether process `pid` exits (or has exited) within `seconds`, watched through a pidfd. */
async function exitsWithin(pid: number, seconds: number): Promise<boolean> {
  const script = "import os, select, sys\n" +
    `print(bool(select.select([os.pidfd_open(${pid})], [], [], ${seconds})[0]))`;
  const out = await new Deno.Command("python3", { args: ["-c", script] }).output();
  return new TextDecoder().decode(out.stdout) === "True\n";
}

function alive(pid: number): boolean {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    return stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z";
  } catch {
    return false;
  }
}

/** Start a command that leaves a `setsid` daemon behind; returns the session and the daemon. */
async function withDaemon(server: TestServer, extra: Record<string, unknown> = {}) {
  const r = await server.post("/v1/exec_command", {
    cmd: "setsid sleep 1003 </dev/null >/dev/null 2>&1 & echo daemon=$!; read x",
    login: false,
    tty: false,
    until: "daemon=\\d+\\n",
    ...extra,
  });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const daemon = Number(/daemon=(\d+)/.exec(r.body.output)![1]);
  assert.ok(alive(daemon));
  return { id: r.body.session_id as number, daemon };
}

Deno.test("a setsid daemon does not survive DELETE of its session", async () => {
  const server = await startServer();
  try {
    for (const profile of ["workspace-write", "full-access"]) {
      const { id, daemon } = await withDaemon(server, { profile });
      const killed = await server.del(`/v1/sessions/${id}`);
      assert.equal(killed.status, 200);
      assert.equal(alive(daemon), false, `${profile}: daemon ${daemon} survived DELETE`);
    }
  } finally {
    await server.stop();
  }
});
