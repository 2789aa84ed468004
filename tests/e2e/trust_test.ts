/**
 * The trust boundary end to end, over real HTTP against real servers: web pages (content type,
 * Origin, Host), missing and wrong credentials, the operator's and the agents' roles, agents
 * isolated from each other, sandboxed commands that reach the API with stolen tokens, token
 * files and where tokens must never appear, revocation, restarts, and the unix socket.
 *
 * @module
 */

import assert from "node:assert/strict";
import { connectSse } from "../helpers/sse.ts";
import { randomToken, startServer, type TestServer } from "../helpers/server.ts";
import { RpcSocket, wsUrl } from "../helpers/ws.ts";
import { HOLD } from "../fixtures/spawner_death/marker.ts";

/** A raw HTTP/1.1 exchange over TCP, so any Host header can be sent. */
async function rawHttp(url: string, request: string): Promise<{ status: number; text: string }> {
  const { hostname, port } = new URL(url);
  const conn = await Deno.connect({ hostname, port: Number(port) });
  await conn.write(new TextEncoder().encode(request));
  const text = await new Response(conn.readable).text();
  return { status: Number(text.slice(9, 12)), text };
}

/** Start a live `cat` session for `client`; returns its id. */
async function liveCat(client: Pick<TestServer, "post">): Promise<number> {
  const r = await client.post("/v1/exec_command", { cmd: "cat", login: false, yield_time_ms: 250 });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(typeof r.body.session_id, "number");
  return r.body.session_id;
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch {
    return false;
  }
}

Deno.test("web pages cannot drive the API", async (t) => {
  const server = await startServer();
  const marker = `${server.workspace}/page-ran`;
  const cmd = JSON.stringify({ cmd: `touch ${marker}`, login: false });
  try {
    await t.step("text/plain and form POSTs are 415 and nothing runs", async () => {
      for (
        const type of ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
      ) {
        const r = await server.raw("/v1/exec_command", {
          method: "POST",
          headers: { "content-type": type },
          body: cmd,
        });
        assert.equal(r.status, 415, type);
        assert.deepEqual(JSON.parse(r.text), {
          error: {
            code: "unsupported_media_type",
            message: "request bodies must be sent as content-type: application/json",
          },
        });
      }
      const none = await server.raw("/v1/exec_command", { method: "POST", body: cmd });
      assert.equal(none.status, 415, "a body without a content type");
      assert.equal(await exists(marker), false);
    });

    await t.step("a foreign Origin is 403, the server's own passes", async () => {
      for (const origin of ["http://evil.example", "null", "http://127.0.0.1:1"]) {
        const r = await server.post("/v1/exec_command", JSON.parse(cmd), { origin });
        assert.equal(r.status, 403, origin);
        assert.equal(r.body.error.code, "forbidden_origin");
      }
      assert.equal(await exists(marker), false);
      const own = await server.get("/v1/sessions", { origin: server.url });
      assert.equal(own.status, 200);
    });

    await t.step("Host: evil.example (DNS rebinding) is 403", async () => {
      const body = cmd;
      const r = await rawHttp(
        server.url,
        `POST /v1/exec_command HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n` +
          `Authorization: Bearer ${server.agentToken}\r\ncontent-type: application/json\r\n` +
          `content-length: ${body.length}\r\n\r\n${body}`,
      );
      assert.equal(r.status, 403);
      assert.match(r.text, /"code":"forbidden_host"/);
      const health = await rawHttp(
        server.url,
        "GET /healthz HTTP/1.1\r\nHost: evil.example:8787\r\nConnection: close\r\n\r\n",
      );
      assert.equal(health.status, 403);
      const loopback = await rawHttp(
        server.url,
        "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
      );
      assert.equal(loopback.status, 200);
      assert.equal(await exists(marker), false);
    });
  } finally {
    await server.stop();
  }
});

Deno.test("allowed hosts and origins are configurable, with CORS only for listed origins", async () => {
  const server = await startServer({
    UEXEC_ALLOWED_HOSTS: "uexec.internal",
    UEXEC_ALLOWED_ORIGINS: "https://ops.example",
  });
  try {
    const host = await rawHttp(
      server.url,
      "GET /healthz HTTP/1.1\r\nHost: uexec.internal:9\r\nConnection: close\r\n\r\n",
    );
    assert.equal(host.status, 200);
    const preflight = await server.raw("/v1/sessions", {
      method: "OPTIONS",
      headers: { origin: "https://ops.example" },
    });
    assert.equal(preflight.status, 204);
    assert.equal(preflight.headers.get("access-control-allow-origin"), "https://ops.example");
    const listed = await server.raw("/v1/sessions", { headers: { origin: "https://ops.example" } });
    assert.equal(listed.status, 200);
    assert.equal(listed.headers.get("access-control-allow-origin"), "https://ops.example");
    const plain = await server.raw("/v1/sessions", {});
    assert.equal(plain.headers.get("access-control-allow-origin"), null);
  } finally {
    await server.stop();
  }
});

