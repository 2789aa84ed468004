// The local fleet through its launcher (`deno task fleet`, issue 33): a real PostgreSQL, nginx
// with the shipped deploy/nginx/uexec.conf and 3 nodes on loopback. Agents are spread by the
// router's consistent hash and every front door (HTTP, SSE, WebSocket) of an agent reaches its
// own sessions through the router; a node killed with SIGKILL moves only its agents; SIGTERM
// stops everything and removes the fleet's files.

import assert from "node:assert/strict";
import { TextLineStream } from "../helpers/lines.ts";
import { connectSse } from "../helpers/sse.ts";
import { RpcSocket } from "../helpers/ws.ts";
import { routerConf, TEMPLATE } from "../../src/fleet/launch/router.ts";
import { alive } from "../helpers/procs.ts";

const ROOT = new URL("../..", import.meta.url).pathname;

interface Launched {
  router: string;
  operator: string;
  nodes: Map<string, string>;
  dir: string;
  pid: number;
  /** Signal the launcher (SIGTERM unless told) and wait; its exit code. */
  stop(signal?: Deno.Signal): Promise<number>;
}

/** Start `deno task fleet`'s entry with UEXEC_FLEET_PORT=0 and read its lines. */
async function launch(env: Record<string, string> = {}): Promise<Launched> {
  const parent = await Deno.makeTempDir({ prefix: "uexec-fleet-test-" });
  // PostgreSQL (user postgres) and the sandbox uids must traverse to their directories in it.
  await Deno.chmod(parent, 0o711);
  const dir = `${parent}/fleet`;
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", `${ROOT}src/fleet/launch/main.ts`, "--nodes", "3"],
    cwd: ROOT,
    env: { UEXEC_FLEET_PORT: "0", UEXEC_FLEET_DIR: dir, NO_COLOR: "1", ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const stderr = new Response(child.stderr).text();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).pipeThrough(
    new TextLineStream(),
  ).getReader();
  const lines: string[] = [];
  for (let i = 0; i < 5; i++) {
    const { value, done } = await reader.read();
    if (done) {
      await child.status;
      await Deno.remove(parent, { recursive: true });
      throw new Error(`the launcher ended: ${lines.join("\n")}\n${await stderr}`);
    }
    lines.push(value);
  }
  const drained = (async () => {
    for (let line = await reader.read(); !line.done; line = await reader.read()) {
      lines.push(line.value);
    }
  })();
  const router = /^uexec fleet: router (http:\/\/127\.0\.0\.1:\d+)$/.exec(lines[0])?.[1];
  const tokenFile = /^uexec fleet: operator token: (\S+)$/.exec(lines[1])?.[1];
  assert.ok(router && tokenFile, lines.join("\n"));
  const nodes = new Map<string, string>();
  for (const line of lines.slice(2)) {
    const m = /^uexec fleet: node (\S+) at (http:\/\/127\.0\.0\.1:\d+)$/.exec(line);
    assert.ok(m, line);
    nodes.set(m[1], m[2]);
  }
  assert.deepEqual([...nodes.keys()], ["n1", "n2", "n3"]);
  let status: Promise<Deno.CommandStatus> | undefined;
  return {
    router,
    operator: (await Deno.readTextFile(tokenFile)).trim(),
    nodes,
    dir,
    pid: child.pid,
    async stop(signal: Deno.Signal = "SIGTERM") {
      if (!status) {
        child.kill(signal);
        status = child.status;
      }
      const { code } = await status;
      await drained;
      await stderr;
      await Deno.remove(parent, { recursive: true });
      return code;
    },
  };
}

async function call(
  base: string,
  token: string,
  method: string,
  path: string,
  body?: unknown,
  // deno-lint-ignore no-explicit-any
): Promise<{ status: number; body: any }> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  // nginx's own answers (a 502, say) are HTML: kept as text for the assertion's message.
  const json = res.headers.get("content-type")?.startsWith("application/json");
  return { status: res.status, body: json ? JSON.parse(text) : text };
}

/** A live `cat` of `token` through `base` (in a PTY unless `tty` is false); its id and node. */
async function cat(base: string, token: string, tty = true): Promise<{ id: number; node: string }> {
  const res = await call(base, token, "POST", "/v1/exec_command", {
    cmd: "cat",
    tty,
    yield_time_ms: 250,
  });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  const id = res.body.session_id;
  const got = await call(base, token, "GET", `/v1/sessions/${id}`);
  assert.equal(got.status, 200, JSON.stringify(got.body));
  return { id, node: got.body.node };
}

