/**
 * The egress proxy's handling of one connection, against a real origin on loopback (allowed as
 * private for the test): what the origin receives is exactly the one request judged.
 *
 * @module
 */

import assert from "node:assert/strict";
import { handleConnection } from "../../../src/egress/proxy.ts";
import { Resolver } from "../../../src/egress/resolver.ts";
import { parseCidr } from "../../../src/egress/rules.ts";

/**
 * An origin that answers each connection with what it received: up to the end of a head (`"head"`,
 * the heads kept in `heads`) or all of it, once the client's side ended (`"all"`).
 */
function startOrigin(upTo: "head" | "all"): { port: number; heads: string[]; close(): void } {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const heads: string[] = [];
  (async () => {
    for await (const conn of listener) {
      let text = "";
      const buf = new Uint8Array(4096);
      for (let n = await conn.read(buf); n !== null; n = await conn.read(buf)) {
        text += new TextDecoder("latin1").decode(buf.subarray(0, n));
        if (upTo === "head" && text.includes("\r\n\r\n")) break;
      }
      if (upTo === "all") {
        await conn.write(new TextEncoder().encode(`HTTP/1.1 200 OK\r\n\r\n${text}`));
        conn.close();
        continue;
      }
      heads.push(text);
      const body = new TextEncoder().encode(text);
      await conn.write(new TextEncoder().encode(
        `HTTP/1.1 200 OK\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n`,
      ));
      await conn.write(body);
      conn.close();
    }
  })().catch(() => {});
  return { port: listener.addr.port, heads, close: () => listener.close() };
}

/** One exchange with a proxy in `read-only` mode allowing 127.0.0.1; the proxy's answer. */
async function throughProxy(request: string): Promise<string> {
  const proxy = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const ctx = {
    rules: { allow: ["127.0.0.1"], deny: [], methods: "read-only" as const },
    allowPrivate: [parseCidr("127.0.0.1/32")],
    resolver: new Resolver(),
    idleMs: 10_000,
  };
  const served = (async () => {
    const conn = await proxy.accept();
    await handleConnection(conn, ctx, () => {});
  })();
  const client = await Deno.connect({ hostname: "127.0.0.1", port: proxy.addr.port });
  await client.write(Uint8Array.from(request, (c) => c.charCodeAt(0)));
  const answer = await new Response(client.readable).text();
  await served;
  proxy.close();
  return answer;
}

Deno.test("egress proxy: a header line with a bare LF or CR is refused, never forwarded", async () => {
  const origin = startOrigin("head");
  try {
    const ok = await throughProxy(
      `GET http://127.0.0.1:${origin.port}/a HTTP/1.1\r\nx-a: b\r\n\r\n`,
    );
    assert.match(ok, /^HTTP\/1\.1 200 /);
    assert.equal(origin.heads.length, 1);
    for (const sep of ["\n", "\r"]) {
      // Read upstream as two lines, the second would start a POST past read-only mode.
      const answer = await throughProxy(
        `GET http://127.0.0.1:${origin.port}/a HTTP/1.1\r\nx-a: b${sep}${sep}` +
          `POST /admin HTTP/1.1${sep}content-length: 21\r\n\r\n`,
      );
      assert.match(answer, /^HTTP\/1\.1 400 /, JSON.stringify(sep));
      assert.match(answer, /malformed header line/);
    }
    assert.equal(origin.heads.length, 1, "nothing more reached the origin");
  } finally {
    origin.close();
  }
});

/** A client connection whose reads return `chunks` one by one, then its end; keeps what it got. */
function chunkedClient(chunks: string[]): { conn: Deno.TcpConn; received(): string } {
  const queue = chunks.map((c) => Uint8Array.from(c, (ch) => ch.charCodeAt(0)));
  let received = "";
  const conn = {
    read: (buf: Uint8Array) => {
      const next = queue.shift();
      if (next === undefined) return Promise.resolve(null);
      buf.set(next);
      return Promise.resolve(next.length);
    },
    write: (bytes: Uint8Array) => {
      received += new TextDecoder("latin1").decode(bytes);
      return Promise.resolve(bytes.length);
    },
    closeWrite: () => Promise.resolve(),
    close: () => {},
    setNoDelay: () => {},
  };
  return { conn: conn as unknown as Deno.TcpConn, received: () => received };
}

Deno.test("egress proxy: a head split across reads, its end too, goes up whole with its body", async () => {
  const origin = startOrigin("all");
  try {
    const ctx = {
      rules: { allow: ["127.0.0.1"], deny: [], methods: "all" as const },
      allowPrivate: [parseCidr("127.0.0.1/32")],
      resolver: new Resolver(),
      idleMs: 10_000,
    };
    // The head's end ("\r\n\r\n") falls across two reads, the second of which starts the body.
    const client = chunkedClient([
      `POST http://127.0.0.1:${origin.port}/a HTTP/1.1\r\nContent-Length: 11\r\n\r`,
      "\nhello",
      " world",
    ]);
    const records: { bytes_up: number; decision: string }[] = [];
    await handleConnection(client.conn, ctx, (r) => records.push(r));
    const upstream = `POST /a HTTP/1.1\r\nHost: 127.0.0.1:${origin.port}\r\n` +
      `Content-Length: 11\r\nConnection: close\r\n\r\nhello world`;
    assert.equal(client.received(), `HTTP/1.1 200 OK\r\n\r\n${upstream}`);
    assert.equal(records.length, 1);
    assert.equal(records[0].decision, "allowed");
    assert.equal(records[0].bytes_up, upstream.length);
  } finally {
    origin.close();
  }
});
