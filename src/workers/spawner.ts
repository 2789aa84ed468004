/**
 * The spawner worker's entry point. Its thread is the one whose sandbox children inherit: it
 * restricts itself at most once (through synchronous calls only) and then starts children with
 * `posix_spawnp` on this same thread, switched to the session's uid when the server is root,
 * and lets a gated child run once it put it into its cgroups (no trip through the main thread),
 * or starts it inside them where it is given a placement (pty/clone_into_cgroup.ts).
 * Each child of a switching spawner gets a System V IPC namespace of its own (made for it after
 * the previous spawn, see identity.ts freshIpcNamespace), never one another session used.
 * An unrestricted worker may instead reap uids (kill what is left of one before its reuse, and
 * take back the files a uid handed out before owns).
 *
 * It must never spawn before a requested restriction succeeded, never restrict twice, never
 * spawn again once it could not return to the server's own cgroups after a placement, never
 * spawn as its resting uid when it switches uids, never spawn two sessions into one IPC
 * namespace, and never reap once restricted.
 *
 * @module
 */

/// <reference lib="deno.worker" />

import { openGate, SparePty, spawnChild, SpawnError } from "../pty/spawn.ts";
import { PlacementError } from "../pty/clone_into_cgroup.ts";
import { type Applied, applySandbox, SandboxUnavailableError } from "../sandbox/enforce/apply.ts";
import {
  freshIpcNamespace,
  killAllOf,
  switchesUid,
  withNamespaceCaps,
  withThreadUid,
} from "../sandbox/identity/identity.ts";
import { inSlot, StuckError } from "../sandbox/enforce/terminal_slots.ts";
import { takeBackFiles } from "../sandbox/identity/uid_files.ts";
import type { WorkerReply, WorkerRequest } from "./protocol.ts";

let broken: string | undefined;
let restricted = false;
/** The terminal opened ahead for the next spawn, where this thread's spawns are alike. */
let spare: SparePty | undefined;
/**
 * Whether a session may share this thread's IPC namespace (the host's, before the restriction):
 * a switching spawner moves to a new one before its next spawn, at the latest.
 */
let ipcUsed = false;

/** The restricted thread's terminal slots (a root server's), and its domain's namespace. */
let applied: Applied = {};

/**
 * Runs `spawn` inside terminal slot `slot`'s mount namespace, or in the domain's own when the
 * session has no slot (all held); a thread that could not return to its domain's namespace never
 * spawns again.
 */
function inSlotOf<T>(slot: number | undefined, spawn: () => T): T {
  const { domainNs, slots } = applied;
  if (domainNs === undefined || slot === undefined) return spawn();
  const slotNs = slots![slot];
  if (slotNs === undefined) throw new Error(`no terminal slot ${slot} on this spawner`);
  try {
    return inSlot(slotNs, domainNs, withNamespaceCaps, spawn);
  } catch (err) {
    if (err instanceof StuckError) broken = err.message;
    throw err;
  }
}

/** A new IPC namespace for the next session, unless the current one is still unused. */
function freshIpc(): void {
  if (!ipcUsed || !switchesUid()) return;
  freshIpcNamespace();
  ipcUsed = false;
}

function reply(msg: WorkerReply): void {
  self.postMessage(msg);
}

function handle(req: WorkerRequest): WorkerReply {
  if (broken) return { id: req.id, type: "failed", kind: "sandbox", message: broken };
  switch (req.type) {
    case "spawn":
      if (switchesUid() !== (req.spec.uid !== undefined)) {
        const why = switchesUid() ? "needs a session uid" : "cannot switch to a session uid";
        return { id: req.id, type: "failed", kind: "sandbox", message: `this spawner ${why}` };
      }
      try {
        const { uid } = req.spec;
        freshIpc();
        ipcUsed = true;
        if (!restricted && !switchesUid() && req.slot === undefined) {
          spare ??= new SparePty(req.spare);
        }
        const spawn = () =>
          uid === undefined
            ? spawnChild(req.spec, restricted ? undefined : spare)
            : withThreadUid(uid, () => spawnChild(req.spec));
        const spawned = inSlotOf(req.slot, spawn);
        // The master first: a pid there means both are known, should this worker die now.
        Atomics.store(req.started, 1, spawned.master ?? -1);
        Atomics.store(req.started, 0, spawned.pid);
        if (req.spec.gate && !openGate(spawned.pid, req.spec.gate)) {
          return { id: req.id, type: "spawned", ...spawned, unplaced: true };
        }
        return { id: req.id, type: "spawned", ...spawned };
      } catch (err) {
        if (err instanceof PlacementError) {
          if (err.stuck) broken = err.message;
          return { id: req.id, type: "failed", kind: "sandbox", message: err.message };
        }
        if (err instanceof SpawnError) {
          return {
            id: req.id,
            type: "failed",
            kind: "spawn",
            code: err.code,
            message: err.message,
          };
        }
        throw err;
      }
    case "reap":
      if (restricted) throw new Error("a restricted worker cannot reap");
      try {
        for (const uid of req.uids) killAllOf(uid);
        if (req.takeBack) {
          const { roots, uids, owner } = req.takeBack;
          takeBackFiles(roots, uids, owner);
        }
      } catch (err) {
        broken = `reaper thread unusable: ${err}`;
        throw err;
      }
      return { id: req.id, type: "reaped" };
    case "restrict":
      if (restricted) throw new Error("this worker is already restricted");
      restricted = true;
      try {
        applied = applySandbox(req.policy, req);
        ipcUsed = true;
        const { domainNs, slots, netns } = applied;
        return {
          id: req.id,
          type: "restricted",
          namespaces: domainNs === undefined ? undefined : [domainNs, ...slots!],
          slots: slots?.length,
          ...(netns === undefined ? {} : { netns }),
        };
      } catch (err) {
        broken = err instanceof SandboxUnavailableError ? err.message : `sandbox: ${err}`;
        return { id: req.id, type: "failed", kind: "sandbox", message: broken };
      }
  }
}

self.onmessage = (e: MessageEvent<WorkerRequest>) => {
  try {
    reply(handle(e.data));
  } catch (err) {
    reply({ id: e.data.id, type: "failed", kind: "internal", message: String(err) });
  }
  // The next session's IPC namespace, made after the reply so no spawn waits for it (a failure
  // here is tried again, and reported, by the next spawn).
  try {
    freshIpc();
  } catch { /* the next spawn tries again and fails with the reason */ }
  // Likewise its terminal (see SparePty).
  if (e.data.type === "spawn" && !broken && !restricted) spare?.fill();
};

reply({ type: "ready" });
