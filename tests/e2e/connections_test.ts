/**
 * The HTTP server against slow and many clients, over real sockets to a real server: request
 * heads that never finish and idle keep-alive connections are closed, connections beyond the cap
 * and beyond the descriptor limit are answered 503, and the server keeps answering after all
 * of them. A server that holds a connection forever fails these by their deadlines.
 *
 * @module
 */

import assert from "node:assert/strict";
import { startServer, type TestServer } from "../helpers/server.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();
/** How long a client here waits for the server before the test fails. */
const DEADLINE_MS = 20_000;

function open(server: TestServer): Promise<Deno.TcpConn> {
  const { hostname, port } = new URL(server.url);
  return Deno.connect({ hostname, port: Number(port) });
}

async function send(conn: Deno.Conn, text: string): Promise<void> {
  const bytes = encoder.encode(text);
  for (let off = 0; off < bytes.length;) off += await conn.write(bytes.subarray(off));
}

/** The deadline: closes `conn` (which ends a pending read) and records that it did. */
function deadline(conn: Deno.Conn) {
  const state = { passed: false, clear: () => clearTimeout(timer) };
  const timer = setTimeout(() => {
    state.passed = true;
    conn.close();
  }, DEADLINE_MS);
  return state;
}

/** Everything the server sends until it closes the connection (or resets it). */
async function untilClosed(conn: Deno.Conn): Promise<string> {
  const limit = deadline(conn);
  let text = "";
  const buf = new Uint8Array(4096);
  try {
    for (let n = await conn.read(buf); n !== null; n = await conn.read(buf)) {
      text += decoder.decode(buf.subarray(0, n));
    }
  } catch (err) {
    if (limit.passed) throw new Error(`the server kept the connection open; got ${text}`);
    if (!(err instanceof Deno.errors.ConnectionReset)) throw err;
  } finally {
    limit.clear();
  }
  try {
    conn.close();
  } catch { /* closed by the deadline */ }
  return text;
}

/** One response (head and a content-length body) on a connection that stays open. */
async function response(conn: Deno.Conn): Promise<{ status: number; body: string }> {
  const limit = deadline(conn);
  let text = "";
  const buf = new Uint8Array(4096);
  try {
    for (;;) {
      const end = text.indexOf("\r\n\r\n");
      const length = /\r\ncontent-length: (\d+)/i.exec(text);
      if (end >= 0 && length && text.length >= end + 4 + Number(length[1])) {
        return { status: Number(text.slice(9, 12)), body: text.slice(end + 4) };
      }
      const n = await conn.read(buf);
      if (n === null) throw new Error(`the server closed the connection; got ${text}`);
      text += decoder.decode(buf.subarray(0, n));
    }
  } catch (err) {
    if (limit.passed) throw new Error(`no response before the deadline; got ${text}`);
    throw err;
  } finally {
    limit.clear();
  }
}

const HEALTHZ = "GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n";

function post(path: string, body: unknown, token: string): string {
  const json = JSON.stringify(body);
  return `POST ${path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n` +
    `authorization: Bearer ${token}\r\n` +
    `content-length: ${encoder.encode(json).length}\r\n\r\n${json}`;
}

/** Open `n` connections, `width` at a time. */
async function openMany(server: TestServer, n: number, width = 100): Promise<Deno.TcpConn[]> {
  const conns: Deno.TcpConn[] = [];
  for (let i = 0; i < n; i += width) {
    conns.push(
      ...await Promise.all(
        Array.from({ length: Math.min(width, n - i) }, () => open(server)),
      ),
    );
  }
  return conns;
}

Deno.test("1,000 connections that never finish a request head are closed after the header timeout", async () => {
  const server = await startServer({
    UEXEC_HEADER_TIMEOUT_MS: "300",
    UEXEC_IDLE_TIMEOUT_MS: "600000",
    UEXEC_MAX_CONNECTIONS: "2000",
  });
  try {
    const conns = await openMany(server, 1000);
    // Half send part of a head, half nothing at all.
    await Promise.all(conns.map((c, i) => i % 2 ? send(c, "GET /healthz HTTP/1.1\r\nho") : null));
    const answers = await Promise.all(conns.map(untilClosed));
    assert.deepEqual(new Set(answers), new Set([""]));
    const health = await server.get("/healthz");
    assert.equal(health.status, 200);
  } finally {
    await server.stop();
  }
});

