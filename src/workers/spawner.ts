/**
 * The spawner worker's entry point. Its thread is the one whose sandbox children inherit: it
 * restricts itself at most once (through synchronous calls only) and then starts children with
 * `posix_spawnp` on this same thread, switched to the session's uid when the server is root,
 * and lets a gated child run once it put it into its cgroups (no trip through the main thread).
 * An unrestricted worker may instead reap uids (kill what is left of one before its reuse).
 *
 * It must never spawn before a requested restriction succeeded, never restrict twice, never
 * spawn as its resting uid when it switches uids, and never reap once restricted.
 *
 * @module
 */

/// <reference lib="deno.worker" />

import { openGate, spawnChild, SpawnError } from "../pty/spawn.ts";
import { applySandbox, SandboxUnavailableError } from "../sandbox/apply.ts";
import { killAllOf, switchesUid, withThreadUid } from "../sandbox/identity.ts";
import type { WorkerReply, WorkerRequest } from "./protocol.ts";

let broken: string | undefined;
let restricted = false;

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
        const spawned = uid === undefined
          ? spawnChild(req.spec)
          : withThreadUid(uid, () => spawnChild(req.spec));
        // The master first: a pid there means both are known, should this worker die now.
        Atomics.store(req.started, 1, spawned.master ?? -1);
        Atomics.store(req.started, 0, spawned.pid);
        if (req.spec.gate && !openGate(spawned.pid, req.spec.gate)) {
          return { id: req.id, type: "spawned", ...spawned, unplaced: true };
        }
        return { id: req.id, type: "spawned", ...spawned };
      } catch (err) {
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
      } catch (err) {
        broken = `reaper thread unusable: ${err}`;
        throw err;
      }
      return { id: req.id, type: "reaped" };
    case "restrict":
      if (restricted) throw new Error("this worker is already restricted");
      restricted = true;
      try {
        const netns = applySandbox(req.policy, req);
        return { id: req.id, type: "restricted", ...(netns === undefined ? {} : { netns }) };
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
};

reply({ type: "ready" });
