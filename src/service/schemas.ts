/**
 * The operations' inputs as zod schemas (the HTTP bodies, and what every other front door
 * validates with), and the clamping rules that turn them into session-layer requests. Unknown
 * fields, wrong types and out-of-range numbers are rejected with a message naming the field;
 * nothing here touches processes.
 *
 * @module
 */

import { z } from "zod";
import { decimalText } from "../decimal_text.ts";
import { approvalDecisionSchema } from "../approvals/store.ts";
import { compileUntil, UntilPatternError } from "../sessions/until.ts";
import { InvalidRequestError } from "../errors.ts";
import type { WaitConditions } from "../sessions/waits.ts";
import { patternProblem } from "../egress/rules.ts";

/** Yield limits, as in Codex. */
export const YIELD = {
  min: 250,
  max: 30_000,
  execDefault: 10_000,
  writeDefault: 250,
  pollMin: 5_000,
  pollMax: 300_000,
} as const;

const DEFAULT_MAX_OUTPUT_TOKENS = 10_000;
const MAX_OUTPUT_TOKENS = 262_144;

/**
 * A JavaScript regex, compiled once here for the linear-time engine; an invalid one, or one
 * using a construct that engine refuses, is a field error naming it.
 */
const untilPattern = z.string().min(1).max(4096).transform((value, ctx) => {
  try {
    return compileUntil(value);
  } catch (err) {
    if (!(err instanceof UntilPatternError)) throw err;
    ctx.addIssue({ code: "custom", message: err.message });
    return z.NEVER;
  }
});

// Waits that end a call when there is something to do (until_idle_ms, until_port, until_input).
const untilIdleMs = z.number().int().min(1).max(YIELD.pollMax).optional().describe(
  "Return once output has been quiet this many milliseconds (1-300000; the yield still bounds " +
    "the call).",
);
const untilPort = z.number().int().min(1).max(65535).optional().describe(
  "Return once a process of this session listens on this TCP port (a dev server is up).",
);
const untilInput = z.boolean().default(false).describe(
  "Return once the terminal's foreground program waits for input (a prompt, a REPL, a " +
    "password; tty only). See waiting_for_input and input_echo in the result.",
);

/** The wait conditions of a parsed exec or write body, for the session layer. */
export function waitConditions(
  body: { until_idle_ms?: number; until_port?: number; until_input: boolean },
): WaitConditions | undefined {
  const { until_idle_ms: idleMs, until_port: port, until_input: input } = body;
  if (idleMs === undefined && port === undefined && !input) return undefined;
  return { idleMs, port, input };
}

const noNul = (s: string) => !s.includes("\0");

/** A host pattern for the egress proxy: `example.org` or `*.example.org`. */
const hostPattern = z.string().max(256).superRefine((value, ctx) => {
  const problem = patternProblem(value);
  if (problem) ctx.addIssue({ code: "custom", message: problem });
});
const envName = z.string().min(1).max(1024).regex(/^[^=\0]+$/, "must be a name without '=' or NUL");
const size = z.number().int().min(1).max(1000);
const maxTokens = z.number().int().min(1).max(MAX_OUTPUT_TOKENS).default(DEFAULT_MAX_OUTPUT_TOKENS);
const yieldMs = z.number().int().min(0);

/** How a call's output is shown (`output_mode`); front doors pick the default. */
export const OutputMode = z.enum(["raw", "plain", "screen"]);
const OUTPUT_MODE_HELP = "raw: the bytes as they came (escape sequences and all); plain: what a " +
  "reader sees, line by line (colours and other escape sequences removed, carriage-return " +
  "redraws and backspaces applied); screen: the terminal as it looks now, as `screen`, with " +
  "`output` holding the lines that scrolled off since the last call (needs screen: true).";
/** `output_mode` with the default a front door gives it (HTTP: `raw`). */
export function outputModeDefault(mode: z.infer<typeof OutputMode>) {
  return OutputMode.default(mode).describe(OUTPUT_MODE_HELP);
}
const outputMode = outputModeDefault("raw");

/** How much a call returns and when it returns early: the same on exec_command and write_stdin. */
const returnWhen = {
  max_output_tokens: maxTokens.describe("Output token budget. Default 10000."),
  until: untilPattern.optional()
    .describe("JavaScript regular expression: return as soon as the output of this call matches."),
  until_idle_ms: untilIdleMs,
  until_port: untilPort,
  until_input: untilInput,
};

