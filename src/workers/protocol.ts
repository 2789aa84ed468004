/**
 * Messages between the main thread and spawner workers. A worker is bound to one sandbox domain:
 * it may be told once to restrict its own thread, and then only spawns. An unrestricted root
 * worker may instead serve as the reaper, killing what is left of a uid before it is reused and
 * taking back the files it owns.
 *
 * Types only; nothing here may run code.
 *
 * @module
 */

import type { SpawnSpec } from "../pty/spawn.ts";
import type { Restriction } from "../sandbox/enforce/apply.ts";
import type { TakeBack } from "../sandbox/identity/reaper.ts";

/**
 * A request to a spawner worker. `id` pairs it with its reply. A spawn's `started` is shared
 * memory where the worker stores the child's pid and terminal master (-1: none) as soon as they
 * exist, so the main thread knows them even if the worker dies before it answers.
 */
export type WorkerRequest =
  | {
    id: number;
    type: "spawn";
    spec: SpawnSpec;
    started: Int32Array;
    /**
     * The worker's spare terminal master (-1: none), shared for the worker's life: the worker
     * opens one after a spawn's reply and takes it (`Atomics.exchange`) for the next spawn; the
     * main thread takes and closes it when it stops the worker (see `pty/spawn.ts` SparePty).
     */
    spare: Int32Array;
    /** The session's terminal slot (terminal_slots.ts), joined just around the spawn. */
    slot?: number;
  }
  | ({ id: number; type: "restrict" } & Restriction)
  | { id: number; type: "reap"; uids: number[]; takeBack?: TakeBack };

/** A worker's reply. */
export type WorkerReply =
  | { type: "ready" }
  | { id: number; type: "spawned"; pid: number; master?: number; unplaced?: boolean }
  | {
    id: number;
    type: "restricted";
    /** The descriptors of its domain's and its terminal slots' mount namespaces. */
    namespaces?: number[];
    /** How many terminal slots it has. */
    slots?: number;
    /** The worker's network namespace, when its policy has egress rules (see apply.ts). */
    netns?: number;
  }
  | { id: number; type: "reaped" }
  | {
    id: number;
    type: "failed";
    kind: "spawn" | "sandbox" | "internal";
    code?: number;
    message: string;
  };
