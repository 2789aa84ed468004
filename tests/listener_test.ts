/**
 * The listener's handler gets the client's address as Deno.serve gives it: a TCP client's own
 * address and port (for a peer lookup), and over a unix socket the socket's path. The per-peer
 * cap counts a local peer's connections by its uid.
 *
 * @module
 */

import assert from "node:assert/strict";
import { serveLimited } from "../src/http/listener.ts";
import { peerClassifier } from "../src/http/sandbox_peer.ts";

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

/** The status line python3, as uid/gid 65534 (setpriv), gets for GET / on 127.0.0.1:`port`. */
async function statusAsNobody(port: number): Promise<string> {
  const script = [
    "import socket",
    `s = socket.create_connection(("127.0.0.1", ${port}))`,
    "s.sendall(b'GET / HTTP/1.1\\r\\nhost: x\\r\\nconnection: close\\r\\n\\r\\n')",
    "data = b''",
    "while b'\\r\\n' not in data:",
    "    chunk = s.recv(4096)",
    "    if not chunk: break",
    "    data += chunk",
    "print(data.split(b'\\r\\n')[0].decode())",
  ].join("\n");
  const out = await new Deno.Command("setpriv", {
    args: ["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script],
    cwd: "/",
    stderr: "inherit",
  }).output();
  return new TextDecoder().decode(out.stdout).trim();
}

Deno.test("listener: beyond the per-peer cap a local uid's connection is 503; another uid's is served", async () => {
  const http = serveLimited(
    { hostname: "127.0.0.1", port: 0 },
    { ...limits, maxPerPeer: 2 },
    () => new Response("served"),
    { peers: (addr) => peerClassifier(addr) },
  );
  const held: Deno.Conn[] = [];
  try {
    const port = (http.addr as Deno.NetAddr).port;
    for (let i = 0; i < 2; i++) {
      const conn = await Deno.connect({ hostname: "127.0.0.1", port });
      await conn.write(new TextEncoder().encode("GET / HTTP/1.1\r\nho"));
      held.push(conn);
    }
    const third = await Deno.connect({ hostname: "127.0.0.1", port });
    const text = await request(third);
    assert.equal(
      text,
      '{"error":{"code":"overloaded","message":"too many connections from this peer; retry later"}}',
    );
    assert.equal(await statusAsNobody(port), "HTTP/1.1 200 OK");
  } finally {
    for (const conn of held) conn.close();
    await http.shutdown();
  }
});
