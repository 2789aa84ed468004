/**
 * Registry of everything the bench started (servers, the peer): each registers a stop function
 * and removes it once stopped, so a failure, a time-out or Ctrl-C still stops what is left.
 * @module
 */

import { log } from "./log.ts";

const stops = new Set<() => Promise<void>>();

/** Registers `stop`; returns a function that unregisters it. */
export function register(stop: () => Promise<void>): () => void {
  stops.add(stop);
  return () => stops.delete(stop);
}

/** Runs every registered stop function (newest first), logging failures. */
export async function stopAll(): Promise<void> {
  for (const stop of [...stops].reverse()) {
    stops.delete(stop);
    try {
      await stop();
    } catch (e) {
      log(`cleanup failed: ${e instanceof Error ? e.message : e}`);
    }
  }
}

/** On SIGINT/SIGTERM: stop everything and exit with 128+signal. */
export function stopOnSignals(): void {
  for (const [signal, code] of [["SIGINT", 130], ["SIGTERM", 143]] as const) {
    Deno.addSignalListener(signal, () => {
      log(`${signal}: stopping everything the bench started`);
      stopAll().finally(() => Deno.exit(code));
    });
  }
}