Deno.test("no or a wrong token is 401 on every route but /healthz", async () => {
  const server = await startServer();
  try {
    const id = await liveCat(server);
    const routes: [string, string, unknown?][] = [
      ["POST", "/v1/exec_command", { cmd: "true" }],
      ["POST", "/v1/write_stdin", { session_id: id, chars: "x" }],
      ["GET", "/v1/sessions"],
      ["GET", `/v1/sessions/${id}`],
      ["DELETE", `/v1/sessions/${id}`],
      ["POST", `/v1/sessions/${id}/resize`, { cols: 10, rows: 10 }],
      ["POST", `/v1/sessions/${id}/signal`, { signal: "SIGINT" }],
      ["GET", `/v1/sessions/${id}/stream`],
      ["GET", "/v1/events"],
      ["GET", "/v1/tools"],
      ["GET", "/v1/approvals"],
      ["POST", "/v1/approvals/x", { decision: "approved" }],
      ["GET", "/v1/agents"],
      ["POST", "/v1/agents", { name: "x" }],
      ["DELETE", "/v1/agents/default"],
    ];
    for (const auth of ["", "Bearer wrong-token-0123456789", `Basic ${server.agentToken}`]) {
      for (const [method, path, body] of routes) {
        const r = await server.raw(path, {
          method,
          headers: { authorization: auth, "content-type": "application/json" },
          body: body === undefined ? undefined : JSON.stringify(body),
        });
        assert.equal(r.status, 401, `${method} ${path} with ${JSON.stringify(auth)}`);
        assert.deepEqual(JSON.parse(r.text), {
          error: { code: "unauthorized", message: "missing or wrong bearer token" },
        });
      }
    }
    assert.equal((await server.get("/healthz", { authorization: "" })).status, 200);
    assert.equal((await server.get(`/v1/sessions/${id}`)).status, 200, "the session lives on");
  } finally {
    await server.stop();
  }
});

