/**
 * PTY throughput: `head -c N /dev/zero | base64` in a uexec PTY session, drained by polls until
 * the exit is reported, against the same command under `script` (the kernel PTY limit with a
 * minimal reader) measured in the same run, the runs of both interleaved.
 * @module
 */

import { scriptBytes, scriptSeconds } from "../baselines.ts";
import { type ExecResponse, UexecClient } from "../client.ts";
import { log } from "../log.ts";
import { row } from "../report.ts";
import type { UexecServer } from "../server.ts";
import { SH } from "../sessions.ts";
import { connect, type Context, type Outcome, peerFigure, startServer } from "../workload.ts";

/** One uexec run: seconds from exec_command to the answer that reports the exit, polls, server CPU. */
async function uexecRun(
  server: UexecServer,
  client: UexecClient,
  cmd: string,
): Promise<{ seconds: number; polls: number; server_cpu_s: number }> {
  const cpu0 = server.cpuSeconds();
  const t0 = performance.now();
  let res: ExecResponse = await client.exec({ ...SH, cmd, yield_time_ms: 1000 });
  let polls = 0;
  while (res.exit_code === undefined) {
    if (res.session_id === undefined) throw new Error("no exit code and no session id");
    polls++;
    res = await client.write({ session_id: res.session_id, chars: "", yield_time_ms: 30_000 });
  }
  const seconds = (performance.now() - t0) / 1000;
  // base64 of zeros ends in "AAA=" for a length of 3k+2, "AA==" for 3k+1, "AAAA" for 3k.
  if (res.exit_code !== 0 || !/A[A=]{3}\s*$/.test(res.output)) {
    throw new Error(
      `throughput run ended badly: exit ${res.exit_code}, tail ` +
        JSON.stringify(res.output.slice(-80)),
    );
  }
  return { seconds, polls, server_cpu_s: server.cpuSeconds() - cpu0 };
}

export async function ptyThroughput(ctx: Context): Promise<Outcome> {
  const cmd = `head -c ${ctx.sizes.throughputBytes} /dev/zero | base64`;
  await using server = await startServer(ctx);
  const client = connect(ctx, server);

  log(`script baseline: counting the bytes of \`${cmd}\` through a PTY`);
  const bytes = await scriptBytes(cmd);
  // A fresh server's first flood pays once for what later ones find ready (about 70 ms more
  // server CPU on a 5 MB flood: code compiled, what is set up on first use), as script's first
  // run did for its pages in the count above.
  log("uexec warm-up: a tenth of the bytes, untimed");
  await uexecRun(
    server,
    client,
    `head -c ${Math.ceil(ctx.sizes.throughputBytes / 10)} /dev/zero | base64`,
  );
  // Interleaved pairs, the order flipped every pair (script, uexec, uexec, script, ...): the load
  // of the other work on the host drifts by 2x within seconds, and each side's best run should
  // have had the same chances of a quiet moment.
  const runs = ctx.sizes.throughputRuns;
  const scriptRuns: number[] = [];
  const uexecRuns: Awaited<ReturnType<typeof uexecRun>>[] = [];
  const scriptRun = async (i: number) => {
    log(`script baseline run ${i + 1}/${runs} (${(bytes / 1e6).toFixed(1)} MB)`);
    scriptRuns.push(await scriptSeconds(cmd));
  };
  const uexec = async (i: number) => {
    log(`uexec run ${i + 1}/${runs}`);
    uexecRuns.push(await uexecRun(server, client, cmd));
  };
  for (let i = 0; i < runs; i++) {
    const pair = i % 2 === 0 ? [scriptRun, uexec] : [uexec, scriptRun];
    for (const run of pair) await run(i);
  }

  const mbps = (secs: number) => Math.round((bytes / 1e6 / secs) * 10) / 10;
  const best = Math.min(...uexecRuns.map((r) => r.seconds));
  const scriptBest = Math.min(...scriptRuns);
  return {
    rows: [row({
      workload: `PTY throughput, base64 of ${ctx.sizes.throughputBytes / 1e6} MB of zeros`,
      metric: "MB/s",
      unit: "MB/s",
      uexec: mbps(best),
      baseline: { value: mbps(scriptBest), label: "script" },
      peer: peerFigure(ctx, (p) => p.throughputMBps),
      goal: { op: ">=", value: 1, on: "ratio", text: ">= 1.0x script" },
      note: `${(bytes / 1e6).toFixed(1)} MB through the PTY (counted under script, CRLF ` +
        `included); best of ${uexecRuns.length} uexec run(s) and of ${scriptRuns.length} ` +
        "script run(s), interleaved",
    })],
    details: {
      command: cmd,
      pty_bytes: bytes,
      script_seconds: scriptRuns,
      uexec_runs: uexecRuns,
    },
  };
}
