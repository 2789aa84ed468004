/**
 * Marker files: a command `touch`es one when it finished writing, so the bench can wait for it
 * without calling the server (which would collect the output it is waiting on).
 * @module
 */

import { sleep } from "./time.ts";

/** How often the marker is looked for (and `onTick` called). */
export const MARKER_POLL_MS = 10;

/** Waits until `path` exists, calling `onTick` between looks; throws when `signal` aborts. */
export async function waitForMarker(
  path: string,
  signal: AbortSignal,
  onTick: () => void = () => {},
): Promise<void> {
  for (;;) {
    try {
      Deno.statSync(path);
      return;
    } catch {
      signal.throwIfAborted();
      onTick();
      await sleep(MARKER_POLL_MS);
    }
  }
}
