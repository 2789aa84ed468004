/**
 * Same-run baselines without uexec: the raw cost of spawning `sh -c true` from Deno, and the
 * kernel PTY limit as `script -qfc "<cmd>" /dev/null > /dev/null` moves it.
 * @module
 */

import { summarize, type Summary } from "./stats.ts";

/** Spawns `sh -c true` directly with Deno.Command `n` times (after 10 warm-ups): ms per spawn-to-exit. */
export async function rawSpawn(n: number): Promise<Summary> {
  const samples: number[] = [];
  const command = new Deno.Command("sh", {
    args: ["-c", "true"],
    stdin: "null",
    stdout: "null",
    stderr: "null",
  });
  for (let i = 0; i < n + 10; i++) {
    const t0 = performance.now();
    const status = await command.spawn().status;
    const ms = performance.now() - t0;
    if (!status.success) throw new Error(`sh -c true exited ${status.code}`);
    if (i >= 10) samples.push(ms);
  }
  return summarize(samples);
}

function script(cmd: string, stdout: "null" | "piped"): Deno.ChildProcess {
  return new Deno.Command("script", {
    args: ["-qfc", cmd, "/dev/null"],
    stdin: "null",
    stdout,
    stderr: "null",
  }).spawn();
}

/** Seconds `script -qfc cmd /dev/null > /dev/null` takes. */
export async function scriptSeconds(cmd: string): Promise<number> {
  const t0 = performance.now();
  const status = await script(cmd, "null").status;
  if (!status.success) throw new Error(`script exited ${status.code}`);
  return (performance.now() - t0) / 1000;
}

/** Bytes that come out of the PTY master for `cmd` under `script` (CRLF translation included). */
export async function scriptBytes(cmd: string): Promise<number> {
  const child = script(cmd, "piped");
  let bytes = 0;
  for await (const chunk of child.stdout) bytes += chunk.length;
  const status = await child.status;
  if (!status.success) throw new Error(`script exited ${status.code}`);
  return bytes;
}
