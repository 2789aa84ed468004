/**
 * Session moves shared by the workloads: run commands under plain `sh -c` (the raw-spawn
 * baseline's shell), open a `cat` session without waiting out a yield, time one write -> echo
 * round trip, close sessions.
 * @module
 */

import type { UexecClient, WriteRequest } from "./client.ts";
import { inParallel } from "./pool.ts";

/** DELETEs sent at once when closing many sessions. */
const CLOSE_WIDTH = 10;

/** `sh -c`, no login shell: what the raw-spawn baseline runs, without the user's dotfiles. */
export const SH = { shell: "/bin/sh", login: false } as const;

/** Opens an interactive `cat` in a PTY; `until` returns as soon as it is up. Returns its id. */
export async function openCat(client: UexecClient): Promise<number> {
  const res = await client.exec({
    ...SH,
    cmd: "echo cat-ready; exec cat",
    until: "cat-ready",
    yield_time_ms: 10_000,
  });
  if (res.session_id === undefined) {
    throw new Error(`cat session did not stay open: ${JSON.stringify(res).slice(0, 300)}`);
  }
  return res.session_id;
}

/** The regex that matches once `marker` came back twice: the PTY's echo, then cat's output. */
function twice(marker: string): string {
  return `${marker}[\\s\\S]*${marker}`;
}

/**
 * Writes `marker\n` to a cat session and waits (with `until`) until cat echoed it back: the full
 * round trip, not just the line discipline's echo. Returns ms, or throws if it did not come back.
 */
export async function roundTrip(
  client: UexecClient,
  sessionId: number,
  marker: string,
  extra: Partial<WriteRequest> = {},
): Promise<number> {
  const t0 = performance.now();
  const res = await client.write({
    session_id: sessionId,
    chars: `${marker}\n`,
    until: twice(marker),
    yield_time_ms: 10_000,
    ...extra,
  });
  const ms = performance.now() - t0;
  if (res.output.split(marker).length < 3) {
    throw new Error(`round trip ${marker} incomplete: ${JSON.stringify(res).slice(0, 300)}`);
  }
  return ms;
}

/**
 * DELETEs sessions. Skipped once the workload was aborted: its server is stopped then, which
 * ends its sessions.
 */
export async function closeSessions(client: UexecClient, ids: number[]): Promise<void> {
  if (client.signal.aborted) return;
  await inParallel(ids.length, CLOSE_WIDTH, (i) => client.kill(ids[i]));
}
