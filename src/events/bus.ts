/**
 * The lifecycle event bus behind `GET /v1/events`: every session's begin, interactions and end,
 * and approval requests and decisions. Publishing never blocks and never throws into the
 * publisher; a slow subscriber is its own problem.
 *
 * @module
 */

import type { EgressEvent } from "../egress/gateway.ts";
import { loggable } from "../ffi/libc.ts";

/** Why a session ended. */
export type EndReason = "exit" | "kill" | "prune" | "timeout" | "shutdown" | "revoke";

/**
 * A lifecycle event. `agent` names whose session or approval it concerns (`operator` for the
 * operator's own): an agent is shown only its own events.
 */
export type LifecycleEvent =
  | {
    type: "begin";
    agent: string;
    session_id: number;
    command: string;
    workdir: string;
    tty: boolean;
  }
  | { type: "interaction"; agent: string; session_id: number; chars: string }
  /**
   * A call on the session (`exec_command`, `write_stdin`) whose client went away before its
   * answer: what the session prints from then on, and its exit, wait for the next call.
   */
  | { type: "abandoned"; agent: string; session_id: number }
  | {
    type: "end";
    agent: string;
    session_id: number;
    exit_code: number;
    duration_seconds: number;
    reason: EndReason;
    /** What the session's whole process tree used (where its cgroup accounts it). */
    usage?: { cpu_seconds: number; peak_memory_bytes: number | null; killed_by?: "memory" };
  }
  | { type: "approval_requested"; agent: string; approval: unknown }
  | { type: "approval_decided"; agent: string; approval: unknown }
  /** A fleet node's lease ran out (told to the operator): its sessions are gone. */
  | { type: "node_lost"; agent: string; node: string }
  /**
   * This fleet node reached its store again after losing it (told to the operator), once what
   * it kept for the store meanwhile (its history) has been written.
   */
  | { type: "store_reconnected"; agent: string; node: string }
  /** The operator revoked the agent: its token, streams and sessions end. */
  | { type: "agent_revoked"; agent: string }
  /**
   * A connection through the egress proxy ended (allowed, denied or failed): see
   * src/egress/gateway.ts. `agent` is absent when no live session owned it.
   */
  | ({ type: "egress"; agent?: string } & EgressEvent);

/** A subscriber callback. */
export type Listener = (event: LifecycleEvent) => void;

/** Fan-out of lifecycle events to subscribers. */
export class EventBus {
  #listeners = new Set<Listener>();

  /** Subscribe; returns the function that unsubscribes. */
  subscribe(listener: Listener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Deliver `event` to every subscriber. */
  publish(event: LifecycleEvent): void {
    for (const listener of this.#listeners) {
      try {
        listener(event);
      } catch (err) {
        console.error("uexec: event listener failed:", loggable(err));
      }
    }
  }
}
