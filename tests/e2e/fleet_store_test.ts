// The fleet on a real PostgreSQL (issue 33): three nodes on loopback sharing one store. Agents
// minted on one node work on every node; calls for another node's session are forwarded with a
// node credential (never the caller's token) and scoped to the caller there; a node killed
// with SIGKILL answers 410 node_lost from the others; the store restarted under load loses
// nothing already recorded; a dashboard sign-out a node missed is caught up when it reconnects.

import assert from "node:assert/strict";
import { startPostgres, type TestPostgres } from "../helpers/postgres.ts";
import { randomToken, startServer, type TestServer } from "../helpers/server.ts";
import { connectSse } from "../helpers/sse.ts";
import { RpcSocket, wsUrl } from "../helpers/ws.ts";

const SPAN = 100_000;

interface Fleet {
  pg: TestPostgres;
  nodes: TestServer[];
  operatorToken: string;
  agentToken: string;
  stop(): Promise<void>;
}

async function startFleet(count = 3, env: Record<string, string> = {}): Promise<Fleet> {
  const pg = await startPostgres();
  const operatorToken = randomToken();
  const agentToken = randomToken();
  const nodes: TestServer[] = [];
  try {
    // All at once: the migrations' advisory lock makes concurrent starts safe.
    nodes.push(
      ...await Promise.all(Array.from({ length: count }, (_, i) =>
        startServer({
          UEXEC_STORE: pg.url,
          UEXEC_NODE_ID: `n${i + 1}`,
          UEXEC_NODE_LEASE_MS: "1500",
          UEXEC_OPERATOR_TOKEN: operatorToken,
          UEXEC_AGENT_TOKEN: agentToken,
          ...env,
        }))),
    );
  } catch (err) {
    await Promise.all(nodes.map((n) => n.stop()));
    await pg.destroy();
    throw err;
  }
  return {
    pg,
    nodes,
    operatorToken,
    agentToken,
    async stop() {
      await Promise.allSettled(nodes.map((n) => n.stop()));
      await pg.destroy();
    },
  };
}

const nodeOf = (id: number) => Math.floor(id / SPAN);

