/**
 * The egress gateway: one proxy listener inside each egress domain's network namespace (at
 * `127.0.0.1:3128` there, the namespace's only way out), the sessions each connection is
 * attributed to, and the audit of every connection.
 *
 * A connection is attributed by the kernel, not by anything the client says: every session runs
 * as a uid of its own, and the namespace's socket diagnostics (sandbox/identity/tcp_peers.ts)
 * name the uid that owns the client's socket. Connections per session are capped (a session past
 * the cap is refused without delaying others), and an idle connection is closed.
 *
 * It must never accept connections from outside a sandbox's namespace, never let a connection
 * through that its domain's rules refuse, and never drop the record of a request it judged.
 *
 * @module
 */

import { type ConnectionRecord, handleConnection, type ProxyContext } from "./proxy.ts";
import { type Cidr, type EgressRules } from "./rules.ts";
import { Resolver } from "./resolver.ts";
import { insideNamespace } from "./netns.ts";
import { closeAll } from "../ffi/libc.ts";
import { TcpPeers } from "../sandbox/identity/tcp_peers.ts";

/** Where the proxy listens inside every egress namespace. */
export const PROXY_PORT = 3128;

/** The environment that points a session's tools at the proxy. */
export function proxyEnv(): Record<string, string> {
  const url = `http://127.0.0.1:${PROXY_PORT}`;
  return {
    HTTP_PROXY: url,
    HTTPS_PROXY: url,
    ALL_PROXY: url,
    http_proxy: url,
    https_proxy: url,
    all_proxy: url,
    NO_PROXY: "localhost,127.0.0.1",
    no_proxy: "localhost,127.0.0.1",
  };
}

/** Who a connection belongs to. */
export interface EgressSession {
  sessionId: number;
  agent: string;
}

/** One audited connection. */
export interface EgressEvent extends ConnectionRecord {
  session_id?: number;
  agent?: string;
}

/** Settings of the gateway. */
export interface GatewayOptions {
  /** `UEXEC_EGRESS_HOSTS`: a file in /etc/hosts form consulted before DNS. */
  hostsFile?: string;
  /** `UEXEC_EGRESS_ALLOW_PRIVATE`: ranges the proxy may dial although private. */
  allowPrivate: Cidr[];
  /** Live connections one session may hold (default 64). */
  maxPerSession?: number;
  /** Close a connection after this long without traffic (default 60 s). */
  idleMs?: number;
  /** Told of every connection once it ended. */
  onConnection?: (event: EgressEvent) => void;
}

/** A live listener in one namespace. */
export interface EgressListener {
  close(): void;
}

/** Refusals kept per session for its result's denial (the first few only). */
const MAX_REFUSALS = 16;
/** Sessions whose refusals are kept until their result takes them. */
const MAX_REFUSING_SESSIONS = 1024;

/** Proxies, session attribution and audit for every egress domain. */
export class EgressGateway {
  #opts: GatewayOptions;
  #resolver: Resolver;
  #sessions = new Map<number, EgressSession>();
  #live = new Map<number, number>();
  #refusals = new Map<number, EgressEvent[]>();
  #listeners = new Set<Deno.TcpListener>();

  constructor(opts: GatewayOptions) {
    this.#opts = opts;
    this.#resolver = new Resolver(opts.hostsFile);
  }

  /** Connections from `uid` belong to `session` until the returned function is called. */
  register(uid: number, session: EgressSession): () => void {
    this.#sessions.set(uid, session);
    return () => {
      if (this.#sessions.get(uid) === session) this.#sessions.delete(uid);
    };
  }

  /** The connections refused to `sessionId` so far, oldest first; taken, not kept. */
  takeRefusals(sessionId: number): EgressEvent[] {
    const found = this.#refusals.get(sessionId) ?? [];
    this.#refusals.delete(sessionId);
    return found;
  }

  /**
   * Opens the proxy listener inside the namespace `nsFd` (which the gateway takes over and
   * closes), judging by `rules`.
   */
  open(nsFd: number, rules: EgressRules): EgressListener {
    let listener: Deno.TcpListener;
    let owners: TcpPeers;
    try {
      [listener, owners] = insideNamespace(nsFd, () => {
        // Made here, it answers for this namespace (its probe listens on this loopback).
        const owners = new TcpPeers();
        try {
          return [Deno.listen({ hostname: "127.0.0.1", port: PROXY_PORT }), owners] as const;
        } catch (err) {
          owners.close();
          throw err;
        }
      });
    } finally {
      // Both keep the namespace: its descriptor is needed no more.
      closeAll([nsFd]);
    }
    this.#listeners.add(listener);
    this.#serve(listener, owners, rules);
    let closed = false;
    return {
      close: () => {
        if (closed) return;
        closed = true;
        this.#listeners.delete(listener);
        try {
          listener.close();
        } catch {
          // Already closed.
        }
      },
    };
  }

  /** Stops every listener (server shutdown). */
  close(): void {
    for (const listener of this.#listeners) {
      try {
        listener.close();
      } catch {
        // Already closed.
      }
    }
    this.#listeners.clear();
  }

  async #serve(listener: Deno.TcpListener, owners: TcpPeers, rules: EgressRules) {
    const ctx: ProxyContext = {
      rules,
      allowPrivate: this.#opts.allowPrivate,
      resolver: this.#resolver,
      idleMs: this.#opts.idleMs ?? 60_000,
    };
    try {
      for await (const conn of listener) this.#accepted(conn, owners, ctx);
    } catch {
      // The listener was closed.
    } finally {
      owners.close();
    }
  }

  #accepted(conn: Deno.TcpConn, owners: TcpPeers, ctx: ProxyContext): void {
    let uid: number | undefined;
    try {
      uid = owners.uid(conn.localAddr, conn.remoteAddr);
    } catch (err) {
      console.error(`uexec: egress: cannot attribute a connection: ${err}`);
    }
    const session = uid === undefined ? undefined : this.#sessions.get(uid);
    // Connections no socket owner was found for share one allowance.
    const key = uid ?? -1;
    const live = this.#live.get(key) ?? 0;
    const who = session ? { session_id: session.sessionId, agent: session.agent } : {};
    if (live >= (this.#opts.maxPerSession ?? 64)) {
      const rule = "limit:connections";
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
      // Its request is never read: no host, port or method to tell.
      this.#opts.onConnection?.({
        ...who,
        host: "",
        port: 0,
        method: "",
        decision: "failed",
        rule,
        bytes_up: 0,
        bytes_down: 0,
        duration_ms: 0,
      });
      return;
    }
    this.#live.set(key, live + 1);
    handleConnection(conn, ctx, (rec) => {
      const event: EgressEvent = { ...who, ...rec };
      if (event.decision === "denied" && session) {
        const list = this.#refusals.get(session.sessionId) ?? [];
        if (list.length < MAX_REFUSALS) list.push(event);
        this.#refusals.delete(session.sessionId);
        this.#refusals.set(session.sessionId, list);
        // Results never read (a session killed) leave theirs: the oldest go past the cap.
        for (const id of this.#refusals.keys()) {
          if (this.#refusals.size <= MAX_REFUSING_SESSIONS) break;
          this.#refusals.delete(id);
        }
      }
      this.#opts.onConnection?.(event);
    }).finally(() => {
      const left = (this.#live.get(key) ?? 1) - 1;
      if (left > 0) this.#live.set(key, left);
      else this.#live.delete(key);
    });
  }
}
