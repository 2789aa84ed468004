/**
 * The spawner worker's entry point. Its thread is the one whose sandbox children inherit: it
 * restricts itself at most once (through synchronous calls only) and then starts children with
 * `posix_spawnp` on this same thread.
 *
 * It must never spawn before a requested restriction succeeded, and never restrict twice.
 *
 * @module
 */

/// <reference lib="deno.worker" />

import { spawnChild, SpawnError } from "../pty/spawn.ts";
import { applySandbox, SandboxUnavailableError } from "../sandbox/apply.ts";
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
      try {
        return { id: req.id, type: "spawned", ...spawnChild(req.spec) };
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
    case "restrict":
      if (restricted) throw new Error("this worker is already restricted");
      restricted = true;
      try {
        applySandbox(req.policy, { uid: req.uid, gid: req.gid });
        return { id: req.id, type: "restricted" };
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
