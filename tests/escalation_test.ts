/**
 * Narrow escalation end to end: an agent asks for a wider profile, extra writable directories
 * or extra TCP ports; the operator is shown exactly that widening; the command then runs still
 * sandboxed with only that added, and `approved_for_session` remembers that widening alone. An
 * on-failure denial that names a port proposes exactly that port. Also the request checks that
 * go with escalation: the server's shell, workdirs inside the workspace, the state directory.
 *
 * @module
 */

import assert from "node:assert/strict";
import { connectSse, type SseClient } from "./helpers/sse.ts";
import { startServer, type TestServer } from "./helpers/server.ts";

/** A line holding a uid of the default session range (2000000001-2000065535). */
const SESSION_UID = "20000\\d{5}\\r\\n";

// deno-lint-ignore no-explicit-any
type Body = any;

/** A TCP listener on 127.0.0.1 that greets and closes every connection. */
function greeter(): { port: number; close(): void } {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  (async () => {
    for await (const conn of listener) {
      await conn.write(new TextEncoder().encode("hello\n")).catch(() => {});
      conn.close();
    }
  })().catch(() => {});
  return { port: listener.addr.port, close: () => listener.close() };
}

/** A command that prints what a TCP connection to 127.0.0.1:`port` read, or why it failed. */
const connectTo = (port: number) =>
  `exec 3<>/dev/tcp/127.0.0.1/${port} && head -n1 <&3 || echo "no ${port}"`;

/** A server with the operator's event stream open. */
async function setUp(env: Record<string, string> = {}) {
  const server = await startServer({ UEXEC_APPROVAL_POLICY: "on-request", ...env });
  const events = await connectSse(`${server.url}/v1/events`, server.operator.auth);
  return { server, events };
}

/** Start `body` and wait for the approval it asks for (the `n`th of the stream). */
async function asked(
  server: TestServer,
  events: SseClient,
  body: Record<string, unknown>,
  n: number,
): Promise<{ pending: Promise<{ status: number; body: Body }>; approval: Body }> {
  const pending = server.post("/v1/exec_command", { login: false, ...body });
  const all = await events.until((evs) =>
    evs.filter((e) => e.event === "approval_requested").length >= n
  );
  const approval = all.filter((e) => e.event === "approval_requested")[n - 1].data.approval;
  return { pending, approval };
}

Deno.test("narrow escalation: a profile, writable directories, TCP ports", async (t) => {
  const { server, events } = await setUp();
  const out = await Deno.makeTempDir({ prefix: "uexec-widen-" });
  const other = await Deno.makeTempDir({ prefix: "uexec-widen-other-" });
  for (const dir of [out, other]) await Deno.chmod(dir, 0o777);
  const open = greeter();
  const closed = greeter();
  let n = 0;
  try {
    await t.step("without escalation the sandbox holds (control)", async () => {
      const r = await server.post("/v1/exec_command", {
        cmd: `touch ${out}/x 2>&1; ${connectTo(open.port)}`,
        login: false,
      });
      assert.match(r.body.output, new RegExp(`touch: cannot touch '${out}/x': Permission denied`));
      assert.match(r.body.output, new RegExp(`no ${open.port}`));
    });

    await t.step("write: only the named directory becomes writable", async () => {
      const cmd = `id -u > ${out}/w && cat ${out}/w; touch ${other}/w`;
      const { pending, approval } = await asked(server, events, {
        cmd,
        escalate: { write: [out] },
        justification: "write the build output",
      }, ++n);
      assert.deepEqual(approval.escalation, { write: [out] });
      assert.equal(approval.runs, `sandboxed under workspace-write, plus write access to ${out}`);
      assert.equal(approval.justification, "write the build output");
      assert.equal(approval.can_choose_unsandboxed, false);
      await server.operator.post(`/v1/approvals/${approval.id}`, { decision: "approved" });
      const r = await pending;
      assert.match(
        r.body.output,
        new RegExp(`^${SESSION_UID}touch: cannot touch '${other}/w': Permission denied\\r\\n$`),
      );
      assert.equal(r.body.sandbox.profile, "workspace-write");
    });

    await t.step("tcp_ports: only the named port opens", async () => {
      const { pending, approval } = await asked(server, events, {
        cmd: `${connectTo(open.port)}; ${connectTo(closed.port)}`,
        escalate: { tcp_ports: [open.port] },
      }, ++n);
      assert.equal(
        approval.runs,
        `sandboxed under workspace-write, plus TCP to port ${open.port} on any host (connect and ` +
          "listen) and UDP to any host (name lookups)",
      );
      await server.operator.post(`/v1/approvals/${approval.id}`, { decision: "approved" });
      const r = await pending;
      assert.match(r.body.output, /^hello\r\n/);
      assert.match(r.body.output, new RegExp(`no ${closed.port}\\r\\n$`));
    });

    await t.step("profile: a wider profile, still sandboxed", async () => {
      const { pending, approval } = await asked(server, events, {
        cmd: `${connectTo(open.port)}; id -u`,
        escalate: { profile: "workspace-write-net" },
      }, ++n);
      assert.equal(
        approval.runs,
        "sandboxed under workspace-write-net instead of workspace-write",
      );
      await server.operator.post(`/v1/approvals/${approval.id}`, { decision: "approved" });
      const r = await pending;
      assert.match(r.body.output, new RegExp(`^hello\\r\\n${SESSION_UID}$`));
      assert.equal(r.body.sandbox.profile, "workspace-write-net");
    });

    await t.step("approved_for_session remembers that widening alone", async () => {
      // A file per run: each run is a session of its own uid, and touching another uid's file
      // would need write access to it.
      const body = { cmd: `touch ${out}/s$$ && echo ok`, escalate: { write: [out] } };
      const first = await asked(server, events, body, ++n);
      await server.operator.post(`/v1/approvals/${first.approval.id}`, {
        decision: "approved_for_session",
      });
      assert.equal((await first.pending).body.output, "ok\r\n");
      const again = await server.post("/v1/exec_command", { login: false, ...body });
      assert.equal(again.body.output, "ok\r\n", "the same request runs without asking");
      const wider = await asked(server, events, {
        ...body,
        escalate: { write: [out, other] },
      }, ++n);
      assert.deepEqual(wider.approval.escalation, { write: [out, other].sort() });
      await server.operator.post(`/v1/approvals/${wider.approval.id}`, { decision: "denied" });
      assert.equal((await wider.pending).status, 403);
    });

    await t.step("on-failure: a denied connection proposes exactly its port", async () => {
      await events.close();
      await server.stop();
      const again = await setUp({ UEXEC_APPROVAL_POLICY: "on-failure" });
      try {
        const { pending, approval } = await asked(again.server, again.events, {
          cmd: `curl -sS --max-time 5 http://127.0.0.1:${open.port}/`,
        }, 1);
        assert.deepEqual(approval.escalation, { tcp_ports: [open.port] });
        assert.equal(approval.denial.kind, "network");
        assert.equal(approval.denial.port, open.port);
        assert.equal(approval.can_choose_unsandboxed, true);
        await again.server.operator.post(`/v1/approvals/${approval.id}`, { decision: "denied" });
        const r = await pending;
        assert.equal(r.body.sandbox.denied, true);
      } finally {
        await again.events.close();
        await again.server.stop();
      }
    });
  } finally {
    open.close();
    closed.close();
    await events.close().catch(() => {});
    await server.stop().catch(() => {});
    await Deno.remove(out, { recursive: true });
    await Deno.remove(other, { recursive: true });
  }
});

