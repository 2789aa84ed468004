/**
 * The sandboxed-peer check on the HTTP listener looks a connection's peer up once and keeps the
 * answer for every request on that connection; each new connection is looked up again.
 *
 * @module
 */

import assert from "node:assert/strict";
import { serveLimited } from "../src/http/listener.ts";
import { sandboxedPeerCheck } from "../src/http/sandbox_peer.ts";

const limits = { headerTimeoutMs: 60_000, idleTimeoutMs: 60_000, maxConnections: 16 };
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
  Deno.test(`sandbox peer: one lookup per connection (peer sandboxed: ${sandboxed})`, async () => {
    const asked: number[] = [];
    let check: (info: Deno.ServeHandlerInfo) => boolean = () => true;
    const http = serveLimited(
      { hostname: "127.0.0.1", port: 0 },
      limits,
      (_req, info) => new Response(String(check(info))),
    );
    try {
      const addr = http.addr as Deno.NetAddr;
      check = sandboxedPeerCheck(addr, (uid) => {
        asked.push(uid);
        return sandboxed;
      });
      const first = await connection(addr.port);
      for (let i = 0; i < 3; i++) assert.equal(await first.get(), String(sandboxed));
      assert.deepEqual(asked, [0]);
      const second = await connection(addr.port);
      for (let i = 0; i < 2; i++) assert.equal(await second.get(), String(sandboxed));
      assert.equal(await first.get(), String(sandboxed));
      assert.deepEqual(asked, [0, 0]);
      first.close();
      second.close();
    } finally {
      await http.shutdown();
    }
  });
}

Deno.test("sandbox peer: without a connection on the info, every request is looked up", async () => {
  const asked: number[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (_req, info) => {
    return new Response(String(check(info)));
  });
  const check = sandboxedPeerCheck(server.addr, (uid) => {
    asked.push(uid);
    return false;
  });
  try {
    const conn = await connection(server.addr.port);
    for (let i = 0; i < 3; i++) assert.equal(await conn.get(), "false");
    assert.deepEqual(asked, [0, 0, 0]);
    conn.close();
  } finally {
    await server.shutdown();
  }
});
