/**
 * The egress proxy's cost: `curl` downloads 100 MB (5 MB with --quick) from an origin the bench
 * serves on loopback, once through uexec's proxy (a session under workspace-write-egress, the
 * origin's name mapped by UEXEC_EGRESS_HOSTS and its address let through by
 * UEXEC_EGRESS_ALLOW_PRIVATE) and once directly (a full-access session on the host's network,
 * the same curl and origin), alternately, in the same run. Reported: time to first byte and
 * throughput, medians, through the proxy against direct.
 * @module
 */

import { UexecClient } from "../client.ts";
import { log } from "../log.ts";
import { row } from "../report.ts";
import { SH } from "../sessions.ts";
import { summarize } from "../stats.ts";
import { connect, type Context, type Outcome, startServer } from "../workload.ts";

const WORKLOAD = "egress proxy: 100 MB download";
const NAME = "origin.bench.test";
const RUNS = 5;

/** An HTTP origin that answers every request with `bytes` bytes, as fast as loopback takes. */
function origin(bytes: number) {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const block = new Uint8Array(1024 * 1024).fill(0x61);
  const serve = async (conn: Deno.TcpConn) => {
    try {
      const buf = new Uint8Array(16 * 1024);
      let head = "";
      while (!head.includes("\r\n\r\n")) {
        const n = await conn.read(buf);
        if (n === null) return;
        head += new TextDecoder().decode(buf.subarray(0, n));
      }
      await conn.write(new TextEncoder().encode(
        `HTTP/1.1 200 OK\r\nContent-Length: ${bytes}\r\nConnection: close\r\n\r\n`,
      ));
      for (let left = bytes; left > 0;) {
        const n = await conn.write(block.subarray(0, Math.min(left, block.length)));
        left -= n;
      }
    } catch {
      // The client went away.
    } finally {
      conn.close();
    }
  };
  (async () => {
    for await (const conn of listener) serve(conn);
  })().catch(() => {});
  return { port: listener.addr.port, close: () => listener.close() };
}

/** One download by curl in a session; its time to first byte (ms) and speed (bytes/s). */
async function download(
  client: UexecClient,
  url: string,
  bytes: number,
  profile: string,
): Promise<{ ttfbMs: number; bytesPerSecond: number }> {
  const res = await client.exec({
    ...SH,
    cmd:
      `curl -sS -o /dev/null -w '%{time_starttransfer} %{speed_download} %{size_download}' ${url}`,
    tty: false,
    yield_time_ms: 30_000,
    profile,
  });
  const [ttfb, speed, size] = res.output.trim().split(" ").map(Number);
  if (res.exit_code !== 0 || size !== bytes) {
    throw new Error(`${profile}: download failed: ${res.output.slice(0, 300)}`);
  }
  return { ttfbMs: ttfb * 1000, bytesPerSecond: speed };
}

export async function egressProxy(ctx: Context): Promise<Outcome> {
  const bytes = ctx.sizes.throughputBytes >= 50_000_000 ? 100_000_000 : 5_000_000;
  const web = origin(bytes);
  const hosts = await Deno.makeTempFile({ prefix: "uexec-bench-hosts-" });
  try {
    await Deno.writeTextFile(hosts, `127.0.0.1 ${NAME}\n`);
    await using server = await startServer(ctx, {
      UEXEC_EGRESS_HOSTS: hosts,
      UEXEC_EGRESS_ALLOW: NAME,
      UEXEC_EGRESS_ALLOW_PRIVATE: "127.0.0.1/32",
      UEXEC_HISTORY: "off",
    });
    const client = connect(ctx, server);
    const proxied = { ttfb: [] as number[], speed: [] as number[] };
    const direct = { ttfb: [] as number[], speed: [] as number[] };
    log(`curl ${bytes / 1e6} MB through the egress proxy and directly, alternately, x${RUNS}`);
    // A first download through each warms the domain's worker and listener (not measured).
    await download(client, `http://${NAME}:${web.port}/`, bytes, "workspace-write-egress");
    for (let i = 0; i < RUNS; i++) {
      const p = await download(
        client,
        `http://${NAME}:${web.port}/`,
        bytes,
        "workspace-write-egress",
      );
      const d = await download(client, `http://127.0.0.1:${web.port}/`, bytes, "full-access");
      proxied.ttfb.push(p.ttfbMs);
      proxied.speed.push(p.bytesPerSecond);
      direct.ttfb.push(d.ttfbMs);
      direct.speed.push(d.bytesPerSecond);
    }
    const median = (xs: number[]) => summarize(xs).p50;
    const ttfbProxy = median(proxied.ttfb);
    const ttfbDirect = median(direct.ttfb);
    const mbps = (xs: number[]) => Math.round(median(xs) / 1e6);
    return {
      rows: [
        row({
          workload: WORKLOAD,
          metric: "time to first byte, added by the proxy (median)",
          unit: "ms",
          uexec: Math.round((ttfbProxy - ttfbDirect) * 100) / 100,
          goal: { op: "<=", value: 1, text: "<= +1 ms" },
          note: `direct ${ttfbDirect.toFixed(2)} ms, through the proxy ${ttfbProxy.toFixed(2)} ms`,
        }),
        row({
          workload: WORKLOAD,
          metric: "throughput through the proxy (median)",
          unit: "MB/s",
          uexec: mbps(proxied.speed),
          baseline: { value: mbps(direct.speed), label: "direct" },
          goal: { op: ">=", value: 0.8, on: "ratio", text: ">= 0.8x direct" },
        }),
      ],
      details: { bytes, runs: RUNS, proxied, direct },
    };
  } finally {
    web.close();
    await Deno.remove(hosts);
  }
}
