/**
 * The egress proxy's own thread: every proxy listener (one inside each egress domain's network
 * namespace), the accept loops, the attribution of each connection to a session and its cap, and
 * the relays, all here, off the server's main thread. A bulk download through the proxy moves
 * its bytes through this thread's event loop, so it no longer holds up the API's requests between
 * its chunks (measured before the move: a write_stdin round trip's p90 went from 0.5 to 4.4 ms
 * beside a looping 100 MB download, its p99 from 1.4 to 12.9 ms).
 *
 * Talks to gateway.ts (the main thread) in messages only (gateway_protocol.ts): it is told the
 * settings, which uid is which session's (answered, so a session's command starts only once it
 * is), which listeners to open and close, and it reports every connection as its record. A
 * refused or failed connection is reported before its answer is written (proxy.ts), so a command
 * that read its 403 and exited finds its refusal already on its way to the main thread, ahead of
 * the answer to any `settle` asked after that exit. Only the worker loads this module: importing
 * it sets the thread's message handler.
 *
 * It must never accept connections from outside a sandbox's namespace, never let a connection
 * through that its domain's rules refuse, never drop the record of a request it judged, and never
 * answer a `settle` before the records made ahead of it.
 *
 * @module
 */

/// <reference lib="deno.worker" />

import { handleConnection, type ProxyContext } from "./proxy.ts";
import type { EgressRules } from "./rules.ts";
import { Resolver } from "./resolver.ts";
import {
  type EgressSession,
  type FromWorker,
  PROXY_PORT,
  type ToWorker,
  type WorkerSettings,
} from "./gateway_protocol.ts";
import { insideNamespace } from "./netns.ts";
import { closeAll } from "../ffi/libc.ts";
import { TcpPeers } from "../sandbox/identity/tcp_peers.ts";

let settings: WorkerSettings | undefined;
let resolver: Resolver | undefined;
const sessions = new Map<number, EgressSession>();
/** Live connections per uid (-1: no owner found). */
const live = new Map<number, number>();
const listeners = new Map<number, Deno.TcpListener>();

function post(message: FromWorker): void {
  self.postMessage(message);
}

/**
 * Opens listener `seq` inside the namespace `nsFd`, which is closed here either way before the
 * answer goes out (so an open that failed has closed its descriptor once its promise rejects).
 */
function open(seq: number, nsFd: number, rules: EgressRules): void {
  let made: readonly [Deno.TcpListener, TcpPeers] | undefined;
  let failure: unknown;
  try {
    made = insideNamespace(nsFd, () => {
      // Made here, it answers for this namespace (its probe listens on this loopback).
      const owners = new TcpPeers();
      try {
        return [Deno.listen({ hostname: "127.0.0.1", port: PROXY_PORT }), owners] as const;
      } catch (err) {
        owners.close();
        throw err;
      }
    });
  } catch (err) {
    failure = err;
  } finally {
    // Both keep the namespace: its descriptor is needed no more.
    closeAll([nsFd]);
  }
  if (!made) return post({ type: "done", seq, error: String(failure) });
  const [listener, owners] = made;
  listeners.set(seq, listener);
  serve(listener, owners, rules);
  post({ type: "done", seq });
}

function close(seq: number): void {
  const listener = listeners.get(seq);
  listeners.delete(seq);
  try {
    listener?.close();
  } catch {
    // Already closed.
  }
}

async function serve(listener: Deno.TcpListener, owners: TcpPeers, rules: EgressRules) {
  const ctx: ProxyContext = {
    rules,
    allowPrivate: settings!.allowPrivate,
    resolver: resolver!,
    idleMs: settings!.idleMs,
  };
  try {
    for await (const conn of listener) accepted(conn, owners, ctx);
  } catch {
    // The listener was closed.
  } finally {
    owners.close();
  }
}

function accepted(conn: Deno.TcpConn, owners: TcpPeers, ctx: ProxyContext): void {
  let uid: number | undefined;
  try {
    uid = owners.uid(conn.localAddr, conn.remoteAddr);
  } catch (err) {
    console.error(`uexec: egress: cannot attribute a connection: ${err}`);
  }
  const session = uid === undefined ? undefined : sessions.get(uid);
  // Connections no socket owner was found for share one allowance.
  const key = uid ?? -1;
  const count = live.get(key) ?? 0;
  const who = session ? { session_id: session.sessionId, agent: session.agent } : {};
  if (count >= settings!.maxPerSession) {
    const rule = "limit:connections";
    // Its request is never read: no host, port or method to tell. Reported before the answer.
    post({
      type: "connection",
      event: {
        ...who,
        host: "",
        port: 0,
        method: "",
        decision: "failed",
        rule,
        bytes_up: 0,
        bytes_down: 0,
        duration_ms: 0,
      },
    });
    conn.write(new TextEncoder().encode(
      `HTTP/1.1 503 Busy\r\nX-Uexec-Egress: error; rule=${rule}\r\n` +
        "Content-Length: 0\r\nConnection: close\r\n\r\n",
    )).catch(() => {}).finally(() => {
      try {
        conn.close();
      } catch {
        // Closed by the client meanwhile.
      }
    });
    return;
  }
  live.set(key, count + 1);
  handleConnection(conn, ctx, (rec) => post({ type: "connection", event: { ...who, ...rec } }))
    .finally(() => {
      const left = (live.get(key) ?? 1) - 1;
      if (left > 0) live.set(key, left);
      else live.delete(key);
    });
}

self.onmessage = (e: MessageEvent<ToWorker>) => {
  const m = e.data;
  switch (m.type) {
    case "init":
      settings = m.settings;
      resolver = new Resolver(m.settings.hostsFile);
      return;
    case "open":
      return open(m.seq, m.nsFd, m.rules);
    case "close":
      return close(m.seq);
    case "register":
      // Answered, so that the session's command starts only once its connections are its own.
      sessions.set(m.uid, m.session);
      return post({ type: "done", seq: m.seq });
    case "unregister":
      if (sessions.get(m.uid)?.sessionId === m.sessionId) sessions.delete(m.uid);
      return;
    case "settle":
      // Messages are taken in order, and records are posted as they are made: every record
      // made before this request is ahead of this answer.
      return post({ type: "done", seq: m.seq });
  }
};