Deno.test("beyond the connection cap a new connection is answered 503 and closed", async () => {
  const server = await startServer({
    UEXEC_MAX_CONNECTIONS: "4",
    UEXEC_MAX_CONNECTIONS_PER_PEER: "4",
    UEXEC_HEADER_TIMEOUT_MS: "600000",
  });
  try {
    const held = await openMany(server, 4);
    await Promise.all(held.map((c) => send(c, "GET /healthz HTTP/1.1\r\nhost: localhost\r\n")));
    const extra = await open(server);
    await send(extra, HEALTHZ);
    const body = '{"error":{"code":"overloaded","message":"too many connections; retry later"}}';
    assert.equal(
      await untilClosed(extra),
      "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n" +
        `content-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`,
    );
    // The connections within the cap are served.
    await send(held[0], "\r\n");
    assert.equal((await response(held[0])).status, 200);
    for (const c of held) c.close();
  } finally {
    await server.stop();
  }
});

Deno.test("an idle keep-alive connection is closed after the idle timeout, a busy one is not", async () => {
  const server = await startServer({
    UEXEC_IDLE_TIMEOUT_MS: "300",
    UEXEC_HEADER_TIMEOUT_MS: "600000",
  });
  try {
    const conn = await open(server);
    // In flight for longer than the idle timeout: not idle.
    await send(
      conn,
      post(
        "/v1/exec_command",
        { cmd: "sleep 1; echo late", login: false, yield_time_ms: 30000 },
        server.agentToken,
      ),
    );
    const slow = await response(conn);
    assert.equal(slow.status, 200);
    assert.equal(JSON.parse(slow.body).output, "late\r\n");
    await send(conn, HEALTHZ);
    assert.equal((await response(conn)).status, 200);
    // Now idle: the server closes it without a word.
    assert.equal(await untilClosed(conn), "");
  } finally {
    await server.stop();
  }
});

Deno.test("out of file descriptors, connections get 503 or are refused, and the server recovers", async () => {
  const server = await startServer({ UEXEC_MAX_CONNECTIONS: "100000", UEXEC_LOG: "off" }, [], 150);
  let stopped;
  try {
    const conns: Deno.TcpConn[] = [];
    const outcomes = await Promise.all(Array.from({ length: 300 }, async () => {
      try {
        const conn = await open(server);
        conns.push(conn);
        await send(conn, HEALTHZ);
        const { status, body } = await response(conn);
        if (status === 503) {
          assert.deepEqual(JSON.parse(body), {
            error: {
              code: "overloaded",
              message: "the server is out of file descriptors; retry later",
            },
          });
        } else assert.equal(status, 200);
        return status;
      } catch (err) {
        const refused = err instanceof Deno.errors.ConnectionReset ||
          err instanceof Deno.errors.ConnectionRefused || /closed the connection/.test(`${err}`);
        if (!refused) throw err;
        return "refused";
      }
    }));
    assert.ok(outcomes.includes(200));
    assert.ok(outcomes.includes(503), `no 503 among ${outcomes}`);
    for (const c of conns) {
      try {
        c.close();
      } catch { /* refused */ }
    }
    // The server frees its descriptors as it sees the clients go; until then it may say 503.
    for (let attempt = 0;; attempt++) {
      const res = await fetch(`${server.url}/healthz`, {
        signal: AbortSignal.timeout(DEADLINE_MS),
      });
      await res.body?.cancel();
      if (res.status === 200) break;
      assert.equal(res.status, 503);
      assert.ok(attempt < 100);
    }
    stopped = await server.stop();
  } finally {
    stopped ??= await server.stop();
  }
  assert.equal(stopped.code, 0);
  // No crash and no panic; a worker whose module load met EMFILE is reported and replaced.
  assert.doesNotMatch(stopped.stderr, /panicked|RUST_BACKTRACE|Too many open files \(os error/);
});
