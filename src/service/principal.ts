/**
 * Who is calling: the operator (the human who decides approvals and sees everything) or a named
 * agent (runs commands and sees only its own sessions). Every operation of the application core
 * takes one. Types and role checks only; this module must never authenticate anyone.
 *
 * @module
 */

import { ApiError } from "../errors.ts";

/** The operator: every operation, alone in deciding approvals and managing agents. */
export interface Operator {
  role: "operator";
}

/** An agent: its own sessions only, capped by its limits. */
export interface Agent {
  role: "agent";
  name: string;
  /** The widest profile it may ask for; undefined: no cap beyond the approval policy. */
  maxProfile?: string;
  /**
   * What it may ask for beyond `maxProfile` in a narrow escalation (writable directories, TCP
   * ports); with `maxProfile` only. Every widening beyond the two together is refused.
   */
  maxWidening?: AgentWidening;
  /** Its own live-session limit (pruning happens among its own sessions). */
  maxSessions?: number;
  /** The memory of each of its sessions, in bytes (else the server's per-session default). */
  maxMemoryBytes?: number;
  /** Host patterns it may ever reach through the egress proxy, or ask for; undefined: no cap. */
  maxEgress?: string[];
}

/** The parts of a narrow escalation an agent's cap may allow beyond its widest profile. */
export interface AgentWidening {
  write?: string[];
  tcp_ports?: number[];
}

/** An authenticated caller. */
export type Principal = Operator | Agent;

/** The operator principal. */
export const OPERATOR: Operator = Object.freeze({ role: "operator" });

/** The owner name the operator's own sessions carry (agents may not take this name). */
export const OPERATOR_OWNER = "operator";

/** The owner recorded on sessions and approvals the principal creates. */
export function ownerOf(principal: Principal): string {
  return principal.role === "operator" ? OPERATOR_OWNER : principal.name;
}

/** An operation reserved to the operator (403 `forbidden`). */
export class ForbiddenError extends ApiError {
  readonly code = "forbidden";
}

/** Throws {@link ForbiddenError} unless `principal` is the operator. */
export function requireOperator(principal: Principal, what: string): void {
  if (principal.role !== "operator") {
    throw new ForbiddenError(`${what} is reserved to the operator`);
  }
}