Deno.test("roles: agents run their own sessions only; the operator sees and decides all", async (t) => {
  const server = await startServer({ UEXEC_APPROVAL_POLICY: "on-request" });
  try {
    const minted = await server.operator.post("/v1/agents", { name: "agent-b" });
    assert.equal(minted.status, 201);
    assert.equal(minted.body.name, "agent-b");
    assert.match(minted.body.token, /^uexec_[A-Za-z0-9_-]{43}$/);
    const b = server.as(minted.body.token);
    const aId = await liveCat(server);
    const bId = await liveCat(b);
    const missing = 99_999 === aId ? 99_998 : 99_999;

    await t.step("another agent's session is unknown, exactly as a missing one", async () => {
      const probes: [string, (id: number) => Promise<{ status: number; body: unknown }>][] = [
        ["get", (id) => b.get(`/v1/sessions/${id}`)],
        ["output", (id) => b.get(`/v1/sessions/${id}/output?since=0`)],
        ["screen", (id) => b.get(`/v1/sessions/${id}/screen`)],
        ["write", (id) => b.post("/v1/write_stdin", { session_id: id, chars: "stolen\n" })],
        ["signal", (id) => b.post(`/v1/sessions/${id}/signal`, { signal: "SIGKILL" })],
        ["resize", (id) => b.post(`/v1/sessions/${id}/resize`, { cols: 20, rows: 5 })],
        ["delete", (id) => b.del(`/v1/sessions/${id}`)],
        [
          "stream",
          async (id) => {
            const r = await server.raw(`/v1/sessions/${id}/stream`, {
              headers: { authorization: b.auth.authorization },
            });
            return { status: r.status, body: JSON.parse(r.text) };
          },
        ],
      ];
      for (const [what, probe] of probes) {
        const theirs = await probe(aId);
        const nobody = await probe(missing);
        assert.equal(theirs.status, 404, what);
        assert.deepEqual(theirs.body, {
          error: { code: "unknown_session", message: `Unknown session id ${aId}` },
        }, what);
        assert.deepEqual(nobody.body, {
          error: { code: "unknown_session", message: `Unknown session id ${missing}` },
        }, what);
      }
      const poll = await server.post("/v1/write_stdin", {
        session_id: aId,
        chars: "mine\n",
        until: "mine\\r\\n.*mine",
      });
      assert.equal(poll.body.output, "mine\r\nmine\r\n", "nothing of B's reached A's session");
    });

    await t.step("lists and events are scoped to the agent; the operator sees all", async () => {
      const ids = (r: { body: { sessions: { session_id: number }[] } }) =>
        r.body.sessions.map((s) => s.session_id).sort();
      assert.deepEqual(ids(await server.get("/v1/sessions")), [aId]);
      assert.deepEqual(ids(await b.get("/v1/sessions")), [bId]);
      assert.deepEqual(ids(await server.operator.get("/v1/sessions")), [aId, bId].sort());
      const opView = await server.operator.get(`/v1/sessions/${bId}`);
      assert.equal(opView.body.agent, "agent-b");
      const bEvents = await connectSse(`${server.url}/v1/events`, b.auth);
      const opEvents = await connectSse(`${server.url}/v1/events`, server.operator.auth);
      await server.post("/v1/exec_command", { cmd: "echo from-a", login: false });
      await b.post("/v1/exec_command", { cmd: "echo from-b", login: false });
      const seenByOp = await opEvents.until((evs) =>
        evs.filter((e) => e.event === "end").length >= 2
      );
      assert.deepEqual(
        seenByOp.filter((e) => e.event === "begin").map((e) => [e.data.agent, e.data.command]),
        [["default", "echo from-a"], ["agent-b", "echo from-b"]],
      );
      const seenByB = await bEvents.until((evs) => evs.some((e) => e.event === "end"));
      assert.deepEqual(seenByB.map((e) => e.data.agent), ["agent-b", "agent-b"]);
      await bEvents.close();
      await opEvents.close();
    });

    await t.step("an agent sees its own pending approvals and cannot decide any", async () => {
      const events = await connectSse(`${server.url}/v1/events`, server.operator.auth);
      const pending = server.post("/v1/exec_command", {
        cmd: "id -u",
        login: false,
        sandbox_permissions: "require_escalated",
        justification: "diagnosis",
      });
      const asked = await events.until((evs) => evs.some((e) => e.event === "approval_requested"));
      await events.close();
      const approval = asked.find((e) => e.event === "approval_requested")!.data.approval;
      assert.deepEqual((await server.operator.get("/v1/approvals")).body, {
        approvals: [approval],
      });
      assert.equal(approval.agent, "default");
      assert.deepEqual((await server.get("/v1/approvals")).body, { approvals: [approval] });
      assert.deepEqual((await b.get("/v1/approvals")).body, { approvals: [] });
      for (const agent of [server, b]) {
        const r = await agent.post(`/v1/approvals/${approval.id}`, { decision: "approved" });
        assert.equal(r.status, 403);
        assert.deepEqual(r.body, {
          error: { code: "forbidden", message: "deciding an approval is reserved to the operator" },
        });
      }
      const decided = await server.operator.post(`/v1/approvals/${approval.id}`, {
        decision: "denied",
      });
      assert.equal(decided.body.status, "denied");
      assert.equal((await pending).status, 403);
    });

    await t.step("agents cannot manage agents", async () => {
      for (
        const [method, path, body] of [
          ["GET", "/v1/agents", undefined],
          ["POST", "/v1/agents", { name: "sneaky" }],
          ["DELETE", "/v1/agents/agent-b", undefined],
        ] as const
      ) {
        const r = method === "GET"
          ? await b.get(path)
          : method === "POST"
          ? await b.post(path, body)
          : await b.del(path);
        assert.equal(r.status, 403, `${method} ${path}`);
        assert.equal(r.body.error.code, "forbidden");
      }
      const names = (await server.operator.get("/v1/agents")).body.agents.map((
        a: { name: string },
      ) => a.name);
      assert.deepEqual(names, ["agent-b", "default"]);
    });

    await t.step("agents do not share a sandbox domain: no signals across agents", async () => {
      const started = await server.post("/v1/exec_command", {
        cmd: "sleep 600 & echo $!",
        login: false,
        yield_time_ms: 500,
        until: "^\\d+\\r\\n",
      });
      const pid = Number(started.body.output.trim());
      assert.ok(pid > 0);
      const r = await b.post("/v1/exec_command", {
        cmd: `kill -0 ${pid} 2>&1; echo "rc=$?"`,
        login: false,
      });
      assert.match(r.body.output, /rc=1/);
      assert.match(r.body.output, /Operation not permitted|No such process/);
      if (started.body.session_id) await server.del(`/v1/sessions/${started.body.session_id}`);
    });

    await t.step("revoking an agent: 401 at once and its sessions gone", async () => {
      const live = await liveCat(b);
      const pid = (await server.operator.get(`/v1/sessions/${live}`)).body.pid;
      const revoked = await server.operator.del("/v1/agents/agent-b");
      assert.equal(revoked.status, 200);
      assert.equal(revoked.body.name, "agent-b");
      assert.equal(revoked.body.sessions_killed, 2);
      const after = await b.get("/v1/sessions");
      assert.equal(after.status, 401);
      assert.equal((await server.operator.get(`/v1/sessions/${live}`)).status, 404);
      assert.equal((await server.operator.get(`/v1/sessions/${bId}`)).status, 404);
      assert.equal(await exists(`/proc/${pid}`), false, "the revoked agent's process is gone");
      assert.equal((await server.operator.del("/v1/agents/agent-b")).status, 404);
      assert.equal((await server.get(`/v1/sessions/${aId}`)).status, 200, "A is untouched");
    });
  } finally {
    await server.stop();
  }
});

Deno.test("per-agent limits: pruning stays within an agent, max_profile caps what it asks", async () => {
  const server = await startServer({ UEXEC_MAX_SESSIONS: "9" });
  try {
    const capped = await server.operator.post("/v1/agents", {
      name: "capped",
      max_profile: "workspace-write",
      max_sessions: 9,
    });
    const c = server.as(capped.body.token);
    const mine = [];
    for (let i = 0; i < 9; i++) mine.push(await liveCat(server));
    const theirs = [];
    for (let i = 0; i < 10; i++) theirs.push(await liveCat(c));
    const left = (await server.get("/v1/sessions")).body.sessions.map((s: { session_id: number }) =>
      s.session_id
    );
    assert.deepEqual(left.sort(), mine.sort(), "another agent's sessions never prune mine");
    assert.equal((await c.get("/v1/sessions")).body.sessions.length, 9, "it pruned its own");

    const wider = await c.post("/v1/exec_command", {
      cmd: "true",
      profile: "workspace-write-net",
    });
    assert.equal(wider.status, 403);
    assert.deepEqual(wider.body, {
      error: {
        code: "forbidden",
        message:
          "profile: agent capped may not ask for workspace-write-net; its widest profile is workspace-write",
      },
    });
    const escalate = await c.post("/v1/exec_command", {
      cmd: "true",
      sandbox_permissions: "require_escalated",
    });
    assert.equal(escalate.status, 403);
    assert.equal(escalate.body.error.code, "forbidden");
    const narrower = await c.post("/v1/exec_command", {
      cmd: "echo ok",
      login: false,
      profile: "read-only",
    });
    assert.equal(narrower.body.output, "ok\r\n");
    const bad = await server.operator.post("/v1/agents", { name: "x", max_profile: "nope" });
    assert.equal(bad.status, 400);
    const dup = await server.operator.post("/v1/agents", { name: "capped" });
    assert.equal(dup.status, 409);
    assert.equal(dup.body.error.code, "agent_exists");
    const reserved = await server.operator.post("/v1/agents", { name: "operator" });
    assert.equal(reserved.status, 400);
  } finally {
    await server.stop();
  }
});

