/**
 * The egress proxy's cost: `curl` downloads 100 MB (5 MB with --quick) from an origin on loopback
 * (bench/origin.ts, a process of its own), once through uexec's proxy (a session under
 * workspace-write-egress, the origin's name mapped by UEXEC_EGRESS_HOSTS and its address let
 * through by UEXEC_EGRESS_ALLOW_PRIVATE) and once directly (a full-access session on the host's
 * network, the same curl and origin), alternately, in the same run. Reported: time to first byte
 * and throughput, medians, through the proxy against direct; and what a download costs the API's
 * other users: write_stdin round trips to a `cat` session on a second connection, back to back for
 * as long as each download runs, their p99 beside the downloads through the proxy against beside
 * the same downloads made directly (the proxy relays on its own thread, not the one that serves the
 * API).
 * @module
 */

import { UexecClient } from "../client.ts";
import { log } from "../log.ts";
import { row } from "../report.ts";
import { closeSessions, openCat, roundTrip, SH } from "../sessions.ts";
import { summarize } from "../stats.ts";
import { connect, type Context, type Outcome, startServer } from "../workload.ts";

const WORKLOAD = "egress proxy: 100 MB download";
const NAME = "origin.bench.test";
const RUNS = 5;

/** The origin (bench/origin.ts) in a process of its own, answering every request with `bytes`. */
async function origin(bytes: number) {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-net", new URL("../origin.ts", import.meta.url).pathname, String(bytes)],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const first = await lines.read();
  const port = Number(first.value?.trim());
  if (!(port > 0)) throw new Error(`origin: no port (${JSON.stringify(first.value)})`);
  return {
    port,
    close: async () => {
      await child.stdin.close();
      await lines.cancel();
      await child.status;
    },
  };
}

/** Round trips (ms) to `cat` session `id`, back to back, until `done` settles. */
async function roundTripsDuring(
  client: UexecClient,
  id: number,
  done: Promise<unknown>,
): Promise<number[]> {
  let over = false;
  done.finally(() => over = true).catch(() => {});
  const times: number[] = [];
  for (let i = 0; !over; i++) times.push(await roundTrip(client, id, `e${i}z`));
  return times;
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
  const web = await origin(bytes);
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
    // The API's other user: its own connection, its own session.
    const neighbour = connect(ctx, server);
    const cat = await openCat(neighbour);
    const proxied = { ttfb: [] as number[], speed: [] as number[], beside: [] as number[] };
    const direct = { ttfb: [] as number[], speed: [] as number[], beside: [] as number[] };
    log(`curl ${bytes / 1e6} MB through the egress proxy and directly, alternately, x${RUNS}`);
    // A first download through each warms the domain's worker and listener (not measured).
    await download(client, `http://${NAME}:${web.port}/`, bytes, "workspace-write-egress");
    const sides = [
      [proxied, "workspace-write-egress", `http://${NAME}:${web.port}/`],
      [direct, "full-access", `http://127.0.0.1:${web.port}/`],
    ] as const;
    try {
      // The downloads alone first (the rows of the goals), then again with the
      // neighbour's round trips running (so these do not take the downloads' CPU).
      for (let i = 0; i < RUNS; i++) {
        for (const [into, profile, at] of sides) {
          const { ttfbMs, bytesPerSecond } = await download(client, at, bytes, profile);
          into.ttfb.push(ttfbMs);
          into.speed.push(bytesPerSecond);
        }
      }
      log(`the same downloads again, write_stdin round trips on another session meanwhile`);
      for (let i = 0; i < RUNS; i++) {
        for (const [into, profile, at] of sides) {
          const got = download(client, at, bytes, profile);
          into.beside.push(...await roundTripsDuring(neighbour, cat, got));
          await got;
        }
      }
    } finally {
      await closeSessions(neighbour, [cat]);
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
        row({
          workload: WORKLOAD,
          metric: "write_stdin round trip on another session meanwhile (p99)",
          unit: "ms",
          uexec: summarize(proxied.beside).p99,
          baseline: { value: summarize(direct.beside).p99, label: "beside direct downloads" },
          note: `${proxied.beside.length} and ${direct.beside.length} round trips; p50 ` +
            `${summarize(proxied.beside).p50} ms beside the proxy, ` +
            `${summarize(direct.beside).p50} ms beside direct downloads`,
        }),
      ],
      details: {
        bytes,
        runs: RUNS,
        proxied: { ttfb: proxied.ttfb, speed: proxied.speed, beside: summarize(proxied.beside) },
        direct: { ttfb: direct.ttfb, speed: direct.speed, beside: summarize(direct.beside) },
      },
    };
  } finally {
    await web.close();
    await Deno.remove(hosts);
  }
}
