/**
 * What the egress gateway (gateway.ts, the main thread) and its thread (gateway_worker.ts) say to
 * each other, and what both need to know: the port the proxy listens on in every egress
 * namespace, who a connection belongs to, and one connection's record. Types and constants only:
 * it must never do anything on import (both threads load it).
 *
 * @module
 */

import type { ConnectionRecord } from "./proxy.ts";
import type { Cidr, EgressRules } from "./rules.ts";

/** Where the proxy listens inside every egress namespace. */
export const PROXY_PORT = 3128;

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

/** The gateway's settings, as the worker is told them first. */
export interface WorkerSettings {
  hostsFile?: string;
  allowPrivate: Cidr[];
  maxPerSession: number;
  idleMs: number;
}

/** A message to the worker. */
export type ToWorker =
  | { type: "init"; settings: WorkerSettings }
  | { type: "open"; seq: number; nsFd: number; rules: EgressRules }
  | { type: "close"; seq: number }
  | { type: "register"; seq: number; uid: number; session: EgressSession }
  | { type: "unregister"; uid: number; sessionId: number }
  | { type: "settle"; seq: number };

/**
 * A message from the worker: `done` answers the request numbered `seq` (an open, a register, a
 * settle), with why it failed if it did. A listener keeps its open's number (`close` names it).
 */
export type FromWorker =
  | { type: "connection"; event: EgressEvent }
  | { type: "done"; seq: number; error?: string };