Deno.test("what an escalation may name: the server's shell, never the state directory", async () => {
  const { server, events } = await setUp();
  try {
    const shell = await server.post("/v1/exec_command", {
      cmd: "id -u",
      shell: `${server.workspace}/planted-shell`,
      sandbox_permissions: "require_escalated",
    });
    assert.equal(shell.status, 400);
    assert.match(shell.body.error.message, /^shell: cannot start/);
    await Deno.writeTextFile(`${server.workspace}/planted-shell`, '#!/bin/sh\nexec /bin/sh "$@"\n');
    await Deno.chmod(`${server.workspace}/planted-shell`, 0o755);
    const planted = await server.post("/v1/exec_command", {
      cmd: "id -u",
      shell: `${server.workspace}/planted-shell`,
      sandbox_permissions: "require_escalated",
    });
    assert.equal(planted.status, 400);
    assert.equal(
      planted.body.error.message,
      `shell: an escalated command runs with the server's shell /bin/bash; leave shell out or ` +
        `pass that one (got ${server.workspace}/planted-shell)`,
    );
    // The test server's state directory lies in /tmp: granting it, or anything above it, is
    // refused.
    for (const write of [server.stateDir, "/tmp", "/"]) {
      const r = await server.post("/v1/exec_command", {
        cmd: "true",
        escalate: { write: [write] },
      });
      assert.equal(r.status, 403, write);
      assert.equal(
        r.body.error.message,
        `escalate.write.0: ${await Deno.realPath(
          write,
        )} holds the server's state; it cannot be granted`,
      );
    }
    const empty = await server.post("/v1/exec_command", { cmd: "true", escalate: {} });
    assert.equal(empty.status, 400);
    assert.equal(
      empty.body.error.message,
      "escalate: name at least one of profile, write, tcp_ports",
    );
    assert.deepEqual((await server.operator.get("/v1/approvals")).body, { approvals: [] });
  } finally {
    await events.close();
    await server.stop();
  }
});

Deno.test("workdirs stay inside the workspace or an allowed root", async () => {
  const { server, events } = await setUp();
  const ws = await Deno.realPath(server.workspace);
  await Deno.mkdir(`${ws}/sub`);
  await Deno.symlink("/tmp", `${ws}/out-link`);
  await Deno.symlink(`${ws}/sub`, `${ws}/in-link`);
  try {
    for (const workdir of ["/", "/tmp", "..", "../..", "out-link", `${ws}/sub/../..`]) {
      const r = await server.post("/v1/exec_command", { cmd: "pwd", workdir });
      assert.equal(r.status, 403, workdir);
      assert.equal(r.body.error.code, "forbidden_workdir");
      assert.match(
        r.body.error.message,
        new RegExp(`^workdir: \\S+ is outside the workspace ${ws}; add it to UEXEC_ALLOWED_ROOTS`),
      );
    }
    for (const [workdir, real] of [["sub", `${ws}/sub`], ["in-link", `${ws}/sub`], [ws, ws]]) {
      const r = await server.post("/v1/exec_command", { cmd: "pwd -P", workdir, login: false });
      assert.equal(r.body.output, `${real}\r\n`, workdir);
    }
    const { pending, approval } = await asked(server, events, {
      cmd: "pwd",
      workdir: "/tmp",
      sandbox_permissions: "require_escalated",
    }, 1);
    assert.equal(approval.workdir, "/tmp", "an escalation may ask for it: the approver sees it");
    await server.operator.post(`/v1/approvals/${approval.id}`, { decision: "denied" });
    assert.equal((await pending).status, 403);
  } finally {
    await events.close();
    await server.stop();
  }
});
