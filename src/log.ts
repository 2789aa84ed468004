/**
 * The server's log: one line per request and per lifecycle event on stderr, as JSON
 * (`UEXEC_LOG=json`, the default), as `key=value` text (`pretty`), or nothing (`off`). Lines
 * reach stderr in order, in batches written at most `LOG_DELAY_MS` after their first line (see
 * io/batched_writer.ts: each write to a pipe wakes its reader, which cost a sequential
 * `write_stdin` round trip a third of its time), at once where it cannot block (see
 * io/stderr_writer.ts). A line is formatted when its batch goes out, not when it is logged (its
 * time is taken then), so that no request waits for its own log line's formatting.
 * `close` (and `flush`) writes them, so a server that shuts down loses none; so does a process
 * exiting otherwise (an uncaught error, `Deno.exit`), where stderr takes them without waiting.
 *
 * Callers pass only the fields they mean to log; this module must never be handed a token, a
 * request or response body, typed input or command output, and it adds none of its own.
 *
 * @module
 */

import type { LifecycleEvent } from "./events/bus.ts";
import { BatchedWriter } from "./io/batched_writer.ts";
import { stderrWriter } from "./io/stderr_writer.ts";

/** How long a line may wait on stderr to go out with the lines after it. */
export const LOG_DELAY_MS = 50;

const encoder = new TextEncoder();
/**
 * The events of a process about to exit without running its timers: an uncaught error, an
 * unhandled rejection, `Deno.exit` (a shutdown past its time limit).
 */
const EXITS = ["error", "unhandledrejection", "unload"] as const;

/** How log lines are written. */
export const LOG_FORMATS = ["json", "pretty", "off"] as const;

/** A log format. */
export type LogFormat = (typeof LOG_FORMATS)[number];

/** A field value. */
export type LogValue = string | number | boolean | null | undefined;

/** Writes log lines to stderr (or `sink`). */
export class Logger {
  #format: LogFormat;
  /** An injected sink (tests), which gets each line formatted at once. */
  #sink?: (line: string) => void;
  #stderr?: BatchedWriter;
  /** Writes the waiting lines at once: the process is about to exit. */
  #dying?: () => void;

  constructor(format: LogFormat, sink?: (line: string) => void) {
    this.#format = format;
    if (sink) this.#sink = sink;
    else if (format !== "off") {
      const write = stderrWriter();
      const stderr = this.#stderr = new BatchedWriter(write, { delayMs: LOG_DELAY_MS });
      this.#dying = () => {
        const text = stderr.takeQueued();
        // Where the write would wait it is left to Deno, which may not get to it.
        if (text !== "") write(encoder.encode(text)).catch(() => {});
      };
      for (const event of EXITS) globalThis.addEventListener(event, this.#dying);
    }
  }

  /** Resolves once every line logged so far is written (at once for an injected sink). */
  flush(): Promise<void> {
    return this.#stderr?.flush() ?? Promise.resolve();
  }

  /** Write every line logged so far and stop watching for the process's exit. */
  close(): Promise<void> {
    if (this.#dying) {
      for (const event of EXITS) globalThis.removeEventListener(event, this.#dying);
      this.#dying = undefined;
    }
    return this.flush();
  }

  /** A routine event. */
  info(msg: string, fields: Record<string, LogValue>): void {
    this.#write("info", msg, fields);
  }

  /** Something went wrong but the server carries on. */
  warn(msg: string, fields: Record<string, LogValue>): void {
    this.#write("warn", msg, fields);
  }

  /** One line for a lifecycle event: ids, agent and outcome, never typed input or output. */
  event(event: LifecycleEvent): void {
    switch (event.type) {
      case "begin":
        return this.info("session_begin", {
          agent: event.agent,
          session_id: event.session_id,
          tty: event.tty,
        });
      case "interaction":
        return this.info("session_input", { agent: event.agent, session_id: event.session_id });
      case "abandoned":
        return this.info("call_abandoned", { agent: event.agent, session_id: event.session_id });
      case "end":
        return this.info("session_end", {
          agent: event.agent,
          session_id: event.session_id,
          exit_code: event.exit_code,
          reason: event.reason,
          ms: Math.round(event.duration_seconds * 1000),
        });
      case "agent_revoked":
        return this.info("agent_revoked", { agent: event.agent });
      case "node_lost":
        return this.info("node_lost", { node: event.node });
      case "store_reconnected":
        return this.info("store_reconnected", { node: event.node });
      case "approval_requested":
      case "approval_decided": {
        const approval = event.approval as { id?: string; status?: string };
        return this.info(event.type, {
          agent: event.agent,
          approval_id: approval.id,
          status: approval.status,
        });
      }
    }
  }

  #write(level: string, msg: string, fields: Record<string, LogValue>): void {
    if (this.#format === "off") return;
    const at = Date.now();
    if (this.#stderr) {
      this.#stderr.write(() => this.#line(at, level, msg, fields));
      return;
    }
    try {
      this.#sink?.(this.#line(at, level, msg, fields));
    } catch {
      // stderr is gone (closed pipe): nowhere left to log to.
    }
  }

  /** The line for an entry logged at `at` (milliseconds since the epoch). */
  #line(at: number, level: string, msg: string, fields: Record<string, LogValue>): string {
    const time = new Date(at).toISOString();
    const line = this.#format === "json"
      ? JSON.stringify({ time, level, msg, ...fields })
      : `${time} ${level.toUpperCase()} ${msg}` +
        Object.entries(fields)
          .filter(([, v]) => v !== undefined)
          .map(([k, v]) => ` ${k}=${typeof v === "string" ? JSON.stringify(v) : v}`)
          .join("");
    return `${line}\n`;
  }
}
