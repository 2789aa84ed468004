/**
 * The session layer's two tool calls as it takes and answers them: the validated `exec_command`
 * and `write_stdin` requests (built by the application core from the operations' bodies) and
 * the result of a call, with what the sandbox did. Shapes only: it must never hold behaviour.
 *
 * @module
 */

import type { Usage } from "../sandbox/containment/session_cgroup.ts";
import type { Denial } from "../sandbox/policy/denial.ts";
import type { SandboxChoice } from "../sandbox/domains.ts";
import type { ScreenView } from "../output/screen.ts";
import type { WindowSize } from "../pty/open.ts";
import type { UntilPattern } from "./until.ts";
import type { WaitConditions } from "./waits.ts";

/**
 * How a call's output is shown: `raw` as the bytes came (decoded), `plain` as a reader sees
 * the lines, `screen` as the terminal shows it now (sessions with a screen only).
 */
export type OutputMode = "raw" | "plain" | "screen";

/** A validated `exec_command` request. */
export interface ExecRequest {
  /** Who starts it: its sessions, limit and pruning are its own. */
  owner: string;
  /** The owner's live-session limit. */
  maxSessions: number;
  /** With cgroups: the memory of the session's whole tree, in bytes (else the profile's). */
  memoryBytes?: number;
  cmd: string;
  workdir: string;
  shell: string;
  login: boolean;
  tty: boolean;
  size: WindowSize;
  env: Record<string, string>;
  yieldMs: number;
  maxOutputTokens: number;
  until?: UntilPattern;
  /** Return as soon as one of these holds (`until_idle_ms`, `until_port`, `until_input`). */
  waits?: WaitConditions;
  /** The sandbox the child runs under. */
  sandbox: SandboxChoice;
  /** Kill the session this long after it started. */
  timeoutMs?: number;
  /** Follow the session with a terminal emulator (tty only), for `screen` output. */
  screen?: boolean;
  outputMode?: OutputMode;
  /** Told of each piece of output that arrives while this call waits. */
  onOutput?: OutputWatcher;
  /** The `exec_command` this run belongs to (a retry is a second run of the same one). */
  execId?: string;
  /**
   * Aborts when the caller went away: the call then takes nothing from the session (its output
   * and exit wait for the next call) and rejects with `CallAbandonedError`.
   */
  signal?: AbortSignal;
  /**
   * True once the owner's credential was revoked (the request was let in before): checked before
   * anything starts and again when the session is about to be registered, so a start in flight
   * during the revocation is killed instead of outliving it.
   */
  revoked?: () => boolean;
}

/** Told of output as it arrives during a call (progress reporting); it must not throw. */
export type OutputWatcher = (bytes: Uint8Array) => void;

/** A validated `write_stdin` request. */
export interface WriteRequest {
  /** The caller's owner name; another owner's session is unknown to it. */
  owner?: string;
  sessionId: number;
  chars: string;
  yieldMs: number;
  maxOutputTokens: number;
  until?: UntilPattern;
  /** Return as soon as one of these holds (`until_idle_ms`, `until_port`, `until_input`). */
  waits?: WaitConditions;
  outputMode?: OutputMode;
  /** Told of each piece of output that arrives while this call waits. */
  onOutput?: OutputWatcher;
  /** As in `ExecRequest`: aborts when the caller went away. */
  signal?: AbortSignal;
}

/** The result of one tool call. */
export interface CallResult {
  chunk_id: string;
  wall_time_seconds: number;
  output: string;
  session_id?: number;
  exit_code?: number;
  original_token_count: number;
  truncated: boolean;
  /** True when the session was killed because its `timeout_ms` expired. */
  timed_out?: boolean;
  sandbox: SandboxReport;
  /** With `output_mode: "screen"`: the terminal now (`output` holds the lines scrolled off). */
  screen?: ScreenView;
  /** Once exited: what the command's whole process tree used (cgroup containment only). */
  usage?: Usage;
  /** PTY sessions still running: true when the foreground job is blocked reading the terminal. */
  waiting_for_input?: boolean;
  /** Beside `waiting_for_input`: false when what is typed is not shown (a password prompt). */
  input_echo?: boolean;
}

/** What the sandbox did to a command, as reported to the caller. */
export interface SandboxReport {
  profile: string;
  denied: boolean;
  denial?: Denial;
  /** Set when a denied command was rerun without the sandbox after approval. */
  retried?: boolean;
  /** Why a denied command was not rerun (the retry approval was denied or timed out). */
  message?: string;
}

/** What killing a session returns. */
export interface KillResult {
  exit_code: number;
  output: string;
}