Deno.test("a 429 at the session limit says why nothing could be pruned", async () => {
  const server = await startServer();
  try {
    const two = await server.operator.post("/v1/agents", { name: "two", max_sessions: 2 });
    const c = server.as(two.body.token);
    await liveCat(c);
    await liveCat(c);
    const third = await c.post("/v1/exec_command", {
      cmd: "cat",
      login: false,
      yield_time_ms: 250,
    });
    assert.equal(third.status, 429);
    assert.deepEqual(third.body.error, {
      code: "session_limit",
      message: "session limit of 2 for agent two reached (2 live, 0 starting) and none may be " +
        "pruned: the 8 most recently used live sessions never are; end one with " +
        "DELETE /v1/sessions/{id}, or raise max_sessions",
    });
  } finally {
    await server.stop();
  }
});

Deno.test("max_profile and max_widening cap every widening: beyond them, 403 and nothing pending", async () => {
  const server = await startServer({ UEXEC_APPROVAL_POLICY: "on-request" });
  const outside = await Deno.makeTempDir({ prefix: "uexec-widen-" });
  try {
    const reader = await server.operator.post("/v1/agents", {
      name: "reader",
      max_profile: "read-only",
    });
    assert.equal(reader.status, 201);
    assert.equal(reader.body.max_widening, null);
    const r = server.as(reader.body.token);
    const refused = [
      { escalate: { write: [server.workspace] } },
      { escalate: { tcp_ports: [443] } },
      { escalate: { profile: "workspace-write" } },
      { profile: "read-only", escalate: { write: [outside], tcp_ports: [80] } },
    ];
    for (const extra of refused) {
      const res = await r.post("/v1/exec_command", {
        cmd: "true",
        sandbox_permissions: "require_escalated",
        ...extra,
      });
      assert.equal(res.status, 403, JSON.stringify(extra));
      assert.equal(res.body.error.code, "forbidden");
    }
    const write = await r.post("/v1/exec_command", {
      cmd: "true",
      sandbox_permissions: "require_escalated",
      escalate: { write: [outside] },
    });
    assert.equal(
      write.body.error.message,
      `escalate: agent reader may not ask to run sandboxed under read-only, plus write access to ${await Deno
        .realPath(outside)}; it is capped at read-only (max_profile, max_widening)`,
    );
    assert.deepEqual((await server.operator.get("/v1/approvals")).body.approvals, []);

    // max_widening names what it may ask for beyond its profile; still only through approval.
    const bad = await server.operator.post("/v1/agents", {
      name: "nocap",
      max_widening: { tcp_ports: [443] },
    });
    assert.equal(bad.status, 400);
    const relative = await server.operator.post("/v1/agents", {
      name: "rel",
      max_profile: "read-only",
      max_widening: { write: ["tmp"] },
    });
    assert.equal(relative.status, 400);
    const porter = await server.operator.post("/v1/agents", {
      name: "porter",
      max_profile: "read-only",
      max_widening: { tcp_ports: [8443, 443] },
    });
    assert.equal(porter.status, 201);
    assert.deepEqual(porter.body.max_widening, { tcp_ports: [443, 8443] });
    const listed = (await server.operator.get("/v1/agents")).body.agents
      .find((a: { name: string }) => a.name === "porter");
    assert.deepEqual(listed.max_widening, { tcp_ports: [443, 8443] });
    const p = server.as(porter.body.token);
    const beyond = await p.post("/v1/exec_command", {
      cmd: "true",
      sandbox_permissions: "require_escalated",
      escalate: { tcp_ports: [22] },
    });
    assert.equal(beyond.status, 403);
    const events = await connectSse(`${server.url}/v1/events`, server.operator.auth);
    const within = p.post("/v1/exec_command", {
      cmd: "true",
      login: false,
      sandbox_permissions: "require_escalated",
      escalate: { tcp_ports: [443] },
      justification: "fetch a package",
    });
    const asked = await events.until((evs) => evs.some((e) => e.event === "approval_requested"));
    await events.close();
    const pending = asked.find((e) => e.event === "approval_requested")!.data.approval;
    assert.equal(pending.agent, "porter");
    assert.deepEqual(pending.escalation, { tcp_ports: [443] });
    const decided = await server.operator.post(`/v1/approvals/${pending.id}`, {
      decision: "approved",
    });
    assert.equal(decided.status, 200);
    const done = await within;
    assert.equal(done.status, 200);
    assert.equal(done.body.exit_code, 0);
  } finally {
    await server.stop();
    await Deno.remove(outside, { recursive: true });
  }
});

