/**
 * Timer helpers: a plain sleep, and waiting for a promise with an upper bound.
 * @module
 */

/** Resolves after `ms` milliseconds. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Returned by `within` when the time ran out first. */
export const TIMED_OUT: unique symbol = Symbol("timed out");

/** `promise`'s value, or TIMED_OUT if it takes longer than `ms`; the timer never outlives it. */
export async function within<T>(promise: Promise<T>, ms: number): Promise<T | typeof TIMED_OUT> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<typeof TIMED_OUT>((resolve) => timer = setTimeout(() => resolve(TIMED_OUT), ms)),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
