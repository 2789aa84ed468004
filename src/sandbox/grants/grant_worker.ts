/**
 * The grant worker (see grant_thread.ts): makes and takes back write grants (write_grant.ts)
 * one request at a time, holding each grant made until it is taken back, and answers every
 * request with its sequence number.
 *
 * It must never answer a request before its walk is done, nor drop one without answering.
 *
 * @module
 */

/// <reference lib="deno.worker" />

import type { GrantReply, GrantRequest, GrantSpec } from "./grant_thread.ts";
import { sandboxOwners } from "../identity/identity.ts";
import { GrantError, type GrantOptions, WriteGrant } from "./write_grant.ts";

/** The grants held, by the number their grant request was answered with. */
const held = new Map<number, WriteGrant>();

function options({ uid, ids, protectedNames }: GrantSpec): GrantOptions {
  return { uid, gid: ids.gid, owners: sandboxOwners(ids), protectedNames: new Set(protectedNames) };
}

function serve(req: GrantRequest): number | boolean {
  switch (req.type) {
    case "grant":
      held.set(req.seq, WriteGrant.grant(req.roots, options(req.spec)));
      return req.seq;
    case "revoke": {
      const grant = held.get(req.grant);
      held.delete(req.grant);
      return grant?.revoke() ?? false;
    }
    case "takeBack":
      return WriteGrant.takeBack(req.roots, options(req.spec));
  }
}

self.onmessage = (event: MessageEvent<GrantRequest>) => {
  const req = event.data;
  let reply: GrantReply;
  try {
    reply = { seq: req.seq, value: serve(req) };
  } catch (err) {
    const takenBack = err instanceof GrantError && err.takenBack;
    reply = { seq: req.seq, error: (err as Error).message, takenBack };
  }
  self.postMessage(reply);
};
