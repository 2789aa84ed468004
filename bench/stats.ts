/**
 * Latency summaries: nearest-rank percentiles over millisecond samples, the same method the
 * Codex peer client uses, so the two sides' p50/p99 are comparable.
 * @module
 */

/** Summary of a set of millisecond samples. */
export interface Summary {
  n: number;
  p50: number;
  p99: number;
  min: number;
  max: number;
  mean: number;
}

/** The nearest-rank percentile `p` (0..100) of already sorted samples. */
function nearestRank(sorted: number[], p: number): number {
  const i = Math.ceil((p / 100) * sorted.length) - 1;
  return sorted[Math.min(sorted.length - 1, Math.max(0, i))];
}

/** Rounds to microseconds (milliseconds with three decimals). */
function round3(x: number): number {
  return Math.round(x * 1000) / 1000;
}

/** Summarises millisecond samples; throws on an empty set (a workload that measured nothing). */
export function summarize(samples: number[]): Summary {
  if (samples.length === 0) throw new Error("no samples");
  const s = [...samples].sort((a, b) => a - b);
  return {
    n: s.length,
    p50: round3(nearestRank(s, 50)),
    p99: round3(nearestRank(s, 99)),
    min: round3(s[0]),
    max: round3(s[s.length - 1]),
    mean: round3(s.reduce((a, b) => a + b, 0) / s.length),
  };
}
