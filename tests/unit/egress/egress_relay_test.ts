/**
 * The egress proxy's byte relay (src/egress/relay.ts) on real loopback sockets: every byte
 * arrives in order and is counted, the end of one direction half-closes the other side (the
 * reply still flows), and large buffers stay within the server-wide budget however many bulk
 * transfers run at once, all returned when they end; the pool keeps a few for the next transfer,
 * never one a cut-off transfer may still be reading into.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  BULK_BUDGET,
  bulkBuffersPooled,
  bulkBytesLent,
  POOL_MAX,
  relay,
} from "../../../src/egress/relay.ts";

/** A connected pair of loopback TCP sockets. */
async function pair(): Promise<[Deno.TcpConn, Deno.TcpConn]> {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const [a, b] = await Promise.all([
    Deno.connect({ hostname: "127.0.0.1", port: listener.addr.port }),
    listener.accept(),
  ]);
  listener.close();
  return [a, b];
}

/** Everything `conn` sends until it half-closes. */
async function readToEnd(conn: Deno.Conn): Promise<Uint8Array> {
  const chunks: Uint8Array[] = [];
  const buf = new Uint8Array(1 << 20);
  for (let n = await conn.read(buf); n !== null; n = await conn.read(buf)) {
    chunks.push(buf.slice(0, n));
  }
  const out = new Uint8Array(chunks.reduce((a, c) => a + c.length, 0));
  let off = 0;
  for (const c of chunks) out.set(c, (off += c.length) - c.length);
  return out;
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  for (let off = 0; off < bytes.length;) off += await conn.write(bytes.subarray(off));
}

/** `bytes` pseudo-random bytes (a pattern that shows a reordered or lost chunk). */
function pattern(bytes: number, seed: number): Uint8Array {
  const out = new Uint8Array(bytes);
  let x = seed;
  for (let i = 0; i < bytes; i++) out[i] = (x = (x * 1103515245 + 12345) >>> 0) >>> 24;
  return out;
}

/**
 * A relay between a client and a server socket pair, both directions; `send` is what the client
 * sends (then half-closes), `reply` what the server sends back after reading all of it.
 */
async function relayed(send: Uint8Array, reply: Uint8Array, peak?: { lent: number }) {
  const [client, proxyIn] = await pair();
  const [proxyOut, server] = await pair();
  let up = 0;
  let down = 0;
  const relays = Promise.all([
    relay(proxyIn, proxyOut, (n) => {
      up += n;
      if (peak) peak.lent = Math.max(peak.lent, bulkBytesLent());
    }),
    relay(proxyOut, proxyIn, (n) => down += n),
  ]);
  const serverSide = (async () => {
    const got = await readToEnd(server);
    await writeAll(server, reply);
    await server.closeWrite();
    return got;
  })();
  const [, atServer, atClient] = await Promise.all([
    writeAll(client, send).then(() => client.closeWrite()),
    serverSide,
    readToEnd(client),
  ]);
  await relays;
  for (const c of [client, proxyIn, proxyOut, server]) c.close();
  return { atServer, atClient, up, down };
}

Deno.test("egress relay: every byte in order and counted; a half-close lets the reply through", async () => {
  const send = pattern(20 * 1024 * 1024 + 17, 1);
  const reply = pattern(3 * 1024 * 1024 + 5, 2);
  const r = await relayed(send, reply);
  assert.equal(r.up, send.length);
  assert.equal(r.down, reply.length);
  assert.ok(r.atServer.length === send.length && r.atServer.every((b, i) => b === send[i]));
  assert.ok(r.atClient.length === reply.length && r.atClient.every((b, i) => b === reply[i]));
  // A short exchange too: one small chunk each way.
  const short = await relayed(new TextEncoder().encode("GET"), new TextEncoder().encode("OK"));
  assert.deepEqual([short.up, short.down], [3, 2]);
  assert.equal(new TextDecoder().decode(short.atClient), "OK");
  assert.equal(bulkBytesLent(), 0);
});

Deno.test("egress relay: bulk transfers at once stay within the large-buffer budget", async () => {
  const peak = { lent: 0 };
  const send = pattern(8 * 1024 * 1024, 3);
  // More bulk transfers at once than the budget has large buffers for: all complete, byte for
  // byte, those beyond it on small buffers.
  const results = await Promise.all(
    Array.from({ length: 24 }, () => relayed(send, new Uint8Array(0), peak)),
  );
  for (const r of results) {
    assert.equal(r.up, send.length);
    assert.ok(r.atServer.every((b, i) => b === send[i]));
  }
  assert.ok(peak.lent > 0, "some transfer was bulk");
  assert.ok(peak.lent <= BULK_BUDGET, `${peak.lent} > ${BULK_BUDGET}`);
  assert.equal(bulkBytesLent(), 0, "every large buffer is returned");
});

Deno.test("egress relay: large buffers are pooled after a clean end, never after a cut-off one", async () => {
  // Two bulk transfers, one after the other: the second reuses the first one's buffers and
  // carries its own bytes only.
  const a = pattern(6 * 1024 * 1024, 4);
  const b = pattern(5 * 1024 * 1024 + 3, 5);
  assert.deepEqual((await relayed(a, new Uint8Array(0))).atServer, a);
  const pooled = bulkBuffersPooled();
  assert.ok(pooled >= 2 && pooled <= POOL_MAX, `pooled ${pooled}`);
  assert.deepEqual((await relayed(b, new Uint8Array(0))).atServer, b);
  assert.equal(bulkBuffersPooled(), pooled);

  // A bulk transfer cut off while it reads: its buffers are not pooled (a read may still be
  // filling them), and the budget gets them back.
  const [client, proxyIn] = await pair();
  const [proxyOut, server] = await pair();
  let relayed_ = 0;
  let cut!: () => void;
  const cutNow = new Promise<void>((resolve) => cut = resolve);
  const done = relay(proxyIn, proxyOut, (n) => {
    relayed_ += n;
    if (relayed_ > 4 * 1024 * 1024) cut();
  });
  const sending = writeAll(client, pattern(64 * 1024 * 1024, 6)).catch(() => {});
  const draining = readToEnd(server).catch(() => new Uint8Array(0));
  await cutNow;
  assert.equal(bulkBuffersPooled(), pooled - 2, "the transfer took two pooled buffers");
  proxyIn.close();
  proxyOut.close();
  await done;
  assert.equal(bulkBuffersPooled(), pooled - 2, "a cut-off transfer pools nothing");
  assert.equal(bulkBytesLent(), 0);
  client.close();
  server.close();
  await Promise.all([sending, draining]);
});
