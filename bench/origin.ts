/**
 * An HTTP origin for the egress workload, run as a process of its own (`deno run --allow-net
 * bench/origin.ts <bytes>`) so that its sending never shares an event loop with the bench's
 * clients: it listens on a loopback port it prints as its first line, and answers every request
 * with `bytes` bytes, as fast as loopback takes them, until its stdin closes.
 * @module
 */

const bytes = Number(Deno.args[0]);
if (!Number.isSafeInteger(bytes) || bytes < 0) throw new Error(`bad byte count ${Deno.args[0]}`);
const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
const block = new Uint8Array(1024 * 1024).fill(0x61);
const decoder = new TextDecoder();

async function serve(conn: Deno.TcpConn): Promise<void> {
  try {
    const buf = new Uint8Array(16 * 1024);
    let head = "";
    while (!head.includes("\r\n\r\n")) {
      const n = await conn.read(buf);
      if (n === null) return;
      head += decoder.decode(buf.subarray(0, n));
    }
    await conn.write(new TextEncoder().encode(
      `HTTP/1.1 200 OK\r\nContent-Length: ${bytes}\r\nConnection: close\r\n\r\n`,
    ));
    for (let left = bytes; left > 0;) {
      left -= await conn.write(block.subarray(0, Math.min(left, block.length)));
    }
  } catch {
    // The client went away.
  } finally {
    conn.close();
  }
}

(async () => {
  for await (const conn of listener) serve(conn);
})().catch(() => {});
console.log(listener.addr.port);
// Stops when the bench closes its stdin (or dies).
for await (const _ of Deno.stdin.readable) { /* nothing is sent */ }
Deno.exit(0);
