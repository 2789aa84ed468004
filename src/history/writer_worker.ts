/**
 * The history writer's worker: opens its own connection to the history database and writes
 * each batch it is sent in one transaction, then prunes, answering every batch with its
 * sequence number and the error, if any. SQLite's synchronous work (commits, WAL checkpoints)
 * happens on this thread, never on the server's event loop.
 *
 * It must never answer a batch before it is committed, nor drop one without reporting it.
 *
 * @module
 */

/// <reference lib="deno.worker" />

import { HistoryStore } from "./store.ts";
import type { WriterReply, WriterRequest } from "./writer.ts";

let store: HistoryStore | undefined;
/** What to open: kept so that a connection that could not be opened (a full disk, say) is opened
 * again by the next write, rather than failing every write until a restart. */
let target: Extract<WriterRequest, { type: "open" }> | undefined;

self.onmessage = (event: MessageEvent<WriterRequest>) => {
  const req = event.data;
  let reply: WriterReply;
  try {
    if (req.type === "open") {
      target = req;
      store = new HistoryStore(req.path, req.retention, true);
    } else if (req.type === "write") {
      store ??= target && new HistoryStore(target.path, target.retention, true);
      if (!store) throw new Error("the history writer was never told its database");
      store.write(req.commands, req.approvals);
      // Only the agents this batch wrote for can have grown past their budget.
      store.prune(Date.now(), new Set(req.commands.map((c) => c.agent)));
    } else {
      store?.close();
      store = undefined;
    }
    reply = { seq: req.seq };
  } catch (err) {
    reply = { seq: req.seq, error: (err as Error).message };
  }
  self.postMessage(reply);
};
