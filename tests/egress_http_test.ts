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
import { startServer, type TestServer } from "./helpers/server.ts";

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
