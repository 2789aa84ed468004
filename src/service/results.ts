/**
 * What the operations return, in the forms every front door gives them: the JSON form, described
 * here as zod schemas (which the MCP front door publishes as each tool's `outputSchema`), and
 * the plain-text form of a tool call, as Codex shows it to the model. The schemas are checked
 * against the session layer's types at compile time, so the two never drift. Description and
 * formatting only; nothing here may change a result.
 *
 * @module
 */

import { z } from "zod";
import type { CallResult, KillResult } from "../sessions/calls.ts";
import type { SessionInfo } from "../sessions/session.ts";
import type { ScreenSnapshot } from "../output/screen.ts";
import type { Denial } from "../sandbox/policy/denial.ts";
import type { Widening } from "../sandbox/policy/widening.ts";
import { APPROVAL_DECISIONS, type ApprovalRecord } from "../approvals/store.ts";
import type { AgentInfo } from "./agents.ts";
import type { Usage } from "../sessions/usage.ts";
import { HISTORY_STATUSES, type HistoryDetail, type HistoryItem } from "../history/store.ts";

/** What the sandbox denied a command, as detected from its exit and output. */
export const DenialSchema = z.object({
  kind: z.enum(["fs-read", "fs-write", "network", "signal", "syscall"]),
  path: z.string().optional(),
  port: z.number().int().optional(),
  host: z.string().optional(),
  rule: z.string().optional()
    .describe("For a connection the egress proxy refused: the rule that refused it."),
  evidence: z.string(),
});

/** A session's terminal as it looks now (`ScreenView`): the visible rows and the cursor. */
const ScreenViewSchema = z.object({
  rows: z.number().int(),
  cols: z.number().int(),
  cursor: z.object({ row: z.number().int(), col: z.number().int() }).describe("Zero-based."),
  lines: z.array(z.string()).describe("The visible rows, top to bottom, trailing blanks trimmed."),
  alternate: z.boolean().describe("True while a full-screen program uses the alternate screen."),
});

/**
 * What `read_screen` returns, as `GET /v1/sessions/{id}/screen` does: the session, its screen, and
 * the lines that scrolled off since the last look.
 */
export const SessionScreenSchema = ScreenViewSchema.extend({
  session_id: z.number().int(),
  scrolled: z.array(z.string()).describe("Lines that scrolled off since the last look."),
  scrolled_lost: z.boolean().describe("True when more scrolled off than the scrollback holds."),
});

/** The result of `exec_command` and `write_stdin`. */
export const CallResultSchema = z.object({
  chunk_id: z.string().describe("Identifier of this chunk of output."),
  wall_time_seconds: z.number().describe("How long the call took."),
  output: z.string().describe("The output collected in this call, fitted to the token budget."),
  session_id: z.number().int().optional()
    .describe("Set while the process runs: pass it to write_stdin."),
  exit_code: z.number().int().optional().describe("Set once the process has exited."),
  original_token_count: z.number().int().describe("Tokens in the output before fitting."),
  truncated: z.boolean().describe("True when output was cut to fit the token budget."),
  timed_out: z.boolean().optional().describe("True when timeout_ms killed the process."),
  sandbox: z.object({
    profile: z.string(),
    denied: z.boolean(),
    denial: DenialSchema.optional(),
    retried: z.boolean().optional(),
    message: z.string().optional(),
  }).describe("What the sandbox did to the command."),
  screen: ScreenViewSchema.optional()
    .describe("With output_mode screen: the terminal now (output holds what scrolled off)."),
  usage: z.object({
    cpu_seconds: z.number(),
    peak_memory_bytes: z.number().nullable(),
    killed_by: z.literal("memory").optional().describe(
      "Set when the kernel killed a process of the tree for memory: its own limit or the " +
        "memory cap of all sessions together was reached.",
    ),
  }).optional().describe(
    "Once exited: CPU time and peak memory of the command's whole process tree (cgroups only).",
  ),
  waiting_for_input: z.boolean().optional().describe(
    "PTY sessions still running: true when the foreground program is blocked reading the " +
      "terminal (a prompt, a REPL, a password).",
  ),
  input_echo: z.boolean().optional().describe(
    "Beside waiting_for_input: false when what is typed is not shown (terminal echo off in " +
      "line mode, as at a password prompt): do not type a secret you do not have. A REPL's " +
      "line editor or a full-screen program shows input itself: true.",
  ),
});

/** A live session, as listed. */
export const SessionInfoSchema = z.object({
  session_id: z.number().int(),
  node: z.string().describe("The node it runs on (UEXEC_NODE_ID; the host name by default)."),
  agent: z.string().describe("The agent that started it (operator for the operator's own)."),
  command: z.string(),
  workdir: z.string(),
  tty: z.boolean(),
  profile: z.string(),
  screen: z.boolean().describe("True when a terminal emulator follows it (read_screen works)."),
  pid: z.number().int(),
  started_at: z.string(),
  last_used_at: z.string(),
});

