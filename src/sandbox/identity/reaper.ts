/**
 * The reaper as the sandbox sees it: what kills whatever still runs as session uids before they
 * are handed out again, and takes back the files they own. The sandbox declares only this
 * interface; the composition root (`src/runtime.ts`) hands in the real one (an unrestricted root
 * spawner worker, `src/workers/pool.ts`), so that `sandbox/` never imports `workers/`.
 *
 * Types only; nothing here may run code.
 *
 * @module
 */

/** Files to take back from uids handed out before (uid_files.ts), after their processes died. */
export interface TakeBack {
  uids: number[];
  /** Who gets them: the range's resting uid. */
  owner: number;
  /** Where to look: the workspace and the workdirs outside it that sessions used. */
  roots: string[];
}

/** Kills what runs as session uids, then takes their files back. */
export interface Reaper {
  /** Kill every process of `uids` (then take back `takeBack`'s files); rejects if it cannot. */
  reap(uids: number[], takeBack?: TakeBack): Promise<void>;
  /** Stop it (server shutdown). */
  terminate(): void;
}