/** `promise`, or a failure naming `what` if it has not settled within a minute (a bound). */
async function bounded<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const bound = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no ${what} within 60 s`)), 60_000);
  });
  try {
    return await Promise.race([promise, bound]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Revokes `agent` on node `on` and waits until node `hears` (whose node id is `name`) says, on
 * its operator's event stream, that it heard of it from the store.
 */
async function revokeHeard(
  on: TestServer,
  hears: TestServer,
  name: string,
  agent: string,
): Promise<void> {
  const events = await connectSse(`${hears.url}/v1/events`, hears.operator.auth);
  assert.equal((await on.operator.del(`/v1/agents/${agent}`)).status, 200);
  await events.until((all) =>
    all.some((e) => e.event === "agent_revoked" && e.data.agent === agent && e.data.node === name)
  );
  await events.close();
}

/** A live `cat` session of `client` on `node`, its id. */
async function catSession(node: TestServer, token: string): Promise<number> {
  const res = await node.as(token).post("/v1/exec_command", {
    cmd: "cat",
    tty: true,
    yield_time_ms: 250,
  });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.equal(typeof res.body.session_id, "number", JSON.stringify(res.body));
  return res.body.session_id;
}

Deno.test({
  name: "fleet: an agent minted on node 1 works on nodes 2 and 3, each session ids its node",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const fleet = await startFleet();
    try {
      const [n1, n2, n3] = fleet.nodes;
      const minted = await n1.operator.post("/v1/agents", { name: "alice", max_sessions: 5 });
      assert.equal(minted.status, 201, JSON.stringify(minted.body));
      const ordinals = new Set<number>();
      for (const [i, node] of [n1, n2, n3].entries()) {
        const res = await node.as(minted.body.token).post("/v1/exec_command", {
          cmd: "echo fleet-ok",
          yield_time_ms: 5000,
        });
        assert.equal(res.status, 200, JSON.stringify(res.body));
        assert.match(res.body.output, /fleet-ok/);
        const id = await catSession(node, minted.body.token);
        const info = await node.as(minted.body.token).get(`/v1/sessions/${id}`);
        assert.equal(info.body.node, `n${i + 1}`);
        ordinals.add(nodeOf(id));
      }
      // Session ids are unique across the fleet: each node hands out its own ordinal's span.
      assert.equal(ordinals.size, 3);
      assert.ok(![...ordinals].includes(0));
      // The history on any node covers every node, each command with the node it ran on.
      for (const node of [n1, n2, n3]) {
        const page = await node.as(minted.body.token).get("/v1/history?q=fleet-ok");
        assert.equal(page.status, 200, JSON.stringify(page.body));
        assert.deepEqual(
          page.body.items.map((i: { node: string }) => i.node).sort(),
          ["n1", "n2", "n3"],
        );
        assert.ok(page.body.items.every((i: { status: string }) => i.status === "exited"));
        const detail = await node.operator.get(`/v1/history/${page.body.items[0].id}`);
        assert.match(detail.body.output_tail, /fleet-ok/);
      }
      // Each node's /metrics labels its series with its node; /healthz names the store.
      const metrics = await fetch(`${n2.url}/metrics`, { headers: n2.operator.auth });
      assert.match(await metrics.text(), /^uexec_build_info\{[^}]*node="n2"/m);
      const health = await n3.operator.get("/healthz");
      assert.equal(health.body.store.kind, "postgres");
      assert.equal(health.body.store.ok, true);
      assert.equal(health.body.store.node, "n3");
      // Its caps hold on every node: minted read-only on node 1, refused wider on node 3.
      const capped = await n1.operator.post("/v1/agents", {
        name: "capped",
        max_profile: "read-only",
      });
      assert.equal(capped.status, 201, JSON.stringify(capped.body));
      const wider = await n3.as(capped.body.token).post("/v1/exec_command", {
        cmd: "true",
        profile: "workspace-write",
      });
      assert.equal(wider.status, 403, JSON.stringify(wider.body));
      assert.equal(wider.body.error.code, "forbidden");
      // The minting node refuses the same name again, and so does every other node.
      const again = await n3.operator.post("/v1/agents", { name: "alice" });
      assert.equal(again.status, 409);
      // Revoked on node 2: node 3 hears it from the store (its own streams say so), and refuses.
      await revokeHeard(n2, n3, "n3", "alice");
      const revoked = await n3.as(minted.body.token).post("/v1/exec_command", { cmd: "true" });
      assert.equal(revoked.status, 401);
    } finally {
      await fleet.stop();
    }
  },
});

Deno.test({
  name: "fleet: write_stdin, the stream, DELETE and the session list reach another node's session",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const fleet = await startFleet();
    try {
      const [n1, n2, n3] = fleet.nodes;
      const alice = (await n1.operator.post("/v1/agents", { name: "alice" })).body.token;
      const bob = (await n1.operator.post("/v1/agents", { name: "bob" })).body.token;
      const id = await catSession(n1, alice);
      const mine = await n1.get(`/v1/sessions/${id}`, { authorization: `Bearer ${alice}` });
      assert.equal(mine.body.node, "n1");

      // The output stream, subscribed on node 2, of a session on node 1.
      const stream = await connectSse(`${n2.url}/v1/sessions/${id}/stream`, {
        authorization: `Bearer ${alice}`,
      });
      const wrote = await n2.as(alice).post("/v1/write_stdin", {
        session_id: id,
        chars: "forwarded-line\n",
        yield_time_ms: 2000,
        until: "forwarded-line\\r?\\n.*forwarded-line",
      });
      assert.equal(wrote.status, 200, JSON.stringify(wrote.body));
      assert.match(wrote.body.output, /forwarded-line/);
      await stream.until((events) =>
        events.some((e) => JSON.stringify(e.data).includes("forwarded-line"))
      );
      await stream.close();

      // The operator's event stream on node 3 carries node 1's events too, each naming its node.
      const fleetEvents = await connectSse(`${n3.url}/v1/events`, n3.operator.auth);
      const marker = await n1.as(alice).post("/v1/exec_command", {
        cmd: "echo fleet-events-marker",
        yield_time_ms: 5000,
      });
      assert.equal(marker.status, 200);
      const seen = await fleetEvents.until((all) =>
        all.some((e) => e.event === "begin" && e.data.command === "echo fleet-events-marker")
      );
      const begin = seen.find((e) => e.event === "begin" && e.data.command.includes("marker"))!;
      assert.equal(begin.data.node, "n1");
      await fleetEvents.close();
      // An agent's stream on node 3 has no other agent's events from node 1.
      const bobEvents = await connectSse(`${n3.url}/v1/events`, { authorization: `Bearer ${bob}` });
      await n1.as(alice).post("/v1/exec_command", { cmd: "echo alice-only", yield_time_ms: 5000 });
      await n1.as(bob).post("/v1/exec_command", { cmd: "echo bob-marker", yield_time_ms: 5000 });
      const bobSaw = await bobEvents.until((all) =>
        all.some((e) => e.event === "end" && e.data.agent === "bob")
      );
      assert.ok(bobSaw.every((e) => e.data.agent === "bob"), JSON.stringify(bobSaw));
      await bobEvents.close();

      // Another agent cannot reach it through any node: unknown, as on one host.
      const theirs = await n3.as(bob).post("/v1/write_stdin", { session_id: id, chars: "x" });
      assert.equal(theirs.status, 404, JSON.stringify(theirs.body));
      assert.equal((await n2.as(bob).del(`/v1/sessions/${id}`)).status, 404);

      // A forged node header from an agent is refused, whoever it names.
      const forged = await n2.as(bob).post("/v1/write_stdin", { session_id: id, chars: "x" }, {
        "x-uexec-agent": "alice",
      });
      assert.equal(forged.status, 403);
      assert.equal(forged.body.error.code, "forbidden_node_header");
      const forgedOperator = await n1.operator.get("/v1/sessions", { "x-uexec-agent": "alice" });
      assert.equal(forgedOperator.status, 403);

      // The operator on node 3 lists the fleet's sessions, node 1's included.
      const other = await catSession(n3, bob);
      const listed = await n2.operator.get("/v1/sessions");
      assert.equal(listed.status, 200);
      const ids = listed.body.sessions.map((s: { session_id: number }) => s.session_id);
      assert.ok(ids.includes(id) && ids.includes(other), JSON.stringify(listed.body));
      // An agent's list is its own only.
      const bobs = await n1.as(bob).get("/v1/sessions");
      assert.deepEqual(bobs.body.sessions.map((s: { session_id: number }) => s.session_id), [
        other,
      ]);

      // DELETE on node 3 of node 1's session.
      const killed = await n3.as(alice).del(`/v1/sessions/${id}`);
      assert.equal(killed.status, 200, JSON.stringify(killed.body));
      assert.equal((await n1.as(alice).get(`/v1/sessions/${id}`)).status, 404);

      // No answer ever carried a node credential: none of the store's node digests is the
      // digest of a token any answer above or below holds.
      const digests = new Set(
        (await fleet.pg.sql("SELECT credential_sha256 FROM uexec_nodes")).trim().split("\n"),
      );
      assert.equal(digests.size, 3);
      const texts = [
        JSON.stringify(listed.body),
        JSON.stringify(wrote.body),
        JSON.stringify(killed.body),
        JSON.stringify((await n1.operator.get("/healthz")).body),
        JSON.stringify((await n2.operator.get("/v1/agents")).body),
      ];
      for (const text of texts) {
        for (const token of text.match(/uexec_[A-Za-z0-9_-]{20,}/g) ?? []) {
          assert.ok(!digests.has(await sha256(token)), "a node credential in an answer");
        }
      }
    } finally {
      await fleet.stop();
    }
  },
});

Deno.test({
  name: "fleet: the WebSocket on node 2 subscribes to, writes to and kills node 1's session",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const fleet = await startFleet(2);
    try {
      const [n1, n2] = fleet.nodes;
      const alice = (await n1.operator.post("/v1/agents", { name: "alice" })).body.token;
      const bob = (await n1.operator.post("/v1/agents", { name: "bob" })).body.token;
      const id = await catSession(n1, alice);
      const auth = { authorization: `Bearer ${alice}` };
      const ws = await RpcSocket.open(await wsUrl(n2.url, auth), auth);
      const subscribed = await ws.call("subscribe", { session_id: id });
      assert.equal(subscribed.result.session_id, id, JSON.stringify(subscribed));
      const wrote = await ws.call("write_stdin", {
        session_id: id,
        chars: "over-the-socket\n",
        yield_time_ms: 1000,
      });
      assert.equal(wrote.error, undefined, JSON.stringify(wrote));
      // The notifications name the session and give offsets from where the subscription began.
      const seen = await ws.wait((f) =>
        f.method === "output" && String(f.params.text).includes("over-the-socket")
      );
      assert.equal(seen.params.session_id, id);
      assert.ok(seen.params.offset >= subscribed.result.offset);
      const resized = await ws.call("resize", { session_id: id, cols: 100, rows: 30 });
      assert.deepEqual(resized.result, { ok: true });
      // Another agent's socket on node 2 cannot reach it.
      const bobAuth = { authorization: `Bearer ${bob}` };
      const other = await RpcSocket.open(await wsUrl(n2.url, bobAuth), bobAuth);
      const refused = await other.call("kill", { session_id: id });
      assert.equal(refused.error.data.code, "unknown_session", JSON.stringify(refused));
      const notSubscribed = await other.call("subscribe", { session_id: id });
      assert.equal(notSubscribed.error.data.code, "unknown_session");
      await other.close();
      const killed = await ws.call("kill", { session_id: id });
      assert.equal(killed.error, undefined, JSON.stringify(killed));
      await ws.wait((f) => f.method === "exit" && f.params.session_id === id);
      await ws.close();
    } finally {
      await fleet.stop();
    }
  },
});

Deno.test({
  name: "fleet: an approval raised on node 1 is listed and decided on node 2 and runs the command",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const fleet = await startFleet(3, { UEXEC_APPROVAL_POLICY: "untrusted" });
    try {
      const [n1, n2, n3] = fleet.nodes;
      const events = await connectSse(`${n1.url}/v1/events`, n1.operator.auth);
      const asked = n1.post("/v1/exec_command", {
        cmd: "touch decided-elsewhere && echo ran-after-approval",
        login: false,
        yield_time_ms: 10000,
      });
      const all = await events.until((all) => all.some((e) => e.event === "approval_requested"));
      await events.close();
      const raised = all.find((e) => e.event === "approval_requested")!.data;
      assert.equal(raised.node, "n1");
      // Listed on every node, to the operator and to the agent that asked; not to another agent.
      for (const node of [n2, n3]) {
        const listed = await node.operator.get("/v1/approvals");
        assert.deepEqual(listed.body.approvals.map((a: { id: string }) => a.id), [
          raised.approval.id,
        ]);
        const own = await node.get("/v1/approvals");
        assert.equal(own.body.approvals.length, 1);
      }
      const other = (await n3.operator.post("/v1/agents", { name: "other" })).body.token;
      assert.deepEqual((await n2.as(other).get("/v1/approvals")).body.approvals, []);
      // An agent cannot decide, on any node.
      const byAgent = await n2.post(`/v1/approvals/${raised.approval.id}`, {
        decision: "approved",
      });
      assert.equal(byAgent.status, 403);
      const malformed = await n2.operator.post(`/v1/approvals/${raised.approval.id}`, {
        decision: "maybe",
      });
      assert.equal(malformed.status, 400);
      assert.equal(malformed.body.error.code, "invalid_request");
      const decided = await n2.operator.post(`/v1/approvals/${raised.approval.id}`, {
        decision: "approved",
      });
      assert.equal(decided.status, 200, JSON.stringify(decided.body));
      assert.equal(decided.body.status, "approved");
      const ran = await asked;
      assert.equal(ran.status, 200, JSON.stringify(ran.body));
      assert.match(ran.body.output, /ran-after-approval/);
      await Deno.stat(`${n1.workspace}/decided-elsewhere`);
      // Decided: no longer pending anywhere, and a second decision is refused.
      assert.deepEqual((await n3.operator.get("/v1/approvals")).body.approvals, []);
      const twice = await n3.operator.post(`/v1/approvals/${raised.approval.id}`, {
        decision: "denied",
      });
      assert.equal(twice.status, 409, JSON.stringify(twice.body));
    } finally {
      await fleet.stop();
    }
  },
});

Deno.test({
  name: "fleet: a node killed with SIGKILL is lost; its sessions answer 410 node_lost elsewhere",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const fleet = await startFleet(3, { UEXEC_APPROVAL_POLICY: "untrusted" });
    try {
      const [n1, n2, n3] = fleet.nodes;
      const id = await catSession(n3, fleet.agentToken);
      const events = await connectSse(`${n1.url}/v1/events`, n1.operator.auth);
      // An approval pending on node 3 when it dies.
      const n3events = await connectSse(`${n3.url}/v1/events`, n3.operator.auth);
      const asking = n3.post("/v1/exec_command", { cmd: "touch never", yield_time_ms: 10000 });
      asking.catch(() => {}); // Its connection dies with the node.
      await n3events.until((all) => all.some((e) => e.event === "approval_requested"));
      await n3events.close().catch(() => {});
      assert.equal((await n1.operator.get("/v1/approvals")).body.approvals.length, 1);
      Deno.kill(n3.pid, "SIGKILL");
      // Woken by node 1's lease timer for node 3 (no polling here).
      await events.until((all) => all.some((e) => e.event === "node_lost" && e.data.node === "n3"));
      await events.close();
      for (const node of [n1, n2]) {
        const res = await node.del(`/v1/sessions/${id}`);
        assert.equal(res.status, 410, JSON.stringify(res.body));
        assert.equal(res.body.error.code, "node_lost");
        assert.match(res.body.error.message, /\bn3\b/);
      }
      // Its running command is marked killed in the history, by the node that found it lost.
      const history = await n2.operator.get("/v1/history?q=cat");
      const row = history.body.items.find((i: { session_id: number }) => i.session_id === id);
      assert.equal(row.node, "n3");
      assert.equal(row.status, "killed");
      assert.equal(row.end_reason, "node_lost");
      // Its pending approval ended with it.
      assert.deepEqual((await n2.operator.get("/v1/approvals")).body.approvals, []);
      assert.equal(
        (await fleet.pg.sql("SELECT status FROM uexec_approvals WHERE node = 'n3'")).trim(),
        "node_lost",
      );
      // Nothing else is disturbed: the other nodes run commands as before.
      const ok = await n2.post("/v1/exec_command", { cmd: "echo still-here", yield_time_ms: 5000 });
      assert.match(ok.body.output, /still-here/);
    } finally {
      await fleet.stop();
    }
  },
});

Deno.test({
  name: "fleet: the store restarted under load: nodes reconnect and nothing recorded is lost",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    // History writes give up 8 s into the outage (the recorder keeps them); no node's lease runs
    // out meanwhile.
    const fleet = await startFleet(3, {
      UEXEC_STORE_RETRY_MS: "8000",
      UEXEC_NODE_LEASE_MS: "60000",
    });
    try {
      const [n1, n2, n3] = fleet.nodes;
      const before = (await n1.operator.post("/v1/agents", { name: "before" })).body.token;
      const streams = await Promise.all(
        [n1, n2, n3].map((node) => connectSse(`${node.url}/v1/events`, node.operator.auth)),
      );
      // Load: commands on every node while the store goes away and comes back.
      const load = Promise.all(
        [n1, n2, n3].flatMap((node) =>
          Array.from(
            { length: 3 },
            () => node.post("/v1/exec_command", { cmd: "echo under-load", yield_time_ms: 5000 }),
          )
        ),
      );
      await fleet.pg.stop();
      for (const res of await load) assert.match(res.body.output, /under-load/);
      // Every node's history write has given up (/healthz waits for the writes to settle).
      for (const node of [n1, n2, n3]) {
        const health = await node.operator.get("/healthz");
        assert.equal(health.body.history.ok, false, JSON.stringify(health.body.history));
      }
      // Minted while the store is away: the call waits (retried within the bound) and lands.
      const during = n2.operator.post("/v1/agents", { name: "during" });
      await fleet.pg.start();
      // Each node tells of its reconnect once what it kept is written: no other write comes
      // first, and every command that finished during the outage shows its exit.
      await bounded(
        Promise.all(
          streams.map((stream, i) =>
            stream.until((all) =>
              all.some((e) => e.event === "store_reconnected" && e.data.node === `n${i + 1}`)
            )
          ),
        ),
        "store_reconnected on every node",
      );
      await Promise.all(streams.map((stream) => stream.close()));
      const exits = await fleet.pg.sql(
        "SELECT node || ' ' || status || ' ' || coalesce(row->>'exit_code', '-') " +
          "FROM uexec_history WHERE command = 'echo under-load' ORDER BY node",
      );
      assert.deepEqual(
        exits.trim().split("\n").map((line) => line.trim()),
        ["n1", "n1", "n1", "n2", "n2", "n2", "n3", "n3", "n3"].map((n) => `${n} exited 0`),
      );
      const minted = await during;
      assert.equal(minted.status, 201, JSON.stringify(minted.body));
      for (const node of [n1, n2, n3]) {
        for (const token of [before, minted.body.token]) {
          const res = await node.as(token).post("/v1/exec_command", {
            cmd: "echo after",
            yield_time_ms: 5000,
          });
          assert.equal(res.status, 200, JSON.stringify(res.body));
        }
      }
      const names = (await fleet.pg.sql("SELECT name FROM uexec_agents ORDER BY name")).trim();
      assert.deepEqual(names.split("\n"), ["before", "default", "during"]);
      // The nodes listen again: a revocation on node 1 reaches node 3 through the store.
      await revokeHeard(n1, n3, "n3", "before");
      assert.equal((await n3.as(before).post("/v1/exec_command", { cmd: "true" })).status, 401);
      // The history written under load is all there, from every node.
      const loaded = await n2.operator.get("/v1/history?q=under-load&limit=100");
      assert.equal(loaded.body.items.length, 9);
      assert.deepEqual(
        new Set(loaded.body.items.map((i: { node: string }) => i.node)),
        new Set(["n1", "n2", "n3"]),
      );
      const lost =
        (await fleet.pg.sql("SELECT count(*) FROM uexec_nodes WHERE lost_at IS NOT NULL"))
          .trim();
      assert.equal(lost, "0");
    } finally {
      await fleet.stop();
    }
  },
});

Deno.test({
  name: "fleet: a write the store cannot take within UEXEC_STORE_RETRY_MS is 503 store_unavailable",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const fleet = await startFleet(1, { UEXEC_STORE_RETRY_MS: "2000" });
    try {
      const [n1] = fleet.nodes;
      // Migrated once, though the nodes of the other tests start at once (advisory lock).
      assert.equal(
        (await fleet.pg.sql("SELECT string_agg(version::text, ',') FROM uexec_schema"))
          .trim(),
        "1,2,3",
      );
      await fleet.pg.stop();
      const refused = await n1.operator.post("/v1/agents", { name: "late" });
      assert.equal(refused.status, 503, JSON.stringify(refused.body));
      assert.equal(refused.body.error.code, "store_unavailable");
      assert.ok(!JSON.stringify(refused.body).includes(fleet.pg.url));
      // Commands still run on the node meanwhile (they need no store to start).
      const ran = await n1.post("/v1/exec_command", { cmd: "echo alone", yield_time_ms: 5000 });
      assert.match(ran.body.output, /alone/);
      await fleet.pg.start();
      assert.equal((await n1.operator.post("/v1/agents", { name: "late" })).status, 201);
      // The history the node wrote while the store was away got there once it came back.
      const page = await n1.operator.get("/v1/history?q=alone");
      assert.equal(page.body.items.length, 1, JSON.stringify(page.body));
    } finally {
      await fleet.stop();
    }
  },
});

Deno.test({
  name: "fleet: a node with another operator token than the fleet's does not start",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const fleet = await startFleet(1);
    try {
      await assert.rejects(
        startServer({ UEXEC_STORE: fleet.pg.url, UEXEC_NODE_ID: "stranger" }),
        /operator token is not the fleet's/,
      );
    } finally {
      await fleet.stop();
    }
  },
});

Deno.test("fleet settings: a bad store URL (never echoed), node id or unix socket stops the server", async () => {
  const secret = "hunter2-not-to-be-echoed";
  await assert.rejects(
    startServer({ UEXEC_STORE: `mysql://u:${secret}@127.0.0.1/x` }),
    (err: Error) => {
      assert.match(err.message, /UEXEC_STORE must be a postgres:\/\/ or postgresql:\/\/ URL/);
      assert.ok(!err.message.includes(secret), err.message);
      return true;
    },
  );
  await assert.rejects(startServer({ UEXEC_NODE_ID: "../n1" }), /UEXEC_NODE_ID must match/);
  await assert.rejects(
    startServer({ UEXEC_NODE_URL: "http://127.0.0.1:1/path" }),
    /UEXEC_NODE_URL must be http\(s\):\/\/host:port/,
  );
  const dir = await Deno.makeTempDir();
  try {
    await assert.rejects(
      startServer({
        UEXEC_STORE: "postgres://postgres@127.0.0.1:1/postgres",
        UEXEC_LISTEN: `unix:${dir}/sock`,
      }),
      /UEXEC_NODE_URL: a fleet node on a unix socket/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

async function sha256(text: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

Deno.test({
  name: "fleet: a sign-out whose notice a node missed ends its copy of the browser session once " +
    "that node reconnects to the store",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const fleet = await startFleet(2);
    try {
      const [n1, n2] = fleet.nodes;
      const link = await n1.operator.post("/v1/dashboard/sign-in-links", {});
      assert.equal(link.status, 201, JSON.stringify(link.body));
      const res = await fetch(`${n1.url}/dashboard/sign-in`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ code: link.body.code }),
      });
      const session = (await res.json()).session as string;
      assert.equal(res.status, 200);
      // Node 2 takes its copy on first sight.
      assert.equal((await n2.as(session).get("/v1/sessions")).status, 200);
      // Signed out with no notice (as if sent while node 2 was not listening), then every node's
      // listening connection is cut: the driver reconnects and node 2 checks its copies.
      const events = await connectSse(`${n2.url}/v1/events`, n2.operator.auth);
      await fleet.pg.sql("DELETE FROM uexec_web_sessions");
      await fleet.pg.sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity " +
          "WHERE application_name = 'uexec' AND query ILIKE 'listen%'",
      );
      await bounded(
        events.until((all) =>
          all.some((e) => e.event === "store_reconnected" && e.data.node === "n2")
        ),
        "store_reconnected on node 2",
      );
      await events.close();
      assert.equal((await n2.as(session).get("/v1/sessions")).status, 401);
    } finally {
      await fleet.stop();
    }
  },
});
