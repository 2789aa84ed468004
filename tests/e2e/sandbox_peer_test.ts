/**
 * The sandboxed-peer check on the HTTP listener looks a connection's peer up once, at accept:
 * a sandboxed peer is answered 403 and closed before any handler runs; any other keeps its
 * answer for every request on that connection; each new connection is looked up again.
 *
 * @module
 */

import assert from "node:assert/strict";
import { serveLimited } from "../../src/http/listener.ts";
import { peerClassifier } from "../../src/http/sandbox_peer.ts";
import { startServer } from "../helpers/server.ts";

const limits = {
  headerTimeoutMs: 60_000,
  idleTimeoutMs: 60_000,
  maxConnections: 16,
  maxPerPeer: 16,
};
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** A keep-alive connection that sends GET / and reads each answer's body (content-length). */
async function connection(port: number) {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  let buffered = "";
  const buf = new Uint8Array(4096);
  return {
    async get(): Promise<string> {
      await conn.write(encoder.encode("GET / HTTP/1.1\r\nhost: x\r\n\r\n"));
      for (;;) {
        const end = buffered.indexOf("\r\n\r\n");
        const length = /content-length: (\d+)/i.exec(buffered.slice(0, end))?.[1];
        if (end >= 0 && length !== undefined && buffered.length >= end + 4 + Number(length)) {
          const body = buffered.slice(end + 4, end + 4 + Number(length));
          buffered = buffered.slice(end + 4 + Number(length));
          return body;
        }
        const n = await conn.read(buf);
        if (n === null) throw new Error("connection closed");
        buffered += decoder.decode(buf.subarray(0, n));
      }
    },
    close: () => conn.close(),
  };
}

for (const sandboxed of [false, true]) {
  Deno.test(`sandbox peer: one lookup per connection, at accept (peer sandboxed: ${sandboxed})`, async () => {
    const asked: number[] = [];
    let served = 0;
    const http = serveLimited(
      { hostname: "127.0.0.1", port: 0 },
      limits,
      () => new Response(String(++served)),
      {
        peers: (addr) =>
          peerClassifier(addr, (uid) => {
            asked.push(uid);
            return sandboxed;
          }),
      },
    );
    try {
      const addr = http.addr as Deno.NetAddr;
      const first = await connection(addr.port);
      if (sandboxed) {
        // Refused before the handler: the answer is the 403, then the connection closes.
        assert.equal(
          await first.get(),
          '{"error":{"code":"forbidden_peer","message":"requests from sandboxed commands are refused"}}',
        );
        await assert.rejects(first.get(), /connection closed/);
        assert.equal(served, 0);
        assert.deepEqual(asked, [0]);
        return;
      }
      for (let i = 1; i <= 3; i++) assert.equal(await first.get(), String(i));
      assert.deepEqual(asked, [0]);
      const second = await connection(addr.port);
      for (let i = 4; i <= 5; i++) assert.equal(await second.get(), String(i));
      assert.equal(await first.get(), "6");
      assert.deepEqual(asked, [0, 0]);
      first.close();
      second.close();
    } finally {
      await http.shutdown();
    }
  });
}

Deno.test("a sandboxed command holding 700 half-sent connections leaves the API to everyone else", async () => {
  const server = await startServer();
  const { hostname, port } = new URL(server.url);
  try {
    // Opens 700 connections, each with part of a request head, and holds them (SIGPIPE is
    // ignored: the server may close a refused one before the write).
    const flood = await server.post("/v1/exec_command", {
      cmd: `trap '' PIPE; for i in $(seq 700); do ` +
        `exec {fd}<>/dev/tcp/${hostname}/${port} || exit 9; ` +
        `printf 'GET /healthz HTTP/1.1\\r\\nho' >&$fd 2>/dev/null; done; echo held; exec sleep 600`,
      shell: "/bin/bash",
      login: false,
      tty: false,
      profile: "workspace-write-net",
      until: "held",
      yield_time_ms: 60_000,
    });
    assert.equal(flood.status, 200);
    assert.equal(flood.body.output, "held\n", JSON.stringify(flood.body));
    assert.equal(flood.body.exit_code, undefined, "the flood is still running");
    const other = await server.operator.post("/v1/agents", { name: "other" });
    // The test's own bound: each answer within a few seconds (2 shared cores), never a 503.
    const bounded = { signal: AbortSignal.timeout(5_000) };
    const health = await fetch(`${server.url}/healthz`, bounded);
    assert.equal(health.status, 200);
    await health.body?.cancel();
    const exec = await fetch(`${server.url}/v1/exec_command`, {
      ...bounded,
      method: "POST",
      headers: { authorization: `Bearer ${other.body.token}`, "content-type": "application/json" },
      body: JSON.stringify({ cmd: "echo served", login: false, tty: false }),
    });
    assert.equal(exec.status, 200);
    assert.equal((await exec.json()).output, "served\n");
    await server.del(`/v1/sessions/${flood.body.session_id}`);
  } finally {
    await server.stop();
  }
});

Deno.test("sandbox peer: a local address added after start is still looked up (not taken for a remote peer)", async () => {
  // In a network namespace of the test's own: lo up, a wildcard listener, then a new address.
  const dir = await Deno.makeTempDir();
  try {
    const script = `${dir}/probe.ts`;
    await Deno.writeTextFile(
      script,
      `import { peerClassifier } from ${
        JSON.stringify(new URL("../../src/http/sandbox_peer.ts", import.meta.url).href)
      };
const ip = (...args: string[]) => new Deno.Command("ip", { args }).output();
await ip("link", "set", "lo", "up");
const listener = Deno.listen({ hostname: "0.0.0.0", port: 0 });
const classify = peerClassifier(listener.addr, (uid) => uid === Deno.uid());
await ip("addr", "add", "10.99.0.1/32", "dev", "lo");
const client = await Deno.connect({ hostname: "10.99.0.1", port: listener.addr.port });
const conn = await listener.accept();
console.log(JSON.stringify({ from: conn.remoteAddr.hostname, ...classify(conn.remoteAddr) }));
`,
    );
    const out = await new Deno.Command("unshare", {
      args: ["--net", Deno.execPath(), "run", "-A", "--no-lock", script],
      stderr: "inherit",
    }).output();
    assert.ok(out.success);
    assert.deepEqual(JSON.parse(new TextDecoder().decode(out.stdout)), {
      from: "10.99.0.1",
      sandboxed: true,
      key: `uid ${Deno.uid()}`,
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