/** Whether something accepts TCP connections at `url`. */
async function listening(url: string): Promise<boolean> {
  const { hostname, port } = new URL(url);
  try {
    (await Deno.connect({ hostname, port: Number(port) })).close();
    return true;
  } catch {
    return false;
  }
}

Deno.test("fleet launcher: bad arguments and settings exit 2 with a message, making nothing", async () => {
  const parent = await Deno.makeTempDir({ prefix: "uexec-fleet-test-" });
  try {
    const cases: [string[], Record<string, string>, RegExp][] = [
      [["--nodes", "0"], {}, /--nodes must be 1 to 100, got "0"/],
      [["--nodes", "101"], {}, /--nodes must be 1 to 100/],
      [["--nodes"], {}, /--nodes must be 1 to 100, got ""/],
      [["--keep", "--verbose"], {}, /unknown argument "--verbose"/],
      [[], { UEXEC_FLEET_PORT: "http" }, /UEXEC_FLEET_PORT must be a port/],
      [[], { UEXEC_FLEET_PORT: "65536" }, /UEXEC_FLEET_PORT must be a port/],
    ];
    for (const [args, env, message] of cases) {
      const out = await new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", `${ROOT}src/fleet/launch/main.ts`, ...args],
        env: { UEXEC_FLEET_DIR: `${parent}/fleet`, NO_COLOR: "1", ...env },
        stdout: "piped",
        stderr: "piped",
      }).output();
      const stderr = new TextDecoder().decode(out.stderr);
      assert.equal(out.code, 2, `${args} ${JSON.stringify(env)}: ${stderr}`);
      assert.match(stderr, message);
      assert.equal(new TextDecoder().decode(out.stdout), "");
      await assert.rejects(Deno.stat(`${parent}/fleet`), Deno.errors.NotFound);
    }
  } finally {
    await Deno.remove(parent, { recursive: true });
  }
});

