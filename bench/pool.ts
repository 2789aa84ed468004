/**
 * Bounded concurrency: runs a task for each index with at most `width` in flight.
 * @module
 */

/** Runs `task(0..count-1)` with at most `width` running at once; returns results in order. */
export async function inParallel<T>(
  count: number,
  width: number,
  task: (i: number) => Promise<T>,
): Promise<T[]> {
  const results = new Array<T>(count);
  let next = 0;
  const lane = async () => {
    while (next < count) {
      const i = next++;
      results[i] = await task(i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(width, count) }, lane));
  return results;
}