Deno.test("max_widening paths are compared as escalations are: normalised, links resolved", async () => {
  const server = await startServer({ UEXEC_APPROVAL_POLICY: "on-request" });
  const outside = await Deno.makeTempDir({ prefix: "uexec-widen-" });
  const link = `${outside}-link`;
  await Deno.symlink(outside, link);
  try {
    const writer = await server.operator.post("/v1/agents", {
      name: "writer",
      max_profile: "read-only",
      max_widening: { write: [`${link}/./`] },
    });
    assert.equal(writer.status, 201, JSON.stringify(writer.body));
    const real = await Deno.realPath(outside);
    assert.deepEqual(writer.body.max_widening, { write: [real] });
    const events = await connectSse(`${server.url}/v1/events`, server.operator.auth);
    const asking = server.as(writer.body.token).post("/v1/exec_command", {
      cmd: "true",
      login: false,
      sandbox_permissions: "require_escalated",
      escalate: { write: [outside] },
    });
    const asked = await events.until((evs) => evs.some((e) => e.event === "approval_requested"));
    await events.close();
    const pending = asked.find((e) => e.event === "approval_requested")!.data.approval;
    assert.deepEqual(pending.escalation, { write: [real] });
    await server.operator.post(`/v1/approvals/${pending.id}`, { decision: "denied" });
    assert.equal((await asking).status, 403);
  } finally {
    await server.stop();
    await Deno.remove(link);
    await Deno.remove(outside, { recursive: true });
  }
});

Deno.test("on-failure never proposes a retry beyond the agent's cap", async () => {
  const server = await startServer({ UEXEC_APPROVAL_POLICY: "on-failure" });
  try {
    const reader = await server.operator.post("/v1/agents", {
      name: "reader",
      max_profile: "read-only",
    });
    const r = await server.as(reader.body.token).post("/v1/exec_command", {
      cmd: "echo x > denied.txt",
      login: false,
    });
    assert.equal(r.status, 200);
    assert.equal(r.body.sandbox.denied, true);
    assert.equal(
      r.body.sandbox.message,
      "the retry this denial needs is beyond the agent's max_profile and max_widening, " +
        "so it was not proposed",
    );
    assert.deepEqual((await server.operator.get("/v1/approvals")).body.approvals, []);
  } finally {
    await server.stop();
  }
});

Deno.test("a sandboxed command cannot use the API, even with stolen tokens", async () => {
  const server = await startServer({ UEXEC_APPROVAL_POLICY: "on-request" });
  const marker = `${server.workspace}/escalated-ran`;
  try {
    const body = JSON.stringify({
      cmd: `touch ${marker}`,
      sandbox_permissions: "require_escalated",
    });
    for (const token of [server.agentToken, server.operatorToken]) {
      const r = await server.post("/v1/exec_command", {
        cmd: `curl -s -H 'authorization: Bearer ${token}' -H 'content-type: application/json' ` +
          `-d '${body}' ${server.url}/v1/exec_command; echo; ` +
          `curl -s -H 'authorization: Bearer ${token}' ${server.url}/v1/approvals`,
        login: false,
        profile: "workspace-write-net",
      });
      assert.equal(r.status, 200);
      const refused = JSON.stringify({
        error: { code: "forbidden_peer", message: "requests from sandboxed commands are refused" },
      });
      assert.equal(r.body.output, `${refused}\r\n${refused}`);
    }
    assert.deepEqual((await server.operator.get("/v1/approvals")).body, { approvals: [] });
    assert.equal(await exists(marker), false);
  } finally {
    await server.stop();
  }
});

