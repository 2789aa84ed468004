/**
 * The cgroup janitor's worker entry point: makes session cgroups ahead of need, readies emptied
 * ones for the next session and removes those not kept, so that `mkdir`, `rmdir` and the file
 * work of reuse on the cgroup file systems (slow when the kernel serializes them behind cgroup
 * work of its own) never hold up the server's main thread.
 * Protocol: {@link JanitorRequest} in, {@link JanitorReply} out, answered in order.
 *
 * It must never do anything but what a request names: no killing, no moving processes.
 *
 * @module
 */

/// <reference lib="deno.worker" />

import { makeCgroups, removeDirs, reuseCgroups } from "./cgroup_fs.ts";
import type { JanitorReply, JanitorRequest } from "./cgroup_janitor.ts";

self.onmessage = (e: MessageEvent<JanitorRequest>) => {
  const req = e.data;
  let reply: JanitorReply;
  if (req.type === "remove") {
    removeDirs(req.dirs);
    reply = { id: req.id, removed: true };
  } else if (req.type === "reuse") {
    const reused = reuseCgroups(req.plan);
    reply = reused ? { id: req.id, ...reused } : { id: req.id, removed: true };
  } else {
    try {
      reply = { id: req.id, procs: makeCgroups(req.plan) };
    } catch (err) {
      reply = { id: req.id, error: String(err) };
    }
  }
  self.postMessage(reply);
};
