/**
 * Progress lines on stderr (stdout carries only the final table), and a ticker that reports
 * long-running loops at most every few seconds.
 * @module
 */

const encoder = new TextEncoder();
const t0 = performance.now();

/** Writes one `[bench +12.3s] message` line to stderr. */
export function log(message: string): void {
  const secs = ((performance.now() - t0) / 1000).toFixed(1);
  Deno.stderr.writeSync(encoder.encode(`[bench +${secs}s] ${message}\n`));
}

/** Returns a function that logs `label done/total` when at least `everyMs` passed since the last line. */
export function ticker(label: string, total: number, everyMs = 3000): (done: number) => void {
  let last = performance.now();
  return (done) => {
    const now = performance.now();
    if (now - last >= everyMs) {
      last = now;
      log(`  ${label}: ${done}/${total}`);
    }
  };
}
