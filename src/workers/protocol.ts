/**
 * Messages between the main thread and spawner workers. A worker is bound to one sandbox domain:
 * it may be told once to restrict its own thread, and then only spawns. An unrestricted root
 * worker may instead serve as the reaper, killing what is left of a uid before it is reused.
 *
 * Types only; nothing here may run code.
 *
 * @module
 */

import type { SpawnSpec } from "../pty/spawn.ts";
import type { ResolvedPolicy } from "../sandbox/policy.ts";
import type { AccountFiles } from "../sandbox/accounts.ts";

/** How a domain's worker restricts itself. */
export interface Restriction {
  policy: ResolvedPolicy;
  /** The uid the worker's thread rests as between spawns (a root server only). */
  uid?: number;
  /** The group its children run in (a root server only). */
  gid?: number;
  /** The account files its children see (a root server only). */
  accounts?: AccountFiles;
}

/**
 * A request to a spawner worker. `id` pairs it with its reply. A spawn's `started` is shared
 * memory where the worker stores the child's pid and terminal master (-1: none) as soon as they
 * exist, so the main thread knows them even if the worker dies before it answers.
 */
export type WorkerRequest =
  | { id: number; type: "spawn"; spec: SpawnSpec; started: Int32Array }
  | ({ id: number; type: "restrict" } & Restriction)
  | { id: number; type: "reap"; uids: number[] };

/** A worker's reply. */
export type WorkerReply =
  | { type: "ready" }
  | { id: number; type: "spawned"; pid: number; master?: number; unplaced?: boolean }
  /** `netns`: the worker's network namespace, when its policy has egress rules (see apply.ts). */
  | { id: number; type: "restricted"; netns?: number }
  | { id: number; type: "reaped" }
  | {
    id: number;
    type: "failed";
    kind: "spawn" | "sandbox" | "internal";
    code?: number;
    message: string;
  };