/** `POST /v1/exec_command`. */
export const ExecBody = z.strictObject({
  cmd: z.string().min(1).max(65_536).refine(noNul, "must not contain NUL")
    .describe("Shell command to execute."),
  workdir: z.string().min(1).max(4096).refine(noNul, "must not contain NUL").optional()
    .describe(
      "Working directory, absolute or relative to the workspace. Defaults to the workspace.",
    ),
  shell: z.string().min(1).max(4096).refine(noNul, "must not contain NUL").optional()
    .describe("Shell binary to launch. Defaults to the server's shell."),
  login: z.boolean().default(true).describe("Run the shell with -lc (true) or -c (false)."),
  tty: z.boolean().default(true)
    .describe("Allocate a PTY (true) or use plain pipes with stdout and stderr merged (false)."),
  cols: size.default(80).describe("Terminal width in columns."),
  rows: size.default(24).describe("Terminal height in rows."),
  env: z.record(envName, z.string().max(131_072).refine(noNul, "must not contain NUL")).default({})
    .describe("Environment variables added on top of the base environment."),
  yield_time_ms: yieldMs.optional()
    .describe("How long to wait for output before yielding. Default 10000, range 250-30000."),
  ...returnWhen,
  profile: z.string().min(1).max(128).optional()
    .describe("Sandbox profile, e.g. read-only or workspace-write. Defaults to the server's."),
  sandbox_permissions: z.enum(["use_default", "require_escalated"]).default("use_default")
    .describe(
      "use_default runs sandboxed; require_escalated asks for approval to run unsandboxed " +
        "(or, with escalate, with only the access escalate names).",
    ),
  escalate: z.strictObject({
    profile: z.string().min(1).max(128).optional().describe("A wider sandbox profile."),
    write: z.array(z.string().min(1).max(4096).refine(noNul, "must not contain NUL")).min(1)
      .max(64).optional()
      .describe("Extra writable directories, absolute or relative to the workdir."),
    tcp_ports: z.array(z.number().int().min(1).max(65535)).min(1).max(64).optional()
      .describe("Extra TCP ports to connect to."),
    hosts: z.array(hostPattern).min(1).max(64).optional()
      .describe(
        "Extra host patterns (example.org, *.example.org) the egress proxy lets through, " +
          "for this command (a profile with egress rules, e.g. workspace-write-egress).",
      ),
  }).refine(
    (e) =>
      e.profile !== undefined || e.write !== undefined || e.tcp_ports !== undefined ||
      e.hosts !== undefined,
    "name at least one of profile, write, tcp_ports, hosts",
  ).optional().describe(
    "Ask for approval to run still sandboxed, with only this added: a wider profile, " +
      "writable directories, TCP ports, or hosts through the egress proxy.",
  ),
  justification: z.string().max(4096).optional()
    .describe("The question shown to the approver with require_escalated."),
  timeout_ms: z.number().int().min(1).max(86_400_000).optional()
    .describe("Kill the command this many milliseconds after it started."),
  output_mode: outputMode,
  screen: z.boolean().default(false).describe(
    "Follow the session with a terminal emulator, so output_mode screen and " +
      "GET /v1/sessions/{id}/screen can show it (tty only). Implied by output_mode screen.",
  ),
});

/** `POST /v1/approvals/{id}`. */
export const DecisionBody = z.strictObject({
  decision: approvalDecisionSchema,
  unsandboxed: z.boolean().default(false)
    .describe("Grant an unsandboxed run instead of the proposed widening, where offered."),
});

/** `POST /v1/agents`. */
export const AgentBody = z.strictObject({
  name: z.string().min(1).max(64),
  max_profile: z.string().min(1).max(128).optional(),
  max_widening: z.strictObject({
    write: z.array(z.string().min(1).max(4096).refine(noNul, "must not contain NUL")).max(64)
      .optional()
      .describe("Directories (absolute) it may ask to write, with what is beneath them."),
    tcp_ports: z.array(z.number().int().min(1).max(65535)).max(64).optional()
      .describe("TCP ports it may ask to reach."),
  }).optional().describe(
    "What the agent may ask for beyond max_profile in a narrow escalation (needs max_profile); " +
      "anything wider is refused 403 before it reaches the operator.",
  ),
  max_sessions: z.number().int().min(1).max(100_000).optional(),
  max_memory_bytes: z.number().int().min(16 << 20).max(Number.MAX_SAFE_INTEGER).optional()
    .describe("The memory of each of its sessions, in bytes; at most UEXEC_MEMORY_MAX."),
  max_egress: z.array(hostPattern).max(256).optional()
    .describe("The host patterns the agent may ever reach through the egress proxy, or ask for."),
});

/** `POST /v1/write_stdin`. */
export const WriteBody = z.strictObject({
  session_id: z.number().int().min(0).describe("Identifier of the running session."),
  chars: z.string().max(1_048_576).default("")
    .describe("Characters to write to stdin. Empty polls for output without writing."),
  yield_time_ms: yieldMs.optional().describe(
    "How long to wait for output. Writes default to 250 (max 30000); empty polls wait 5000-300000.",
  ),
  ...returnWhen,
  output_mode: outputMode,
});

/** A session named in a tool call's arguments (MCP `kill_session`, `read_screen`). */
export const SessionRefBody = z.strictObject({
  session_id: z.number().int().min(0).describe("Identifier of the session."),
});

/** `POST /v1/sessions/{id}/resize`. */
export const ResizeBody = z.strictObject({ cols: size, rows: size });

/** `POST /v1/sessions/{id}/signal`. */
export const SignalBody = z.strictObject({ signal: z.string().min(1).max(32) });

/** A session id in a path. */
export const SessionIdParam = decimalText(0, 2 ** 31);

/** Clamp the exec yield: default 10 s, within 250 ms..30 s. */
export function execYield(requested?: number): number {
  return clamp(requested ?? YIELD.execDefault, YIELD.min, YIELD.max);
}

/** Clamp the write yield: a write waits 250 ms..30 s; an empty poll 5 s..300 s. */
export function writeYield(chars: string, requested?: number): number {
  if (chars.length === 0) {
    return clamp(requested ?? YIELD.writeDefault, YIELD.pollMin, YIELD.pollMax);
  }
  return clamp(requested ?? YIELD.writeDefault, YIELD.min, YIELD.max);
}

function clamp(n: number, lo: number, hi: number): number {
  return Math.min(hi, Math.max(lo, n));
}

/** A one-line description of the first validation problem, naming the field. */
export function describeIssues(error: z.ZodError): string {
  const issue = error.issues[0];
  const field = issue.path.join(".");
  return field ? `${field}: ${issue.message}` : issue.message;
}

/**
 * `raw` validated by `schema`; otherwise an {@link InvalidRequestError} describing the first
 * problem, so every front door rejects a bad input with the same message.
 */
export function parseInput<T extends z.ZodType>(schema: T, raw: unknown): z.output<T> {
  const parsed = schema.safeParse(raw);
  if (!parsed.success) throw new InvalidRequestError(describeIssues(parsed.error));
  return parsed.data;
}