/** The caller's live sessions. */
export const SessionListSchema = z.object({ sessions: z.array(SessionInfoSchema) });

/** What killing a session returns. */
export const KillResultSchema = z.object({
  exit_code: z.number().int(),
  output: z.string().describe("Output that had not been collected yet."),
});

/** True when `A` and `B` are assignable to each other and have the same keys. */
export type Same<A, B> = [A, keyof A] extends [B, keyof B]
  ? [B, keyof B] extends [A, keyof A] ? true
  : false
  : false;
/** Compiles only when `T` is true. */
export type Assert<T extends true> = T;
type _SchemasMatchTypes = [
  Assert<Same<z.output<typeof CallResultSchema>, CallResult>>,
  Assert<Same<z.output<typeof SessionInfoSchema>, SessionInfo>>,
  Assert<Same<z.output<typeof KillResultSchema>, KillResult>>,
  Assert<Same<z.output<typeof SessionScreenSchema>, ScreenSnapshot & { session_id: number }>>,
];

/** Render a result the way Codex's `response_text` does (plus the screen, when there is one). */
export function resultText(r: CallResult): string {
  const lines = [`Chunk ID: ${r.chunk_id}`, `Wall time: ${r.wall_time_seconds.toFixed(4)} seconds`];
  if (r.exit_code !== undefined) lines.push(`Process exited with code ${r.exit_code}`);
  if (r.session_id !== undefined) lines.push(`Process running with session ID ${r.session_id}`);
  lines.push(...beyondCodex(r));
  lines.push(`Original token count: ${r.original_token_count}`, "Output:", r.output);
  if (r.screen) lines.push(...screenText(r.screen));
  return lines.join("\n");
}

/**
 * The text form's lines beyond Codex's, for what the JSON form says that a model reading only
 * the text would otherwise miss: a timeout, what the sandbox denied or retried, and a program
 * waiting for input (with echo off: a password prompt).
 */
function beyondCodex(r: CallResult): string[] {
  const lines: string[] = [];
  if (r.timed_out) lines.push("Timed out: killed at its timeout_ms");
  const { sandbox } = r;
  if (sandbox.denied) {
    const { denial } = sandbox;
    const what = denial
      ? [denial.kind, denial.path, denial.port === undefined ? undefined : `port ${denial.port}`]
        .filter((part) => part !== undefined).join(" ")
      : "something";
    const evidence = denial ? `: ${denial.evidence}` : "";
    lines.push(oneLine(`Sandbox denied ${what} (profile ${sandbox.profile})${evidence}`));
  }
  if (sandbox.retried) lines.push(`Sandbox: run again as approved (profile ${sandbox.profile})`);
  if (sandbox.message) lines.push(`Sandbox: ${oneLine(sandbox.message)}`);
  if (r.waiting_for_input) {
    lines.push(
      r.input_echo === false
        ? "Waiting for input, echo off (a password prompt): do not type a secret you do not have"
        : "Waiting for input",
    );
  }
  return lines;
}

/** `text` on one line: line breaks (from a command's output) become spaces. */
function oneLine(text: string): string {
  return text.replace(/[\r\n]+/g, " ");
}

/** A screen as text: a line saying its size and cursor, then its rows. */
export function screenText(screen: z.output<typeof ScreenViewSchema>): string[] {
  const { rows, cols, cursor } = screen;
  return [
    `Screen (${rows} rows, ${cols} columns, cursor at row ${cursor.row + 1}, ` +
    `column ${cursor.col + 1}):`,
    ...screen.lines,
  ];
}

// OpenAPI (issue 12): the other operations' results, so the document describes every response
// from a schema checked against the type the code returns.

/** `{ ok: true }`: an operation that returns nothing else. */
export const OkSchema = z.object({ ok: z.literal(true) });

/** CPU time and memory of one session's process tree. */
export const SessionUsageSchema = z.object({
  session_id: z.number().int(),
  cpu_seconds: z.number().describe("User plus system CPU time of the process tree."),
  rss_bytes: z.number().int().describe("Resident memory of the process tree."),
});

/** What approving adds beyond the profile. */
const WideningSchema = z.object({
  profile: z.string().optional().describe("Run under this (wider) profile instead."),
  write: z.array(z.string()).optional().describe("Extra writable directories."),
  read: z.array(z.string()).optional().describe("Paths the profile hides, made readable."),
  tcp_ports: z.array(z.number().int()).optional().describe("Extra TCP ports."),
  hosts: z.array(z.string()).optional().describe("Extra hosts through the egress proxy."),
  unsandboxed: z.boolean().optional().describe("No sandbox at all."),
});

