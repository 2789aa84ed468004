/**
 * Soak: 200 `cat` sessions x 20 round trips at once, every byte checked: each session's output
 * over all its round trips must be exactly the concatenation of what it was sent, echoed by the
 * terminal and by `cat` (nothing lost, nothing reordered, nothing from another session). The
 * whole pass runs twice on one server; RSS is read before, while the sessions live, and after
 * each pass's deletions (RSS alone cannot tell a leak from garbage V8 has not collected yet:
 * docs/performance.md gives the heap measured after forced full GCs).
 * @module
 */

import { log } from "../log.ts";
import { inParallel } from "../pool.ts";
import { row } from "../report.ts";
import { closeSessions, openCat, SH } from "../sessions.ts";
import { connect, type Context, type Outcome, startServer } from "../workload.ts";

/** Sessions opened at once while setting up. */
const OPEN_WIDTH = 10;

/** One pass: `n` sessions opened, `rounds` checked round trips each, then deleted. */
async function pass(
  client: ReturnType<typeof connect>,
  n: number,
  rounds: number,
  rss: () => number,
): Promise<{ mismatched: number; during: number }> {
  const ids: number[] = [];
  let during = 0;
  let mismatched = 0;
  try {
    await inParallel(n, OPEN_WIDTH, async () => ids.push(await openCat(client)));
    await Promise.all(ids.map(async (id, si) => {
      let got = "";
      let want = "";
      for (let r = 0; r < rounds; r++) {
        const marker = `s${si}r${r}-${crypto.randomUUID()}`;
        want += `${marker}\r\n${marker}\r\n`;
        const res = await client.write({
          session_id: id,
          chars: `${marker}\n`,
          until: `${marker}\\r\\n${marker}\\r\\n`,
          yield_time_ms: 10_000,
        });
        got += res.output;
      }
      if (got !== want) mismatched++;
    }));
    during = rss();
  } finally {
    await closeSessions(client, ids);
  }
  // A settled exec after the deletions, so the reading follows the server's own clean-up.
  await client.exec({ ...SH, cmd: "true" });
  return { mismatched, during };
}

export async function soak(ctx: Context): Promise<Outcome> {
  const n = ctx.sizes.soakSessions;
  const rounds = ctx.sizes.concurrentRounds;
  const workload = `soak: ${n} cat sessions x ${rounds} round trips, twice`;
  await using server = await startServer(ctx);
  const client = connect(ctx, server);
  const rss = () => server.memory().rssMiB;
  const before = rss();
  log(`${n} sessions x ${rounds} checked round trips, then deleted; two passes`);
  const first = await pass(client, n, rounds, rss);
  const afterFirst = rss();
  const second = await pass(client, n, rounds, rss);
  const afterSecond = rss();
  log(
    `RSS before ${before} MiB, during ${first.during}/${second.during} MiB, ` +
      `after ${afterFirst}/${afterSecond} MiB`,
  );
  return {
    rows: [
      row({
        workload,
        metric: "sessions with lost or reordered bytes",
        unit: "",
        uexec: first.mismatched + second.mismatched,
        goal: { op: "<=", value: 0, text: "0" },
      }),
      row({
        workload,
        metric: "server RSS while all live",
        unit: "MiB",
        uexec: first.during,
        baseline: { value: before, label: "before" },
      }),
      row({
        workload,
        metric: "server RSS after the 2nd pass",
        unit: "MiB",
        uexec: afterSecond,
        baseline: { value: afterFirst, label: "after the 1st" },
        note: "RSS includes garbage V8 has not collected yet; after a forced full GC the heap " +
          "in use is flat from pass to pass (see docs/performance.md)",
      }),
    ],
    details: {
      sessions: n,
      rounds,
      rss_mib: { before, during: [first.during, second.during], after: [afterFirst, afterSecond] },
    },
  };
}
