/**
 * Output no one polls: a session prints 1 GiB and then `TAIL-OK` while nobody calls; the
 * server's resident memory is sampled throughout, and the next poll must still end with the
 * tail (the head+tail buffer drops the middle, never the end).
 * @module
 */

import { log } from "../log.ts";
import { MARKER_POLL_MS, waitForMarker } from "../marker.ts";
import { row } from "../report.ts";
import { closeSessions, SH } from "../sessions.ts";
import { connect, type Context, type Outcome, startServer } from "../workload.ts";

const PROGRESS_MS = 5_000;

export async function unpolledFlood(ctx: Context): Promise<Outcome> {
  const bytes = ctx.sizes.floodBytes;
  const workload = `${bytes / 1024 ** 2} MiB of output no one polls`;
  const done = `${ctx.workspace}/flood-done`;
  const cmd = `head -c ${bytes} /dev/zero | tr '\\0' a; echo TAIL-OK; touch ${done}`;
  await using server = await startServer(ctx);
  const client = connect(ctx, server);
  await client.exec({ ...SH, cmd: "echo warm" });
  const before = server.memory();
  log(`\`${cmd}\` with nobody polling (server RSS ${before.rssMiB} MiB)`);

  const t0 = performance.now();
  const first = await client.exec({ ...SH, cmd, yield_time_ms: 250 });
  const id = first.session_id;
  if (id === undefined) throw new Error(`flood ended within its first call: ${first.exit_code}`);
  try {
    let peakMiB = before.rssMiB;
    let lastLog = performance.now();
    // The command touches `done` after it wrote the tail; until then nobody calls the server.
    await waitForMarker(done, ctx.signal, () => {
      const rss = server.memory().rssMiB;
      peakMiB = Math.max(peakMiB, rss);
      if (performance.now() - lastLog >= PROGRESS_MS) {
        lastLog = performance.now();
        log(`  ${((lastLog - t0) / 1000).toFixed(0)} s, server RSS ${rss} MiB`);
      }
    });
    const producedS = (performance.now() - t0) / 1000;
    const tp = performance.now();
    const res = await client.write({ session_id: id, chars: "", yield_time_ms: 30_000 });
    const pollMs = performance.now() - tp;
    const after = server.memory();
    peakMiB = Math.max(peakMiB, after.rssMiB);
    const tailOk = res.exit_code === 0 && res.output.trimEnd().endsWith("TAIL-OK");
    const growth = Math.round((peakMiB - before.rssMiB) * 10) / 10;
    log(
      `produced in ${producedS.toFixed(1)} s; poll took ${
        pollMs.toFixed(1)
      } ms; tail ok: ${tailOk}`,
    );
    return {
      rows: [
        row({
          workload,
          metric: "server RSS growth (peak)",
          unit: "MiB",
          uexec: growth,
          goal: { op: "<=", value: 64, text: "<= 64 MiB" },
          note: `RSS sampled every ${MARKER_POLL_MS} ms from /proc/<pid>/status; ` +
            `before ${before.rssMiB} MiB, peak ${peakMiB} MiB, VmHWM ${after.hwmMiB} MiB; ` +
            `output took ${producedS.toFixed(1)} s through the PTY`,
        }),
        row({
          workload,
          metric: "tail intact at next poll",
          unit: "",
          uexec: tailOk,
          goal: { op: "==", value: true, text: "yes" },
          ...(tailOk ? {} : { note: `poll answer ended ${JSON.stringify(res.output.slice(-80))}` }),
        }),
      ],
      details: {
        command: cmd,
        memory_before: before,
        memory_after: after,
        peak_rss_mib: peakMiB,
        produced_seconds: producedS,
        poll_ms: pollMs,
        poll_exit_code: res.exit_code ?? null,
        poll_truncated: res.truncated,
        poll_original_token_count: res.original_token_count,
        poll_output_tail: res.output.slice(-200),
      },
    };
  } finally {
    await closeSessions(client, [id]);
  }
}