Deno.test("the shipped nginx configuration, filled in, passes nginx -t; placeholders are checked", async () => {
  const dir = await Deno.makeTempDir({ prefix: "uexec-nginx-test-" });
  try {
    const template = await Deno.readTextFile(TEMPLATE);
    const conf = routerConf(template, {
      dir,
      listen: "127.0.0.1:8787",
      nodes: ["127.0.0.1:9001", "127.0.0.1:9002"],
    });
    assert.doesNotMatch(conf, /\{\{/);
    // Both upstreams (kept-alive HTTP, fresh connections for the WebSocket) list every node.
    assert.equal(conf.match(/server 127\.0\.0\.1:9001 max_fails=1 fail_timeout=10s;/g)?.length, 2);
    await Deno.writeTextFile(`${dir}/nginx.conf`, conf);
    const out = await new Deno.Command("nginx", {
      args: ["-t", "-p", dir, "-e", `${dir}/error.log`, "-c", `${dir}/nginx.conf`],
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.ok(out.success, new TextDecoder().decode(out.stderr));
    assert.throws(
      () => routerConf(`${template}\n# {{upstream}}`, { dir, listen: "x", nodes: [] }),
      /unknown placeholder \{\{upstream\}\}/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test({
  name: "fleet launcher: 8 agents spread over the nodes reach their own sessions through nginx",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const fleet = await launch();
    let stopped = false;
    try {
      const { router } = fleet;
      const agents: { name: string; token: string; node: string; id: number }[] = [];
      for (let i = 0; i < 8; i++) {
        const minted = await call(router, fleet.operator, "POST", "/v1/agents", {
          name: `agent${i}`,
        });
        assert.equal(minted.status, 201, JSON.stringify(minted.body));
        const token = minted.body.token;
        // Two sessions of one agent land on one node: the router keeps the agent there.
        const first = await cat(router, token);
        const second = await cat(router, token);
        assert.equal(second.node, first.node);
        agents.push({ name: `agent${i}`, token, node: first.node, id: first.id });
        assert.equal(
          (await call(router, token, "DELETE", `/v1/sessions/${second.id}`)).status,
          200,
        );
      }
      const used = new Set(agents.map((a) => a.node));
      assert.ok(used.size >= 2, `all 8 agents on ${[...used]}`);

      for (const agent of agents) {
        // The stream through the router.
        const stream = await connectSse(`${router}/v1/sessions/${agent.id}/stream`, {
          authorization: `Bearer ${agent.token}`,
        });
        const marker = `through-router-${agent.name}`;
        const wrote = await call(router, agent.token, "POST", "/v1/write_stdin", {
          session_id: agent.id,
          chars: `${marker}\n`,
          yield_time_ms: 2000,
          until: `${marker}\\r?\\n.*${marker}`,
        });
        assert.equal(wrote.status, 200, JSON.stringify(wrote.body));
        assert.match(wrote.body.output, new RegExp(marker));
        await stream.until((events) => events.some((e) => JSON.stringify(e.data).includes(marker)));
        await stream.close();
        // The WebSocket upgrade through the router.
        const auth = { authorization: `Bearer ${agent.token}` };
        const ws = await RpcSocket.open(`${router.replace("http:", "ws:")}/v1/ws`, auth);
        const subscribed = await ws.call("subscribe", { session_id: agent.id });
        assert.equal(subscribed.result.session_id, agent.id, JSON.stringify(subscribed));
        const over = await ws.call("write_stdin", {
          session_id: agent.id,
          chars: `ws-${marker}\n`,
          yield_time_ms: 1000,
        });
        assert.equal(over.error, undefined, JSON.stringify(over));
        await ws.wait((f) =>
          f.method === "output" && String(f.params.text).includes(`ws-${marker}`)
        );
        await ws.close();
      }
      // Another agent's session is unknown through the router too.
      const [a, b] = agents;
      // A sandboxed command (the default profile, no network) cannot reach the router, behind
      // which the node could not tell it from its agent (docs/fleet.md).
      const port = new URL(router).port;
      const probe = await call(router, a.token, "POST", "/v1/exec_command", {
        cmd: `exec 3<>/dev/tcp/127.0.0.1/${port} && echo reached-router || echo no-router`,
        shell: "/bin/bash",
        login: false,
        tty: false,
        yield_time_ms: 5000,
      });
      assert.equal(probe.status, 200, JSON.stringify(probe.body));
      assert.match(probe.body.output, /no-router/);
      assert.doesNotMatch(probe.body.output, /reached-router/);
      const theirs = await call(router, b.token, "POST", "/v1/write_stdin", {
        session_id: a.id,
        chars: "x",
      });
      assert.equal(theirs.status, 404, JSON.stringify(theirs.body));

      // An agent minted through the router works on every node directly, and the history on
      // any node lists the commands of all.
      for (const [, url] of fleet.nodes) {
        const res = await call(url, a.token, "POST", "/v1/exec_command", {
          cmd: `echo direct-${a.name}`,
          yield_time_ms: 5000,
        });
        assert.equal(res.status, 200, JSON.stringify(res.body));
        assert.match(res.body.output, new RegExp(`direct-${a.name}`));
      }
      for (const [, url] of fleet.nodes) {
        const history = await call(url, fleet.operator, "GET", "/v1/history?q=cat&limit=100");
        assert.equal(history.status, 200, JSON.stringify(history.body));
        const nodes = new Set(history.body.items.map((i: { node: string }) => i.node));
        assert.deepEqual(nodes, used);
      }

      // SIGTERM: the launcher stops nginx, the nodes and PostgreSQL and removes its files.
      const pids = await Promise.all(
        [...fleet.nodes.keys()].map(async (id) =>
          Number(await Deno.readTextFile(`${fleet.dir}/nodes/${id}/pid`))
        ),
      );
      const pgPid = Number(
        (await Deno.readTextFile(`${fleet.dir}/postgres/data/postmaster.pid`)).split("\n")[0],
      );
      const routerPid = Number(await Deno.readTextFile(`${fleet.dir}/router/nginx.pid`));
      const dir = fleet.dir;
      stopped = true;
      assert.equal(await fleet.stop(), 0);
      for (const pid of [...pids, pgPid, routerPid]) assert.ok(!alive(pid), `pid ${pid} runs`);
      assert.equal(await listening(router), false);
      for (const [, url] of fleet.nodes) assert.equal(await listening(url), false);
      await assert.rejects(Deno.stat(dir), Deno.errors.NotFound);
    } finally {
      if (!stopped) await fleet.stop();
    }
  },
});

Deno.test({
  name: "fleet launcher: a node killed with SIGKILL: its agents go on elsewhere, its sessions 410",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const fleet = await launch({ UEXEC_NODE_LEASE_MS: "1500" });
    try {
      const { router } = fleet;
      const agents: { token: string; id: number; node: string }[] = [];
      for (let i = 0; i < 8; i++) {
        const token = (await call(router, fleet.operator, "POST", "/v1/agents", { name: `a${i}` }))
          .body.token;
        agents.push({ token, ...await cat(router, token) });
      }
      const victim = agents[0].node;
      const survivors = [...fleet.nodes.keys()].filter((id) => id !== victim);
      const watcher = await connectSse(`${fleet.nodes.get(survivors[0])}/v1/events`, {
        authorization: `Bearer ${fleet.operator}`,
      });
      const pid = Number(await Deno.readTextFile(`${fleet.dir}/nodes/${victim}/pid`));
      Deno.kill(pid, "SIGKILL");
      // Found lost by a survivor once its lease ran out (by then its sockets are closed, and
      // nginx has dropped its kept-alive connections to it).
      await watcher.until((all) =>
        all.some((e) => e.event === "node_lost" && e.data.node === victim)
      );
      await watcher.close();
      // The victim's agents' next calls succeed: nginx cannot connect to it, tries the next
      // node on the ring, and marks the victim down.
      for (const agent of agents.filter((a) => a.node === victim)) {
        const moved = await cat(router, agent.token);
        assert.ok(survivors.includes(moved.node), `${moved.node} after ${victim} was killed`);
      }
      for (const agent of agents) {
        const res = await call(router, agent.token, "POST", "/v1/write_stdin", {
          session_id: agent.id,
          chars: "still\n",
          yield_time_ms: 1000,
          until: "still\\r?\\n.*still",
        });
        if (agent.node === victim) {
          assert.equal(res.status, 410, JSON.stringify(res.body));
          assert.equal(res.body.error.code, "node_lost");
          assert.match(res.body.error.message, new RegExp(`\\b${victim}\\b`));
        } else {
          // Nothing else is disturbed: the others' sessions answer on their own node.
          assert.equal(res.status, 200, JSON.stringify(res.body));
          assert.match(res.body.output, /still/);
          const got = await call(router, agent.token, "GET", `/v1/sessions/${agent.id}`);
          assert.equal(got.body.node, agent.node);
        }
      }
    } finally {
      await fleet.stop();
    }
  },
});

/** Every row of the launcher's store's dashboard tables, as text. */
async function storeDump(dir: string): Promise<string> {
  const [, , , port] = (await Deno.readTextFile(`${dir}/postgres/data/postmaster.pid`)).split("\n");
  const out = await new Deno.Command("runuser", {
    args: [
      "-u",
      "postgres",
      "--",
      "psql",
      "-X",
      "-A",
      "-t",
      "-h",
      "127.0.0.1",
      "-p",
      port,
      "-c",
      "SELECT * FROM uexec_sign_in_codes; SELECT * FROM uexec_web_sessions;",
      "postgres",
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  return new TextDecoder().decode(out.stdout);
}

/** Stop the launcher's PostgreSQL (fast shutdown) and a function that starts it again. */
async function stopStore(dir: string): Promise<() => Promise<void>> {
  const data = `${dir}/postgres/data`;
  const [, , , port, socketDir] = (await Deno.readTextFile(`${data}/postmaster.pid`)).split("\n");
  const bin = new TextDecoder().decode(
    (await new Deno.Command("pg_config", { args: ["--bindir"], stdout: "piped" }).output()).stdout,
  ).trim();
  const pgCtl = async (args: string[]) => {
    const out = await new Deno.Command("runuser", {
      args: ["-u", "postgres", "--", `${bin}/pg_ctl`, "-D", data, "-w", ...args],
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.ok(out.success, new TextDecoder().decode(out.stderr));
  };
  await pgCtl(["-m", "fast", "stop"]);
  const options = `-c listen_addresses=127.0.0.1 -p ${port} -k ${socketDir}`;
  return () => pgCtl(["-l", `${dir}/postgres/log`, "-o", options, "start"]);
}

Deno.test({
  name: "fleet launcher: an approval raised through the router is decided on another node; " +
    "the store restarted under load loses nothing recorded",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const fleet = await launch({ UEXEC_APPROVAL_POLICY: "untrusted" });
    let stopped = false;
    try {
      const { router } = fleet;
      const agents: { token: string; node: string }[] = [];
      for (let i = 0; i < 6; i++) {
        const token = (await call(router, fleet.operator, "POST", "/v1/agents", { name: `p${i}` }))
          .body.token;
        const { id, node } = await cat(router, token, false);
        assert.equal((await call(router, token, "DELETE", `/v1/sessions/${id}`)).status, 200);
        agents.push({ token, node });
      }
      // An approval raised on the agent's node (through the router), decided on another node
      // directly, runs the command on its own node.
      const [asker] = agents;
      const events = await connectSse(`${fleet.nodes.get(asker.node)}/v1/events`, {
        authorization: `Bearer ${fleet.operator}`,
      });
      const asked = call(router, asker.token, "POST", "/v1/exec_command", {
        cmd: "touch decided-elsewhere && echo ran-after-approval",
        login: false,
        tty: false,
        yield_time_ms: 10000,
      });
      const all = await events.until((all) => all.some((e) => e.event === "approval_requested"));
      await events.close();
      const raised = all.find((e) => e.event === "approval_requested")!.data;
      assert.equal(raised.node, asker.node);
      const elsewhere = [...fleet.nodes].find(([id]) => id !== asker.node)![1];
      const decided = await call(
        elsewhere,
        fleet.operator,
        "POST",
        `/v1/approvals/${raised.approval.id}`,
        { decision: "approved" },
      );
      assert.equal(decided.status, 200, JSON.stringify(decided.body));
      const ran = await asked;
      assert.equal(ran.status, 200, JSON.stringify(ran.body));
      assert.match(ran.body.output, /ran-after-approval/);
      await Deno.stat(`${fleet.dir}/nodes/${asker.node}/workspace/decided-elsewhere`);

      // What the store holds now (read through another node than the one that recorded it):
      // nothing of it may be lost when the store restarts.
      const recorded = await call(elsewhere, fleet.operator, "GET", "/v1/history?limit=100");
      assert.equal(recorded.status, 200, JSON.stringify(recorded.body));
      const before = recorded.body.items as { id: string; node: string; command: string }[];
      assert.ok(before.some((i) => i.command === "cat"), JSON.stringify(before));

      // The store restarted under load: commands through the router on every agent's node while
      // PostgreSQL goes away and comes back, and an agent minted meanwhile.
      const load = Promise.all(
        agents.map((a) =>
          call(router, a.token, "POST", "/v1/exec_command", {
            cmd: "echo under-load",
            tty: false,
            yield_time_ms: 5000,
          })
        ),
      );
      const start = await stopStore(fleet.dir);
      const during = call(router, fleet.operator, "POST", "/v1/agents", { name: "during" });
      await start();
      for (const res of await load) {
        assert.equal(res.status, 200, JSON.stringify(res.body));
        assert.match(res.body.output, /under-load/);
      }
      const minted = await during;
      assert.equal(minted.status, 201, JSON.stringify(minted.body));
      // Nodes reconnected: the agent minted while the store was away works on every node, and
      // every node's history still holds everything recorded before.
      for (const [, url] of fleet.nodes) {
        const res = await call(url, minted.body.token, "POST", "/v1/exec_command", {
          cmd: "echo after",
          tty: false,
          yield_time_ms: 5000,
        });
        assert.equal(res.status, 200, JSON.stringify(res.body));
        const history = await call(url, fleet.operator, "GET", "/v1/history?limit=100");
        const ids = new Set(history.body.items.map((i: { id: string }) => i.id));
        for (const item of before) assert.ok(ids.has(item.id), `${item.command} lost on ${url}`);
      }
      // SIGINT stops it as SIGTERM does: everything gone, its files removed.
      const dir = fleet.dir;
      stopped = true;
      assert.equal(await fleet.stop("SIGINT"), 0);
      assert.equal(await listening(router), false);
      await assert.rejects(Deno.stat(dir), Deno.errors.NotFound);
    } finally {
      if (!stopped) await fleet.stop();
    }
  },
});

/** The hex SHA-256 digest of `text`. */
async function sha256(text: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** `POST /dashboard/sign-in` at `base` with `code` (no credential): status and JSON. */
// deno-lint-ignore no-explicit-any
async function redeem(base: string, code: string): Promise<{ status: number; body: any }> {
  const res = await fetch(`${base}/dashboard/sign-in`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ code }),
  });
  return { status: res.status, body: await res.json() };
}

Deno.test({
  name: "fleet launcher: a dashboard sign-in link minted on one node is redeemed through the " +
    "router once; its browser session works on every node until signed out, then on none",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const fleet = await launch();
    try {
      const { router } = fleet;
      const [[, n1], [, n2], [, n3]] = [...fleet.nodes];
      const mint = async () => {
        const link = await call(n1, fleet.operator, "POST", "/v1/dashboard/sign-in-links", {});
        assert.equal(link.status, 201, JSON.stringify(link.body));
        return link.body.code as string;
      };
      // Redeemed through the router (whichever node it picks), then on no node again.
      const code = await mint();
      const opened = await redeem(router, code);
      assert.equal(opened.status, 200, JSON.stringify(opened.body));
      const session = opened.body.session as string;
      for (const base of [router, n1, n2, n3]) {
        const again = await redeem(base, code);
        assert.equal(again.status, 401, JSON.stringify(again.body));
        assert.equal(again.body.error.code, "invalid_sign_in_code");
      }
      // One code raced on two nodes at once: exactly one of them opens a session.
      const raced = await mint();
      const both = await Promise.all([redeem(n2, raced), redeem(n3, raced)]);
      assert.deepEqual(both.map((r) => r.status).sort(), [200, 401], JSON.stringify(both));
      // A code minted on node 1 redeemed directly on node 3, which did not make it.
      const other = await redeem(n3, await mint());
      assert.equal(other.status, 200, JSON.stringify(other.body));
      assert.notEqual(other.body.session, session);

      // The browser session on every node: the session list and the events stream.
      const streams = [];
      for (const base of [n1, n2, n3, router]) {
        const listed = await call(base, session, "GET", "/v1/sessions");
        assert.equal(listed.status, 200, `${base}: ${JSON.stringify(listed.body)}`);
        streams.push(await connectSse(`${base}/v1/events`, { authorization: `Bearer ${session}` }));
      }
      // Only digests are stored: no code or session id in clear, their SHA-256 digests instead.
      const outstanding = await mint();
      const dump = await storeDump(fleet.dir);
      for (const secret of [outstanding, session, other.body.session]) {
        assert.ok(!dump.includes(secret), "a secret is stored in clear");
        assert.ok(dump.includes(await sha256(secret)), dump);
      }
      // A browser session mints no sign-in links, on any node.
      const renewed = await call(n2, session, "POST", "/v1/dashboard/sign-in-links", {});
      assert.equal(renewed.status, 403, JSON.stringify(renewed.body));

      // Signed out through the router: refused on every node, its streams end everywhere.
      const out = await fetch(`${router}/dashboard/sign-out`, {
        method: "POST",
        headers: { authorization: `Bearer ${session}`, "content-type": "application/json" },
        body: "{}",
      });
      await out.body?.cancel();
      assert.equal(out.status, 204);
      for (const stream of streams) {
        await assert.rejects(stream.until(() => false), /stream ended/);
      }
      for (const base of [n1, n2, n3, router]) {
        const refused = await call(base, session, "GET", "/v1/sessions");
        assert.equal(refused.status, 401, `${base}: ${JSON.stringify(refused.body)}`);
      }
      // The other browser session still holds; the operator's "sign out everywhere" ends it on
      // every node too.
      assert.equal((await call(n2, other.body.session, "GET", "/v1/sessions")).status, 200);
      const ended = await call(n3, fleet.operator, "DELETE", "/v1/dashboard/sessions");
      assert.equal(ended.status, 200, JSON.stringify(ended.body));
      // Two were live: that one and the raced code's.
      assert.equal(ended.body.ended, 2);
      for (const base of [n1, n2, n3]) {
        assert.equal((await call(base, other.body.session, "GET", "/v1/sessions")).status, 401);
      }
    } finally {
      await fleet.stop();
    }
  },
});