/** An approval: a command waiting for (or given) the operator's decision. */
export const ApprovalSchema = z.object({
  id: z.string(),
  agent: z.string().describe("The agent that asked."),
  command: z.string(),
  shell: z.string(),
  login: z.boolean(),
  workdir: z.string(),
  tty: z.boolean(),
  profile: z.string().describe("The profile the command was asked under."),
  env: z.record(z.string(), z.string()),
  escalation: WideningSchema.describe("What approving adds beyond the profile."),
  runs: z.string().describe("How the command runs once approved."),
  reason: z.string(),
  justification: z.string().nullable(),
  denial: DenialSchema.nullable().describe("The sandbox denial that led to this question."),
  can_choose_unsandboxed: z.boolean(),
  created_at: z.string(),
  expires_at: z.string().describe("When it is denied if still undecided."),
  status: z.enum(["pending", ...APPROVAL_DECISIONS, "timed_out"]),
  decided_at: z.string().optional(),
  granted: WideningSchema.optional(),
  decided_by: z.enum(["operator", "timeout", "cancelled"]).optional(),
  exec_id: z.string().nullable().describe("The history id of the exec_command that asked."),
});

/** An agent as the operator sees it (never its token). */
export const AgentSchema = z.object({
  name: z.string(),
  max_profile: z.string().nullable(),
  max_widening: z.object({
    write: z.array(z.string()).optional(),
    tcp_ports: z.array(z.number().int()).optional(),
  }).nullable(),
  max_sessions: z.number().int().nullable(),
  max_memory_bytes: z.number().int().nullable(),
  max_egress: z.array(z.string()).nullable()
    .describe("Host patterns the agent may ever reach through the egress proxy, or ask for."),
  created_at: z.string(),
});

/** A new agent and its token, shown this once. */
export const CreatedAgentSchema = AgentSchema.omit({ created_at: true }).extend({
  token: z.string().describe("The agent's bearer token; it is not shown again."),
});

/** A revoked agent and how many of its sessions were killed. */
export const RevokedAgentSchema = AgentSchema.extend({ sessions_killed: z.number().int() });

/** One command of the history. */
export const HistoryItemSchema = z.object({
  id: z.string(),
  agent: z.string(),
  command: z.string(),
  workdir: z.string(),
  profile: z.string(),
  tty: z.boolean(),
  session_id: z.number().int().nullable(),
  status: z.enum(HISTORY_STATUSES),
  started_at: z.string(),
  ended_at: z.string().nullable(),
  exit_code: z.number().int().nullable(),
  end_reason: z.string().nullable(),
  duration_seconds: z.number().nullable(),
  output_bytes: z.number().int(),
  usage: z.object({
    cpu_seconds: z.number().nullable(),
    peak_memory_bytes: z.number().int().nullable(),
  }),
  denial: DenialSchema.nullable(),
  egress: z.array(z.object({
    session_id: z.number().int().nullable(),
    host: z.string(),
    port: z.number().int(),
    address: z.string().nullable().describe("The address dialled (or refused)."),
    method: z.string().describe("The request's method; CONNECT for a tunnel."),
    decision: z.string().describe("allowed, denied or failed."),
    rule: z.string().describe("The rule that decided (allow:*.example.org, not-allowed...)."),
    bytes_up: z.number().int(),
    bytes_down: z.number().int(),
    duration_ms: z.number(),
  })).describe("Connections its sessions made through the egress proxy (the first 256)."),
  approvals: z.array(z.object({
    id: z.string(),
    status: z.string(),
    reason: z.string(),
    runs: z.string(),
    escalation: z.unknown().describe("What approving added beyond the profile."),
    denial: DenialSchema.nullable(),
    created_at: z.string(),
    decided_at: z.string().nullable(),
    decided_by: z.string().nullable().describe(
      "operator, timeout or cancelled; null while pending.",
    ),
    granted: z.unknown(),
  })).describe("The approvals this command asked for."),
  node: z.string().optional().describe(
    "The fleet node it ran on (with UEXEC_STORE; absent on one host).",
  ),
});

/** A page of history, newest first. */
export const HistoryPageSchema = z.object({
  items: z.array(HistoryItemSchema),
  next_cursor: z.string().nullable().describe("Pass as cursor for the next page; null at the end."),
});

/** One command of the history with the tail of its output. */
export const HistoryDetailSchema = HistoryItemSchema.extend({
  output_tail: z.string().describe("The last 64 KiB of its output, decoded as UTF-8."),
});

type _ResponsesMatchTypes = [
  Assert<Same<z.output<typeof DenialSchema>, Denial>>,
  Assert<Same<z.output<typeof WideningSchema>, Widening>>,
  Assert<Same<z.output<typeof SessionUsageSchema>, { session_id: number } & Usage>>,
  Assert<Same<z.output<typeof ApprovalSchema>, ApprovalRecord>>,
  Assert<Same<z.output<typeof AgentSchema>, AgentInfo>>,
  Assert<Same<z.output<typeof RevokedAgentSchema>, AgentInfo & { sessions_killed: number }>>,
  Assert<Same<z.output<typeof HistoryItemSchema>, HistoryItem>>,
  Assert<Same<z.output<typeof HistoryDetailSchema>, HistoryDetail>>,
];
