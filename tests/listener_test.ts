/**
 * The listener's handler gets the client's address as Deno.serve gives it: a TCP client's own
 * address and port (for a peer lookup), and over a unix socket the socket's path.
 *
 * @module
 */

import assert from "node:assert/strict";
import { serveLimited } from "../src/http/listener.ts";

const limits = {
  headerTimeoutMs: 60_000,
  idleTimeoutMs: 60_000,
  maxConnections: 16,
  maxPerPeer: 16,
};
const echoAddr = (_req: Request, info: Deno.ServeHandlerInfo) => Response.json(info.remoteAddr);

async function request(conn: Deno.Conn): Promise<string> {
  await conn.write(
    new TextEncoder().encode("GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"),
  );
  const text = await new Response(conn.readable).text();
  return text.slice(text.indexOf("\r\n\r\n") + 4);
}

Deno.test("listener: a TCP handler sees the client's address and port", async () => {
  const http = serveLimited({ hostname: "127.0.0.1", port: 0 }, limits, echoAddr);
  try {
    const conn = await Deno.connect({
      hostname: "127.0.0.1",
      port: (http.addr as Deno.NetAddr).port,
    });
    const client = conn.localAddr;
    assert.deepEqual(JSON.parse(await request(conn)), {
      transport: "tcp",
      hostname: "127.0.0.1",
      port: client.port,
    });
  } finally {
    await http.shutdown();
  }
});

Deno.test("listener: a unix-socket handler sees the socket's path", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/uexec.sock`;
  const http = serveLimited({ transport: "unix", path }, limits, echoAddr);
  try {
    assert.deepEqual(http.addr, { transport: "unix", path });
    const conn = await Deno.connect({ transport: "unix", path });
    assert.deepEqual(JSON.parse(await request(conn)), { transport: "unix", path });
  } finally {
    await http.shutdown();
    await Deno.remove(dir, { recursive: true });
  }
});
