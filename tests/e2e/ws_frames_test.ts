/**
 * The WebSocket's framing against a hostile client, over raw TCP to a real server: a handshake
 * without a key, unmasked frames, a frame whose header announces more than the 1 MiB bound,
 * reserved bits and opcodes; each is refused the way RFC 6455 says (400, or a close frame with
 * its code) and none is acted on. And a subscriber that fell behind learns of the gap as soon
 * as it caught up, not when the session next prints.
 *
 * @module
 */

import assert from "node:assert/strict";
import { startServer } from "../helpers/server.ts";
import { FrameReader, rawRequest, rawUpgrade, type ServerFrame, wsUrl } from "../helpers/ws.ts";

const encoder = new TextEncoder();
/** How long a client here waits for the server before the test fails. */
const DEADLINE_MS = 10_000;

/** Reads server frames (of any opcode) from a raw connection, failing after the deadline. */
class RawFrames {
  readonly #conn: Deno.Conn;
  readonly #frames: FrameReader;

  constructor(conn: Deno.Conn, rest: Uint8Array) {
    this.#conn = conn;
    this.#frames = new FrameReader(conn, rest);
  }

  /** The next frame, or undefined when the server closed the connection without one. */
  async next(): Promise<ServerFrame | undefined> {
    const timer = setTimeout(() => this.#conn.close(), DEADLINE_MS);
    try {
      return await this.#frames.frame();
    } catch (err) {
      if (err instanceof Deno.errors.ConnectionReset) return undefined;
      throw new Error(`no frame before the deadline: ${err}`);
    } finally {
      clearTimeout(timer);
    }
  }

  /** The close code of the next frame, which must be a close frame. */
  async closeCode(): Promise<number> {
    const frame = await this.next();
    assert.ok(frame, "the server dropped the connection without a close frame");
    assert.equal(frame.op, 0x8, `a close frame, not opcode ${frame.op}`);
    return (frame.payload[0] << 8) | frame.payload[1];
  }
}

/** A client frame with explicit first byte and masking (`mask` false: unmasked). */
function rawFrame(b0: number, payload: Uint8Array, mask = true): Uint8Array {
  const n = payload.length;
  const ext = n < 126 ? [] : [n >> 8, n & 0xff];
  const head = [b0, (mask ? 0x80 : 0) | (n < 126 ? n : 126), ...ext];
  const key = mask ? crypto.getRandomValues(new Uint8Array(4)) : new Uint8Array(0);
  const out = new Uint8Array(head.length + key.length + n);
  out.set(head);
  out.set(key, head.length);
  for (let i = 0; i < n; i++) {
    out[head.length + key.length + i] = payload[i] ^ (mask ? key[i & 3] : 0);
  }
  return out;
}

const request = (id: number) =>
  encoder.encode(
    JSON.stringify({ jsonrpc: "2.0", id, method: "exec_command", params: { cmd: "true" } }),
  );

Deno.test("websocket frames: refusals", async (t) => {
  const server = await startServer();
  const url = await wsUrl(server.url, server.auth);
  try {
    await t.step("an upgrade without Sec-WebSocket-Key is a 400", async () => {
      const { hostname, port } = new URL(url);
      const conn = await Deno.connect({ hostname, port: Number(port) });
      await conn.write(encoder.encode(
        `GET /v1/ws HTTP/1.1\r\nHost: ${hostname}:${port}\r\nUpgrade: websocket\r\n` +
          `Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n` +
          `authorization: ${server.auth.authorization}\r\n\r\n`,
      ));
      // Until the server closes the connection, or the deadline does.
      const timer = setTimeout(() => conn.close(), DEADLINE_MS);
      let text = "";
      try {
        text = await new Response(conn.readable).text();
      } catch { /* closed by the deadline */ }
      clearTimeout(timer);
      assert.match(text, /^HTTP\/1\.1 400 /);
      const body = JSON.parse(text.slice(text.indexOf("\r\n\r\n") + 4));
      assert.equal(body.error.code, "invalid_request");
      assert.match(body.error.message, /Sec-WebSocket-Key/);
    });

    await t.step("an upgrade after another request on its connection is a 400", async () => {
      const { hostname, port } = new URL(url);
      const conn = await Deno.connect({ hostname, port: Number(port) });
      const head = `Host: ${hostname}:${port}\r\nauthorization: ${server.auth.authorization}\r\n`;
      await conn.write(encoder.encode(
        `GET /healthz HTTP/1.1\r\n${head}\r\n` +
          `GET /v1/ws HTTP/1.1\r\n${head}Upgrade: websocket\r\nConnection: Upgrade\r\n` +
          `Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n` +
          `connection: close\r\n\r\n`,
      ));
      const timer = setTimeout(() => conn.close(), DEADLINE_MS);
      let text = "";
      try {
        text = await new Response(conn.readable).text();
      } catch { /* closed by the deadline */ }
      clearTimeout(timer);
      const statuses = [...text.matchAll(/HTTP\/1\.1 (\d+)/g)].map((m) => m[1]);
      assert.deepEqual(statuses, ["200", "400"]);
      assert.match(text, /must be the first request of its connection/);
    });

    const cases: [string, (conn: Deno.Conn) => Promise<unknown>, number][] = [
      [
        "an unmasked frame is refused: close 1002",
        (c) => c.write(rawFrame(0x81, request(1), false)),
        1002,
      ],
      ["a reserved bit: close 1002", (c) => c.write(rawFrame(0xc1, request(1))), 1002],
      ["a reserved opcode: close 1002", (c) => c.write(rawFrame(0x83, request(1))), 1002],
      [
        "a frame announcing more than 1 MiB: close 1009 from its header alone",
        // The header claims 64 MiB; no payload follows, so a server that reads it whole waits.
        (c) => c.write(new Uint8Array([0x81, 0xff, 0, 0, 0, 0, 4, 0, 0, 0, 1, 2, 3, 4])),
        1009,
      ],
      [
        "fragments adding up to more than 1 MiB: close 1009",
        async (c) => {
          await c.write(rawFrame(0x01, new Uint8Array(60_000)));
          for (let i = 0; i < 17; i++) await c.write(rawFrame(0x00, new Uint8Array(60_000)));
        },
        1009,
      ],
      [
        "text that is not UTF-8: close 1007",
        (c) => c.write(rawFrame(0x81, new Uint8Array([0xc3, 0x28]))),
        1007,
      ],
    ];
    for (const [name, send, code] of cases) {
      await t.step(name, async () => {
        const { conn, head, rest } = await rawUpgrade(url, server.auth);
        try {
          assert.match(head, /^HTTP\/1\.1 101 /);
          await send(conn);
          const frames = new RawFrames(conn, rest);
          assert.equal(await frames.closeCode(), code);
          // Nothing was acted on: the connection ends after the close frame.
          assert.equal(await frames.next(), undefined);
        } finally {
          try {
            conn.close();
          } catch { /* closed by the deadline */ }
        }
      });
    }

    await t.step("a ping is answered with its pong; a fragmented request is served", async () => {
      const { conn, rest } = await rawUpgrade(url, server.auth);
      try {
        await conn.write(rawFrame(0x89, encoder.encode("hello")));
        const frames = new RawFrames(conn, rest);
        const pong = await frames.next();
        assert.equal(pong?.op, 0xa);
        assert.equal(new TextDecoder().decode(pong!.payload), "hello");
        const whole = request(7);
        await conn.write(rawFrame(0x01, whole.subarray(0, 10)));
        await conn.write(rawFrame(0x89, new Uint8Array())); // A control frame between fragments.
        await conn.write(rawFrame(0x80, whole.subarray(10)));
        assert.equal((await frames.next())?.op, 0xa);
        const answer = await frames.next();
        assert.equal(answer?.op, 0x1);
        const reply = JSON.parse(new TextDecoder().decode(answer!.payload));
        assert.equal(reply.id, 7);
        assert.equal(reply.result.exit_code, 0);
      } finally {
        conn.close();
      }
    });

    await t.step("a client's close is answered with a close frame", async () => {
      const { conn, rest } = await rawUpgrade(url, server.auth);
      try {
        await conn.write(rawFrame(0x88, new Uint8Array([0x03, 0xe8])));
        const frames = new RawFrames(conn, rest);
        assert.equal(await frames.closeCode(), 1000);
        assert.equal(await frames.next(), undefined);
      } finally {
        conn.close();
      }
    });
  } finally {
    await server.stop();
  }
});

Deno.test("websocket frames: a subscriber that fell behind learns of the gap once it caught up", async () => {
  const server = await startServer();
  const total = 24 * 1024 * 1024;
  const { conn, head, rest } = await rawUpgrade(await wsUrl(server.url, server.auth), server.auth);
  try {
    assert.match(head, /^HTTP\/1.1 101/);
    // Floods, then says END and stays silent (alive: its exit would tell of the gap anyway).
    const run = await server.post("/v1/exec_command", {
      cmd:
        `echo ready; read x; head -c ${total} /dev/zero | tr '\\0' a; printf END; exec sleep 600`,
      until: "ready",
      tty: false,
      login: false,
      shell: "/bin/sh",
    });
    const id = run.body.session_id;
    const frames = new FrameReader(conn, rest);
    await rawRequest(conn, 1, "subscribe", { session_id: id });
    const sub = JSON.parse(await frames.next());
    const from = sub.result.offset;
    // The flood runs to its END while this client reads nothing.
    const done = await server.post("/v1/write_stdin", {
      session_id: id,
      chars: "\n",
      until: "END",
      yield_time_ms: 120_000,
    });
    assert.match(done.body.output, /END$/);
    const last = from + total + 3;
    // Reading now: the output queued, then one gap that reaches the session's end, with no
    // further output from the session to trigger it.
    let end = from;
    let gaps = 0;
    const timer = setTimeout(() => conn.close(), 30_000);
    try {
      while (end < last) {
        const frame = JSON.parse(await frames.next());
        assert.equal(frame.params.offset, end);
        if (frame.method === "gap") {
          end += frame.params.bytes;
          gaps++;
        } else {
          assert.equal(frame.method, "output");
          end += frame.params.text.length;
        }
      }
    } catch (err) {
      throw new Error(`stopped at ${end} of ${last}: ${err}`);
    } finally {
      clearTimeout(timer);
    }
    assert.equal(end, last);
    assert.ok(gaps >= 1, "output was dropped, not queued");
  } finally {
    conn.close();
    await server.stop();
  }
});