Deno.test("tokens: generated 0600 in a 0700 state directory, never in a child or the logs", async (t) => {
  const parent = await Deno.makeTempDir({ prefix: "uexec-state-parent-" });
  await Deno.chmod(parent, 0o755);
  const stateDir = `${parent}/state`;
  const env = { UEXEC_STATE_DIR: stateDir, UEXEC_OPERATOR_TOKEN: "", UEXEC_AGENT_TOKEN: "" };
  let server = await startServer(env);
  const operatorToken = (await Deno.readTextFile(`${stateDir}/operator.token`)).trim();
  const agentToken = (await Deno.readTextFile(`${stateDir}/agent.token`)).trim();
  try {
    await t.step("files and modes", async () => {
      assert.equal((await Deno.stat(stateDir)).mode! & 0o777, 0o700);
      for (const name of ["operator.token", "agent.token", "agents.json"]) {
        assert.equal((await Deno.stat(`${stateDir}/${name}`)).mode! & 0o777, 0o600, name);
      }
      for (const token of [operatorToken, agentToken]) {
        assert.match(token, /^uexec_[A-Za-z0-9_-]{43}$/, "256 random bits");
      }
      assert.notEqual(operatorToken, agentToken);
      const registry = await Deno.readTextFile(`${stateDir}/agents.json`);
      assert.ok(!registry.includes(agentToken), "agents are stored by digest only");
      assert.equal((await server.as(operatorToken).get("/v1/agents")).status, 200);
      assert.equal((await server.as(agentToken).get("/v1/sessions")).status, 200);
      assert.equal((await server.as(agentToken).get("/v1/agents")).status, 403);
    });

    await t.step("no child can see a token: environment, state files, server /proc", async () => {
      const agent = server.as(agentToken);
      for (const profile of ["read-only", "workspace-write", "workspace-write-net"]) {
        const r = await agent.post("/v1/exec_command", {
          cmd: `env; cat /proc/self/environ; ls ${stateDir}; cat ${stateDir}/operator.token ` +
            `${stateDir}/agent.token ${stateDir}/agents.json; ` +
            `cat /proc/${server.pid}/environ; echo done`,
          login: false,
          profile,
        });
        assert.equal(r.status, 200);
        assert.match(r.body.output, /done\r\n$/);
        for (const token of [operatorToken, agentToken]) {
          assert.ok(!r.body.output.includes(token), `${profile} saw a token`);
        }
        assert.match(
          r.body.output,
          new RegExp(`ls: cannot open directory '${stateDir}': Permission denied`),
        );
      }
    });

    await t.step("agents survive a restart; tokens keep working", async () => {
      const minted = await server.as(operatorToken).post("/v1/agents", { name: "kept" });
      const output = await server.stop();
      // No exception: the dashboard's sign-in link carries a one-time code, never a token.
      const signIn = `uexec dashboard: ${server.url}/#code=`;
      const lines = output.stdout.split("\n");
      assert.equal(lines.filter((line) => line.startsWith(signIn)).length, 1);
      for (const token of [operatorToken, agentToken, minted.body.token]) {
        assert.ok(!output.stdout.includes(token) && !output.stderr.includes(token));
      }
      assert.match(output.stdout, new RegExp(`operator token: ${stateDir}/operator.token`));
      server = await startServer(env);
      assert.equal((await server.as(minted.body.token).get("/v1/sessions")).status, 200);
      assert.equal((await server.as(operatorToken).get("/v1/agents")).status, 200);
      const names = (await server.as(operatorToken).get("/v1/agents")).body.agents.map((
        a: { name: string },
      ) => a.name);
      assert.deepEqual(names, ["default", "kept"]);
    });
  } finally {
    await server.stop();
    await Deno.remove(parent, { recursive: true });
  }
});

Deno.test("a state directory others can read is refused", async () => {
  const stateDir = await Deno.makeTempDir({ prefix: "uexec-state-open-" });
  await Deno.chmod(stateDir, 0o755);
  try {
    await assert.rejects(
      () => startServer({ UEXEC_STATE_DIR: stateDir }),
      new RegExp(
        `^Error: server exited 2 before listening: uexec: state directory ${stateDir} must be a ` +
          "directory owned by uid 0 with mode 0700 \\(found owner 0, mode 0755\\); " +
          `fix it with "chmod 700 ${stateDir}" or set UEXEC_STATE_DIR\\n$`,
      ),
    );
  } finally {
    await Deno.remove(stateDir, { recursive: true });
  }
});

