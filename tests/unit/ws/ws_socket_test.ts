/**
 * The server's WebSocket end (FrameSocket) on a real TCP connection whose client is hostile:
 * what it queues for a client that never reads stays bounded.
 *
 * @module
 */

import assert from "node:assert/strict";
import { FrameSocket } from "../../../src/ws/socket.ts";

/** A masked client frame (mask 0: the payload goes as is). */
function clientFrame(op: number, payload: Uint8Array): Uint8Array {
  assert.ok(payload.length < 126);
  return Uint8Array.of(0x80 | op, 0x80 | payload.length, 0, 0, 0, 0, ...payload);
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  for (let off = 0; off < bytes.length;) off += await conn.write(bytes.subarray(off));
}

Deno.test("ws socket: pings from a client that never reads its pongs queue at most two", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const client = await Deno.connect({ hostname: "127.0.0.1", port: listener.addr.port });
  const server = await listener.accept();
  listener.close();
  const socket = new FrameSocket(server, new Uint8Array(0), 1 << 20);
  const got = Promise.withResolvers<string>();
  socket.onmessage = (event) => got.resolve(event.data as string);
  // Enough pongs (125 bytes each) to fill any loopback socket buffers many times over.
  const ping = clientFrame(0x9, new Uint8Array(125));
  const batch = new Uint8Array(ping.length * 1000);
  for (let i = 0; i < 1000; i++) batch.set(ping, i * ping.length);
  for (let i = 0; i < 300; i++) await writeAll(client, batch);
  await writeAll(client, clientFrame(0x1, new TextEncoder().encode("done")));
  assert.equal(await got.promise, "done");
  // Every ping was read; what waits for the client is at most the pong being written and one.
  assert.ok(socket.bufferedAmount <= 2 * 127, `${socket.bufferedAmount} bytes queued`);
  client.close();
  await socket.ended;
});

Deno.test("ws socket: a client that reads no answers is not read on past a bounded queue", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const client = await Deno.connect({ hostname: "127.0.0.1", port: listener.addr.port });
  const server = await listener.accept();
  listener.close();
  const socket = new FrameSocket(server, new Uint8Array(0), 1 << 20);
  const answer = "x".repeat(1 << 20);
  const all = Promise.withResolvers<void>();
  let answered = 0;
  let most = 0;
  socket.onmessage = () => {
    most = Math.max(most, socket.bufferedAmount);
    socket.send(answer);
    if (++answered === 64) all.resolve();
  };
  // 64 small requests at once, each answered with 1 MiB; the client reads only afterwards.
  const request = clientFrame(0x1, new TextEncoder().encode("{}"));
  const burst = new Uint8Array(request.length * 64);
  for (let i = 0; i < 64; i++) burst.set(request, i * request.length);
  await writeAll(client, burst);
  const reading = (async () => {
    const buf = new Uint8Array(1 << 16);
    while (await client.read(buf).catch(() => null) !== null) { /* discard */ }
  })();
  await all.promise;
  assert.ok(most <= 9 * (1 << 20) + 16, `${most} bytes were queued at once`);
  client.close();
  await Promise.all([reading, socket.ended]);
});
