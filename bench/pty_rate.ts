/**
 * PTY throughput through uexec, as the bench's workloads measure it: `head -c N /dev/zero |
 * base64` in one session, from the exec to the answer carrying its exit, and the same beside a
 * screen session flooding the same server. It only measures: the rows are the workloads'.
 *
 * @module
 */

import type { UexecClient } from "./client.ts";
import { closeSessions, SH } from "./sessions.ts";

/** Bytes `base64` prints for `n` input bytes through a PTY: 76-column lines ending in CRLF. */
function base64Bytes(n: number): number {
  const chars = 4 * Math.ceil(n / 3);
  return chars + 2 * Math.ceil(chars / 76);
}

/** MB/s of `head -c bytes /dev/zero | base64` in a raw (or `screen`) session, exec to exit. */
export async function ptyRate(client: UexecClient, bytes: number, screen = false): Promise<number> {
  const t0 = performance.now();
  let res = await client.exec({
    ...SH,
    cmd: `head -c ${bytes} /dev/zero | base64`,
    screen,
    yield_time_ms: 1000,
    max_output_tokens: 100,
  });
  while (res.exit_code === undefined) {
    res = await client.write({
      session_id: res.session_id!,
      chars: "",
      yield_time_ms: 30_000,
      max_output_tokens: 100,
    });
  }
  const seconds = (performance.now() - t0) / 1000;
  if (res.exit_code !== 0) throw new Error(`throughput run exited ${res.exit_code}`);
  return base64Bytes(bytes) / 1e6 / seconds;
}

/**
 * {@link ptyRate} of a raw session while a screen session floods 4x as many bytes on the same
 * server: the screen worker's parsing and the screen's backpressure must leave it its share.
 */
export async function besideScreenFlood(client: UexecClient, bytes: number): Promise<number> {
  const flood = await client.exec({
    ...SH,
    cmd: `head -c ${bytes * 4} /dev/zero | base64`,
    screen: true,
    yield_time_ms: 250,
    max_output_tokens: 100,
  });
  if (flood.session_id === undefined) throw new Error("the screen flood ended at once");
  try {
    return await ptyRate(client, bytes);
  } finally {
    await closeSessions(client, [flood.session_id]);
  }
}
