import assert from "node:assert/strict";
import { peerUid, TcpPeers } from "../../../../src/sandbox/identity/tcp_peers.ts";

const NOBODY = 65534;

/** A listener on `hostname` and one connection to it from this process, accepted. */
async function connectedPair(hostname: string, connectTo = hostname) {
  const listener = Deno.listen({ hostname, port: 0 });
  const client = await Deno.connect({ hostname: connectTo, port: listener.addr.port });
  const server = await listener.accept();
  return {
    listener,
    client,
    server,
    [Symbol.dispose]() {
      client.close();
      server.close();
      listener.close();
    },
  };
}

/**
 * A python3 client running as uid/gid 65534 (setpriv) that connects to `hostname`:`port`, says
 * "ready" and holds the connection until its stdin closes.
 */
function nobodyClient(hostname: string, port: number) {
  const script = [
    "import socket, sys",
    `s = socket.create_connection((${JSON.stringify(hostname)}, ${port}))`,
    "print('ready', flush=True)",
    "sys.stdin.read()",
  ].join("\n");
  return new Deno.Command("setpriv", {
    args: [
      `--reuid=${NOBODY}`,
      `--regid=${NOBODY}`,
      "--clear-groups",
      "/usr/bin/python3",
      "-c",
      script,
    ],
    cwd: "/",
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
}

async function readLine(stream: ReadableStream<Uint8Array>): Promise<string> {
  const reader = stream.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  while (!text.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) break;
    text += value;
  }
  await reader.cancel();
  return text;
}

for (const hostname of ["127.0.0.1", "::1"]) {
  Deno.test(`peer: a connection from this process on ${hostname} is root's`, async () => {
    using pair = await connectedPair(hostname);
    const peers = new TcpPeers();
    try {
      assert.equal(pair.server.remoteAddr.hostname, hostname);
      assert.equal(peers.uid(pair.listener.addr, pair.server.remoteAddr), 0);
    } finally {
      peers.close();
    }
  });

  Deno.test(`peer: a connection from uid ${NOBODY} on ${hostname} is ${NOBODY}'s`, async () => {
    const listener = Deno.listen({ hostname, port: 0 });
    const child = nobodyClient(hostname, listener.addr.port);
    const peers = new TcpPeers();
    try {
      const accepted = listener.accept();
      assert.equal(await readLine(child.stdout), "ready\n");
      using conn = await accepted;
      assert.equal(peers.uid(listener.addr, conn.remoteAddr), NOBODY);
      // Once the client has closed its end, what lingers (orphan or TIME_WAIT, which
      // inet_diag reports as uid 0) is held by no process: no answer, never root.
      await child.stdin.close();
      assert.equal((await child.status).code, 0);
      assert.equal(peers.uid(listener.addr, conn.remoteAddr), undefined);
    } finally {
      peers.close();
      listener.close();
    }
  });
}

Deno.test("peer: IPv4-mapped addresses find IPv4 and IPv6 client sockets", async () => {
  const peers = new TcpPeers();
  try {
    // An IPv4 client socket, seen by an IPv6 listener as ::ffff:127.0.0.1.
    {
      using pair = await connectedPair("::ffff:127.0.0.1", "127.0.0.1");
      const client = pair.server.remoteAddr;
      assert.equal(client.hostname, "::ffff:127.0.0.1");
      assert.equal(peers.uid(pair.listener.addr, client), 0);
      // The same socket named in plain IPv4 form on either side.
      const port = pair.listener.addr.port;
      assert.equal(peers.uid({ hostname: "127.0.0.1", port }, client), 0);
      assert.equal(peers.uid(pair.listener.addr, { ...client, hostname: "127.0.0.1" }), 0);
    }
    // An IPv6 client socket connected to an IPv4-mapped address.
    {
      using pair = await connectedPair("::ffff:127.0.0.1");
      assert.equal(pair.client.localAddr.hostname, "::ffff:127.0.0.1");
      assert.equal(peers.uid(pair.listener.addr, pair.server.remoteAddr), 0);
    }
    // The same address over real IPv6 is another socket: none here.
    {
      using pair = await connectedPair("127.0.0.1");
      const port = pair.server.remoteAddr.port;
      assert.equal(
        peers.uid({ hostname: "::1", port: pair.listener.addr.port }, { hostname: "::1", port }),
        undefined,
      );
    }
  } finally {
    peers.close();
  }
});

Deno.test("peer: an unknown 4-tuple has no owner", async () => {
  using pair = await connectedPair("127.0.0.1");
  const peers = new TcpPeers();
  try {
    const server = pair.listener.addr;
    const client = pair.server.remoteAddr;
    // Each element of the 4-tuple, changed alone, names no socket.
    const otherServer = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const unused = otherServer.addr.port;
    otherServer.close();
    assert.equal(peers.uid(server, { ...client, port: unused }), undefined);
    assert.equal(peers.uid({ ...server, port: unused }, client), undefined);
    assert.equal(peers.uid(server, { ...client, hostname: "127.0.0.2" }), undefined);
    assert.equal(peers.uid({ ...server, hostname: "127.0.0.2" }, client), undefined);
    // A peer on another host.
    assert.equal(peers.uid(server, { hostname: "192.0.2.7", port: 40000 }), undefined);
    assert.equal(
      peers.uid({ hostname: "::1", port: 1 }, { hostname: "2001:db8::7", port: 2 }),
      undefined,
    );
    // The server's own listening socket: the kernel falls back to it for a "client" on its
    // address and port, but it is not the client of any connection.
    assert.equal(peers.uid({ ...server, port: unused }, server), undefined);
    // Addresses of different families cannot be one connection.
    assert.equal(peers.uid(server, { hostname: "::1", port: client.port }), undefined);
  } finally {
    peers.close();
  }
});

Deno.test("peer: unusable input and a closed lookup throw", () => {
  const peers = new TcpPeers();
  const client = { hostname: "127.0.0.1", port: 40000 };
  try {
    for (const wildcard of ["0.0.0.0", "::", "[::]", "::ffff:0.0.0.0"]) {
      assert.throws(
        () => peers.uid({ hostname: wildcard, port: 8787 }, client),
        /needs the connection's local address, not the wildcard/,
      );
    }
    for (const hostname of ["localhost", "1.2.3", "1.2.3.256", "1::2::3", "fe80::1%eth0", ""]) {
      assert.throws(
        () => peers.uid({ hostname, port: 8787 }, client),
        { message: `peer lookup: ${JSON.stringify(hostname)} is not an IP address` },
      );
    }
    assert.throws(() => peers.uid({ hostname: "127.0.0.1", port: 0 }, client), /bad port 0/);
  } finally {
    peers.close();
  }
  assert.throws(() => peers.uid({ hostname: "127.0.0.1", port: 8787 }, client), /after close/);
});

Deno.test("peer: IPv6 literals in every spelling name the same socket", async () => {
  using pair = await connectedPair("::1");
  const peers = new TcpPeers();
  try {
    const client = pair.server.remoteAddr;
    for (const hostname of ["::1", "[::1]", "0:0:0:0:0:0:0:1", "0::0:1", "::0.0.0.1"]) {
      assert.equal(peers.uid({ hostname, port: pair.listener.addr.port }, client), 0, hostname);
    }
  } finally {
    peers.close();
  }
});

Deno.test("peer: peerUid shares one lookup socket for the thread", async () => {
  using pair = await connectedPair("127.0.0.1");
  assert.equal(peerUid(pair.listener.addr, pair.server.remoteAddr), 0);
  assert.equal(peerUid(pair.listener.addr, { ...pair.server.remoteAddr, port: 1 }), undefined);
});
