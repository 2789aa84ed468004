/**
 * The listener's handler gets the client's address as Deno.serve gives it: a TCP client's own
 * address and port (for a peer lookup), and over a unix socket the socket's path. The per-peer
 * cap counts a local peer's connections by its uid. The private socket's directory is named for
 * the server instance, and a later server removes those of instances that no longer run, and
 * nothing else.
 *
 * @module
 */

import assert from "node:assert/strict";
import { removeDeadRelayDirs, serveLimited } from "../../../src/http/listener.ts";
import { instanceName, tempRoot } from "../../../src/sandbox/instance.ts";
import { exists } from "../../helpers/fs.ts";
import { peerClassifier } from "../../../src/http/sandbox_peer.ts";

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

/** Everything the server sends on a fresh connection after `text`, until it closes. */
async function exchange(port: number, text: string): Promise<string> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  await conn.write(new TextEncoder().encode(text));
  const timer = setTimeout(() => conn.close(), 10_000);
  try {
    return await new Response(conn.readable).text();
  } finally {
    clearTimeout(timer);
  }
}

Deno.test("listener: the relay frames requests as the server does, and refuses what it cannot frame", async (t) => {
  const seen: { method: string; body: string; tag: string | null; connection: object }[] = [];
  const http = serveLimited(
    { hostname: "127.0.0.1", port: 0 },
    limits,
    async (req, info) => {
      seen.push({
        method: req.method,
        body: await req.text(),
        tag: req.headers.get("x-uexec-connection"),
        connection: (info as unknown as { connection: object }).connection,
      });
      return new Response(`#${seen.length}`);
    },
  );
  const port = (http.addr as Deno.NetAddr).port;
  try {
    await t.step("pipelined requests with Content-Length and chunked bodies", async () => {
      seen.length = 0;
      const text = await exchange(
        port,
        "POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nGET /" +
          "POST /b HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n" +
          "3;ext=1\r\nGET\r\n4\r\n /x \r\n0\r\ntrailer: y\r\n\r\n" +
          "GET /c HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
      );
      assert.deepEqual(seen.map((s) => [s.method, s.body]), [
        ["POST", "GET /"],
        ["POST", "GET /x "],
        ["GET", ""],
      ]);
      assert.equal(new Set(seen.map((s) => s.connection)).size, 1, "one connection");
      assert.match(text, /#1[\s\S]*#2[\s\S]*#3$/);
    });

    await t.step("a tag the client sends is dropped; the connection's own is used", async () => {
      seen.length = 0;
      await exchange(
        port,
        "GET / HTTP/1.1\r\nhost: x\r\nx-uexec-connection: forged\r\nconnection: close\r\n\r\n",
      );
      assert.equal(seen.length, 1);
      assert.notEqual(seen[0].tag, "forged");
      assert.match(seen[0].tag!, /^[0-9a-f]{32}$/);
    });

    for (
      const [name, request, status] of [
        [
          "Content-Length and Transfer-Encoding",
          "POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
          400,
        ],
        [
          "differing Content-Lengths",
          "POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\nabcd",
          400,
        ],
        [
          "a coding not ending in chunked",
          "POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked, gzip\r\n\r\n",
          400,
        ],
        ["a folded header line", "GET / HTTP/1.1\r\nhost: x\r\n folded\r\n\r\n", 400],
        ["HTTP/2's preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505],
        ["a head over 64 KiB", `GET / HTTP/1.1\r\nx: ${"a".repeat(70_000)}\r\n\r\n`, 431],
      ] as const
    ) {
      await t.step(`refused: ${name} (${status})`, async () => {
        seen.length = 0;
        const answer = await exchange(port, request);
        assert.match(answer, new RegExp(`^HTTP/1\\.1 ${status} `));
        const body = JSON.parse(answer.slice(answer.indexOf("\r\n\r\n") + 4));
        assert.equal(body.error.code, "invalid_request");
        assert.equal(seen.length, 0, "the handler never saw it");
      });
    }
  } finally {
    await http.shutdown();
  }
});

Deno.test("listener: header bytes beyond ASCII reach the handler as sent", async () => {
  const http = serveLimited(
    { hostname: "127.0.0.1", port: 0 },
    limits,
    (req) => Response.json([...req.headers.get("x-a")!].map((c) => c.charCodeAt(0))),
  );
  try {
    // "café" in UTF-8, ending in a byte (0xa0) that is a no-break space in latin1.
    const answer = await exchange(
      (http.addr as Deno.NetAddr).port,
      "GET / HTTP/1.1\r\nhost: x\r\nx-a: caf\u00e9\u00a0\r\nconnection: close\r\n\r\n",
    );
    // Deno.serve gives each byte as one code unit (a ByteString).
    assert.deepEqual(JSON.parse(answer.slice(answer.indexOf("\r\n\r\n") + 4)), [
      0x63,
      0x61,
      0x66,
      0xc3,
      0xa9,
      0xc2,
      0xa0,
    ]);
  } finally {
    await http.shutdown();
  }
});

Deno.test("listener: a request body that stops coming closes its connection after the idle timeout", async () => {
  const http = serveLimited(
    { hostname: "127.0.0.1", port: 0 },
    { ...limits, idleTimeoutMs: 100 },
    async (req) => new Response(await req.text()),
  );
  try {
    // Three bytes of a hundred, then nothing: the handler waits on the body, in flight.
    const answer = await exchange(
      (http.addr as Deno.NetAddr).port,
      "POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\nabc",
    );
    assert.equal(answer, "", "closed unanswered (before the exchange's 10 s deadline)");
  } finally {
    await http.shutdown();
  }
});

Deno.test("listener: a client that stops reading its responses is closed after the idle timeout", async () => {
  const cancelled = Promise.withResolvers<void>();
  const http = serveLimited(
    { hostname: "127.0.0.1", port: 0 },
    { ...limits, idleTimeoutMs: 100 },
    () =>
      new Response(
        new ReadableStream({
          pull: (c) => c.enqueue(new Uint8Array(64 * 1024)),
          cancel: () => cancelled.resolve(),
        }),
      ),
  );
  const conn = await Deno.connect({
    hostname: "127.0.0.1",
    port: (http.addr as Deno.NetAddr).port,
  });
  const deadline = setTimeout(() => cancelled.reject(new Error("still served after 10 s")), 10_000);
  try {
    // An endless response to a client that reads none of it: once the buffers are full, the
    // request stays in flight; the relay's write to the client makes no progress.
    await conn.write(new TextEncoder().encode("GET / HTTP/1.1\r\nhost: x\r\n\r\n"));
    await cancelled.promise;
  } finally {
    clearTimeout(deadline);
    conn.close();
    await http.shutdown();
  }
});

Deno.test("listener: the private socket is 0600 in a 0700 directory, and goes with the listener", async () => {
  const http = serveLimited({ hostname: "127.0.0.1", port: 0 }, limits, () => new Response("x"));
  let path: string | undefined;
  try {
    // This process's listening unix sockets whose path is a relay's.
    const ours = new Set<string>();
    for (const entry of Deno.readDirSync("/proc/self/fd")) {
      let target = "";
      try {
        target = Deno.readLinkSync(`/proc/self/fd/${entry.name}`);
      } catch { /* the directory's own descriptor, closed by now */ }
      const inode = /^socket:\[(\d+)\]$/.exec(target)?.[1];
      if (inode) ours.add(inode);
    }
    const paths = Deno.readTextFileSync("/proc/net/unix").split("\n").map((line) =>
      line.split(/\s+/)
    )
      .filter((f) => ours.has(f[6]) && /\/uexec-relay-[^/]+\/http-\d+\.sock$/.test(f[7] ?? ""))
      .map((f) => f[7]);
    assert.equal(paths.length, 1, `one relay socket: ${paths}`);
    path = paths[0];
    assert.equal(Deno.statSync(path).mode! & 0o777, 0o600);
    const dir = path.slice(0, path.lastIndexOf("/"));
    assert.equal(Deno.statSync(dir).mode! & 0o777, 0o700);
    assert.equal(Deno.statSync(dir).uid, Deno.uid());
  } finally {
    await http.shutdown();
  }
  assert.throws(() => Deno.statSync(path!.slice(0, path!.lastIndexOf("/"))), Deno.errors.NotFound);
});

Deno.test("listener: the private socket's directory of a dead instance is removed by a later one", async () => {
  // The directory in use now is named for this instance (others of this process's listeners
  // may be open meanwhile: the one that appears is this one's).
  const tmp = tempRoot();
  const named = () =>
    new Set(
      [...Deno.readDirSync(tmp)].map((e) => e.name).filter((name) =>
        name.startsWith(`uexec-relay-${instanceName()}-`)
      ),
    );
  const before = named();
  const http = serveLimited({ hostname: "127.0.0.1", port: 0 }, limits, echoAddr);
  const made = [...named()].filter((name) => !before.has(name));
  assert.equal(made.length, 1);
  await http.shutdown();
  assert.ok(!exists(`${tmp}/${made[0]}`), "removed on shutdown");

  const root = await Deno.makeTempDir({ prefix: "uexec-relay-reap-" });
  try {
    // This pid with another start time: an instance that no longer runs (its pid reused).
    const [, pid, start] = /^i(\d+)-(\d+)$/.exec(instanceName())!;
    const dead = `i${pid}-${Number(start) + 1}`;
    await Deno.mkdir(`${root}/uexec-relay-${dead}-a1`);
    await Deno.writeTextFile(`${root}/uexec-relay-${dead}-a1/http-0.sock`, "");
    // Kept: a live instance's, one of another uid, a link named like a dead one's, a file, and
    // a name that is not an instance's.
    await Deno.mkdir(`${root}/uexec-relay-${instanceName()}-b2`);
    await Deno.mkdir(`${root}/uexec-relay-${dead}-c3`);
    await Deno.chown(`${root}/uexec-relay-${dead}-c3`, 65534, 65534);
    await Deno.mkdir(`${root}/target`);
    await Deno.symlink(`${root}/target`, `${root}/uexec-relay-${dead}-d4`);
    await Deno.writeTextFile(`${root}/uexec-relay-${dead}-e5`, "");
    await Deno.mkdir(`${root}/uexec-relay-0123456789abcdef`);
    assert.equal(await removeDeadRelayDirs(root), 1);
    assert.deepEqual(
      [...Deno.readDirSync(root)].map((e) => e.name).sort(),
      [
        "target",
        "uexec-relay-0123456789abcdef",
        `uexec-relay-${dead}-c3`,
        `uexec-relay-${dead}-d4`,
        `uexec-relay-${dead}-e5`,
        `uexec-relay-${instanceName()}-b2`,
      ].sort(),
    );
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
