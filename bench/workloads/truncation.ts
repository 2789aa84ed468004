/**
 * Truncation cost: a session's output of 1 MiB (`seq`, under pipes so no CRs are added) waits in
 * its buffer after the process exited; one poll then collects it and truncates it to 10,000
 * tokens. The same poll of a 3-byte output is the baseline, and the difference of the medians
 * is the server-side cost of counting and truncating.
 * @module
 */

import { type ExecResponse, UexecClient } from "../client.ts";
import { log } from "../log.ts";
import { waitForMarker } from "../marker.ts";
import { row } from "../report.ts";
import { SH } from "../sessions.ts";
import { summarize } from "../stats.ts";
import { sleep } from "../time.ts";
import { connect, type Context, type Outcome, startServer } from "../workload.ts";

const WORKLOAD = "truncate 1 MiB of output to 10,000 tokens";
/** `seq 1 165668` prints 1,048,571 bytes: 1 MiB less 5, so the 1 MiB buffer drops nothing. */
const BIG = "seq 1 165668";
const TINY = "echo hi";
const MAX_TOKENS = 10_000;

/** Time for a poll to collect (and truncate) the buffered output of an exited `gen`. */
async function pollAfterExit(
  ctx: Context,
  client: UexecClient,
  gen: string,
  run: string,
): Promise<{ ms: number; res: ExecResponse }> {
  const done = `${ctx.workspace}/trunc-${run}`;
  // The sleep outlasts exec_command's 250 ms yield, so that call returns before any output.
  const first = await client.exec({
    ...SH,
    cmd: `sleep 0.4; ${gen}; touch ${done}`,
    tty: false,
    yield_time_ms: 250,
  });
  if (first.session_id === undefined || first.output !== "") {
    throw new Error(`${gen}: first call should return no output and a session`);
  }
  await waitForMarker(done, ctx.signal);
  // Let the shell exit after touch, so the poll does not wait for the process.
  await sleep(50);
  const t0 = performance.now();
  const res = await client.write({
    session_id: first.session_id,
    chars: "",
    yield_time_ms: 5_000,
    max_output_tokens: MAX_TOKENS,
  });
  const ms = performance.now() - t0;
  if (res.exit_code !== 0) throw new Error(`${gen}: poll did not report the exit`);
  return { ms, res };
}

export async function truncation(ctx: Context): Promise<Outcome> {
  const n = ctx.sizes.truncationRuns;
  await using server = await startServer(ctx);
  const client = connect(ctx, server);
  const big: number[] = [];
  const tiny: number[] = [];
  const bigWall: number[] = [];
  const tinyWall: number[] = [];
  let sample: ExecResponse | null = null;
  log(
    `polling an exited session's 1 MiB output (max_output_tokens ${MAX_TOKENS}) vs 3 bytes, x${n}`,
  );
  for (let i = 0; i < n; i++) {
    const b = await pollAfterExit(ctx, client, BIG, `big${i}`);
    const t = await pollAfterExit(ctx, client, TINY, `tiny${i}`);
    if (!b.res.truncated || !b.res.output.includes("tokens truncated")) {
      throw new Error(`1 MiB output came back untruncated: ${b.res.output.length} chars`);
    }
    if (!t.res.output.includes("hi")) throw new Error("tiny output lost");
    big.push(b.ms);
    tiny.push(t.ms);
    bigWall.push(b.res.wall_time_seconds * 1000);
    tinyWall.push(t.res.wall_time_seconds * 1000);
    sample = b.res;
  }
  const diff = (a: number[], b: number[]) =>
    Math.round((summarize(a).p50 - summarize(b).p50) * 1000) / 1000;
  const serverDiff = diff(bigWall, tinyWall);
  return {
    rows: [row({
      workload: WORKLOAD,
      metric: "server-side time",
      unit: "ms",
      uexec: diff(big, tiny),
      baseline: { value: summarize(tiny).p50, label: "3-byte poll" },
      goal: { op: "<=", value: 20, text: "<= 20 ms" },
      note: `median HTTP time of a poll that collects 1,048,571 bytes of \`${BIG}\` from an ` +
        `exited session minus that of a 3-byte one (${n} each); wall_time_seconds gives ` +
        `${serverDiff} ms for the same difference`,
    })],
    details: {
      big_poll_ms: summarize(big),
      tiny_poll_ms: summarize(tiny),
      big_wall_time_ms: summarize(bigWall),
      tiny_wall_time_ms: summarize(tinyWall),
      big_original_token_count: sample?.original_token_count,
      big_output_chars: sample?.output.length,
      big_output_head: sample?.output.slice(0, 120),
    },
  };
}