Deno.test("UEXEC_LISTEN=unix:PATH serves on a 0600 socket", async () => {
  const dir = await Deno.makeTempDir({ prefix: "uexec-sock-" });
  const path = `${dir}/api.sock`;
  const token = randomToken();
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "--v8-flags=--enable-experimental-regexp-engine",
      new URL("../../main.ts", import.meta.url).pathname,
    ],
    env: {
      UEXEC_LISTEN: `unix:${path}`,
      UEXEC_STATE_DIR: `${dir}/state`,
      UEXEC_AGENT_TOKEN: token,
      UEXEC_OPERATOR_TOKEN: randomToken(),
      UEXEC_WORKSPACE: dir,
    },
    stdout: "piped",
    stderr: "null",
  }).spawn();
  try {
    const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
    let out = "";
    // The listening line, after the sandbox uids line of a root server.
    while (!/uexec listening on .*\n/.test(out)) out += (await reader.read()).value ?? "";
    assert.match(out, /^(uexec: sandbox uids .*\n)?uexec listening on (.*)\n/);
    assert.equal(/uexec listening on (.*)\n/.exec(out)![1], `unix:${path}`);
    assert.equal((await Deno.lstat(path)).mode! & 0o777, 0o600);
    const client = Deno.createHttpClient({ proxy: { transport: "unix", path } });
    const call = (auth: string) =>
      fetch("http://localhost/v1/sessions", { client, headers: { authorization: auth } });
    const ok = await call(`Bearer ${token}`);
    assert.deepEqual(await ok.json(), { sessions: [] });
    const refused = await call("Bearer nope");
    assert.equal(refused.status, 401);
    await refused.body?.cancel();
    client.close();
    reader.releaseLock();
  } finally {
    child.kill("SIGTERM");
    await child.status;
    await child.stdout.cancel().catch(() => {});
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("/healthz is open but says only ok to anyone without a credential or in the sandbox", async () => {
  const server = await startServer();
  try {
    // A liveness probe learns it is up, no more: not the uids, cgroups, profiles or ports.
    for (const authorization of ["", "Bearer wrong-token-0123456789"]) {
      const open = await server.raw("/healthz", { headers: { authorization } });
      assert.equal(open.status, 200);
      assert.deepEqual(JSON.parse(open.text), { ok: true });
    }
    // A sandboxed command (host network) with a stolen token learns nothing: its connection is
    // refused at accept, before any request is read.
    const probe = await server.post("/v1/exec_command", {
      cmd: `curl -s -H 'authorization: Bearer ${server.operatorToken}' ${server.url}/healthz`,
      login: false,
      profile: "workspace-write-net",
    });
    assert.equal(
      probe.body.output,
      '{"error":{"code":"forbidden_peer","message":"requests from sandboxed commands are refused"}}',
      JSON.stringify(probe.body),
    );
    const r = await server.raw("/healthz", {});
    assert.equal(r.status, 200);
    for (const token of [server.agentToken, server.operatorToken]) {
      assert.ok(!r.text.includes(token));
    }
    const full = JSON.parse(r.text);
    assert.equal(typeof full.websocket, "string");
    assert.equal(full.containment, "cgroup");
    const { denies } = full.sandbox;
    assert.equal(denies["full-access"], null);
    for (const name of ["read-only", "workspace-write", "workspace-write-net"]) {
      for (const call of ["keyctl", "add_key", "bpf", "userfaultfd", "perf_event_open"]) {
        assert.ok(denies[name].syscalls.includes(call), `${name} denies ${call}`);
      }
      assert.equal(
        denies[name].conditional.unshare,
        "with any CLONE_NEW* flag but CLONE_NEWIPC alone (needs CAP_SYS_ADMIN)",
      );
      assert.equal(
        denies[name].conditional.setns,
        "but into a mount namespace, named as such (needs CAP_SYS_ADMIN)",
      );
      assert.deepEqual(denies[name].enosys, ["clone3", "pidfd_open"]);
    }
    assert.deepEqual(denies["workspace-write"].socket_families_allowed, ["AF_UNIX"]);
    assert.deepEqual(denies["workspace-write-net"].socket_families_allowed, [
      "AF_UNIX",
      "AF_INET",
      "AF_INET6",
    ]);
  } finally {
    await server.stop();
  }
});

Deno.test("a malformed agent registry stops the server with a message naming the file", async () => {
  const stateDir = await Deno.makeTempDir({ prefix: "uexec-state-bad-" });
  await Deno.writeTextFile(`${stateDir}/agents.json`, "{not json", { mode: 0o600 });
  try {
    await assert.rejects(
      () => startServer({ UEXEC_STATE_DIR: stateDir }),
      new RegExp(
        `^Error: server exited 2 before listening: uexec: state directory ${stateDir}: ` +
          `${stateDir}/agents.json: not valid JSON`,
      ),
    );
  } finally {
    await Deno.remove(stateDir, { recursive: true });
  }
});

Deno.test("one connection: a revoked token fails at once, and each request is its own token's", async () => {
  const server = await startServer();
  // One client with one pooled connection: every request below rides the same connection,
  // where the server remembers the token it last checked.
  const client = Deno.createHttpClient({ poolMaxIdlePerHost: 1 });
  const get = async (token: string) => {
    const res = await fetch(`${server.url}/v1/sessions`, {
      client,
      headers: { authorization: `Bearer ${token}` },
    });
    await res.body?.cancel();
    return res.status;
  };
  try {
    const minted = await server.operator.post("/v1/agents", { name: "agent-c" });
    const token = minted.body.token;
    assert.equal(await get(token), 200);
    assert.equal(await get(token), 200);
    // Another token on the same connection is checked as itself, not taken for the last one.
    assert.equal(await get(`${token.slice(0, -1)}${token.endsWith("A") ? "B" : "A"}`), 401);
    assert.equal(await get(server.operatorToken), 200);
    assert.equal(await get(token), 200);
    assert.equal((await server.operator.del("/v1/agents/agent-c")).status, 200);
    assert.equal(await get(token), 401);
  } finally {
    client.close();
    await server.stop();
  }
});

Deno.test("an agent minted again under a revoked one's name inherits nothing of it", async () => {
  const server = await startServer();
  const mint = async () => {
    const minted = await server.operator.post("/v1/agents", { name: "agent-r" });
    assert.equal(minted.status, 201);
    return minted.body.token as string;
  };
  const old = server.as(await mint());
  // The shell's pid: what a replayed answer would repeat and a new run would not.
  const keyed = { cmd: "echo pid-$$", login: false, shell: "/bin/sh" };
  const key = { "idempotency-key": "k-1" };
  const first = await old.post("/v1/exec_command", keyed, key);
  assert.equal(first.status, 200, JSON.stringify(first.body));
  const events = await connectSse(`${server.url}/v1/events`, old.auth);
  const ws = await RpcSocket.open(await wsUrl(server.url, server.auth), old.auth);
  // A request the old agent's token got in with, whose body arrives only after the revocation.
  const { hostname, port } = new URL(server.url);
  const conn = await Deno.connect({ hostname, port: Number(port) });
  const marker = `${server.workspace}/stale-ran`;
  const body = JSON.stringify({ cmd: `touch ${marker}`, login: false });
  const head = [
    "POST /v1/exec_command HTTP/1.1",
    `Host: ${hostname}:${port}`,
    old.auth.authorization ? `Authorization: ${old.auth.authorization}` : "",
    "Content-Type: application/json",
    `Content-Length: ${body.length}`,
    "Expect: 100-continue",
    "Connection: close",
    "",
    "",
  ].filter((line, i, all) => line !== "" || i >= all.length - 2).join("\r\n");
  await conn.write(new TextEncoder().encode(head));
  const reply = conn.readable.pipeThrough(new TextDecoderStream()).getReader();
  let got = "";
  // The server asks for the body once the route has authenticated the request and reads it.
  while (!got.includes("\r\n\r\n")) got += (await reply.read()).value ?? "";
  assert.match(got, /^HTTP\/1.1 100 Continue/);
  try {
    assert.equal((await server.operator.del("/v1/agents/agent-r")).status, 200);
    const now = server.as(await mint());

    await conn.write(new TextEncoder().encode(body));
    for (let r; !(r = await reply.read()).done;) got += r.value;
    assert.match(got, /HTTP\/1.1 401/, "a request let in before the revocation is refused");
    assert.equal(await exists(marker), false, "and its command never ran");

    const replay = await now.post("/v1/exec_command", keyed, key);
    assert.equal(replay.status, 200);
    assert.notEqual(replay.body.output, first.body.output, "the old agent's call is not answered");
    // The old agent's event stream ended without passing on the new agent's begin above; its
    // WebSocket was closed.
    await assert.rejects(events.until((e) => e.length > 0), /stream ended; got \[\]/);
    assert.equal((await ws.closed).code, 1008);
    assert.deepEqual((await now.get("/v1/sessions")).body.sessions, []);
    // The history under the name holds both agents' commands (the operator sees both); the
    // new agent reads only its own, and the old one's entry is not found for it.
    const both = (await server.operator.get("/v1/history?agent=agent-r")).body.items;
    assert.deepEqual(both.map((i: { command: string }) => i.command), [keyed.cmd, keyed.cmd]);
    const own = (await now.get("/v1/history")).body.items;
    assert.deepEqual(own.map((i: { id: string }) => i.id), [both[0].id]);
    assert.equal((await now.get(`/v1/history/${both[1].id}`)).status, 404);
    assert.equal((await now.get(`/v1/history/${both[0].id}`)).status, 200);
  } finally {
    await reply.cancel().catch(() => {}); // Closes the connection unless it ended already.
    await events.close();
    await ws.close();
    await server.stop();
  }
});

Deno.test("revoking an idle agent ends its event stream and WebSocket at once; the operator is told", async () => {
  const server = await startServer();
  const minted = await server.operator.post("/v1/agents", { name: "agent-q" });
  const agent = server.as(minted.body.token);
  const events = await connectSse(`${server.url}/v1/events`, agent.auth);
  const watch = await connectSse(`${server.url}/v1/events`, server.operator.auth);
  const bystander = await connectSse(`${server.url}/v1/events`, server.auth);
  const ws = await RpcSocket.open(await wsUrl(server.url, server.auth), agent.auth);
  try {
    // The agent has no session and sends nothing: only the revocation can end its streams.
    // (Before, they stayed open until the next event concerning anyone; a minute says hung.)
    assert.equal((await server.operator.del("/v1/agents/agent-q")).status, 200);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const hung = new Promise<"hung">((r) => timer = setTimeout(() => r("hung"), 60_000));
    const ended = events.until((e) => e.length > 0).then(() => "passed an event", String);
    const outcome = await Promise.race([Promise.all([ended, ws.closed]), hung]);
    clearTimeout(timer);
    assert.notEqual(outcome, "hung", "the revoked agent's streams stayed open");
    const [sse, socket] = outcome as [string, CloseEvent];
    assert.match(sse, /stream ended; got \[\]/);
    assert.equal(socket.code, 1008);
    const told = await watch.until((e) => e.length > 0);
    assert.deepEqual(told[0], { event: "agent_revoked", data: { agent: "agent-q" } });
    // Another agent is not told: its stream's next event is its own command's, nothing before.
    await server.post("/v1/exec_command", { cmd: "true", login: false });
    const seen = await bystander.until((e) => e.some((x) => x.event === "begin"));
    assert.equal(seen[0].event, "begin", JSON.stringify(seen));
  } finally {
    await events.close();
    await watch.close();
    await bystander.close();
    await ws.close();
    await server.stop();
  }
});

Deno.test("a command still starting when its agent is revoked is killed, not left running", async () => {
  // Spawner workers that hold a spawn until the test lets it go (tests/fixtures/spawner_death).
  const server = await startServer({}, [], undefined, "tests/fixtures/spawner_death/main.ts");
  const fifo = `${server.workspace}/hold`;
  try {
    assert.equal((await new Deno.Command("mkfifo", { args: [fifo] }).output()).code, 0);
    const minted = await server.operator.post("/v1/agents", { name: "agent-s" });
    const agent = server.as(minted.body.token);
    const started = agent.post("/v1/exec_command", {
      cmd: `sleep 1000 # ${HOLD}${fifo}`,
      login: false,
      shell: "/bin/sh",
    });
    // Opening the FIFO returns once the spawner worker opened it: the spawn is in flight.
    const letGo = await Deno.open(fifo, { write: true });
    const revoked = await server.operator.del("/v1/agents/agent-s");
    assert.equal(revoked.body.sessions_killed, 0, "nothing of it was registered yet");
    letGo.close();
    const answer = await started;
    assert.equal(answer.status, 401, JSON.stringify(answer.body));
    assert.equal(answer.body.error.code, "unauthorized");
    assert.deepEqual((await server.operator.get("/v1/sessions")).body.sessions, []);
    const left = await new Deno.Command("pgrep", { args: ["-f", HOLD] }).output();
    assert.equal(new TextDecoder().decode(left.stdout), "", "its process is gone");
  } finally {
    await server.stop();
  }
});
