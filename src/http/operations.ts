/**
 * The HTTP API, route by route, as data: for every route its method and path, its tag, who may
 * call it, the zod schemas of its input (the ones the routes validate with) and of its result
 * (the ones checked against the core's types in results.ts), and the errors it can answer with
 * beyond those of every route of its kind; and the routes that are not API operations, with why.
 * The OpenAPI document (openapi.ts) is generated from it.
 *
 * Description only: it must never hold a secret nor change what a route does. A test holds the
 * table to the routes the app actually serves, so a route cannot go undocumented.
 *
 * @module
 */

import { z } from "zod";
import { HistoryQuery } from "../history/query.ts";
import {
  AgentSchema,
  ApprovalSchema,
  type Assert,
  CallResultSchema,
  CreatedAgentSchema,
  HistoryDetailSchema,
  HistoryPageSchema,
  KillResultSchema,
  OkSchema,
  RevokedAgentSchema,
  type Same,
  SessionInfoSchema,
  SessionListSchema,
  SessionScreenSchema,
  SessionUsageSchema,
} from "../service/results.ts";
import {
  AgentBody,
  DecisionBody,
  ExecBody,
  ResizeBody,
  SignalBody,
  WriteBody,
} from "../service/schemas.ts";
import type { Service } from "../service/service.ts";
import { type ErrorCode } from "../errors.ts";
import {
  EndedSessionsSchema,
  SignInBody,
  SignInLinkSchema,
  SignInResultSchema,
} from "./dashboard/schemas.ts";

/**
 * Who may call an operation: anyone who reaches the server (past the Host/Origin guard), any
 * authenticated caller (an agent, scoped to its own, or the operator), or the operator alone.
 */
export type Caller = "anyone" | "agent" | "operator";

/**
 * The document's tags, each with what its operations are for (Redocly's `tag-description`): an
 * operation's tag must be one of these, so a new tag cannot go undescribed.
 */
export const TAGS = {
  server: "Health, this document and the Prometheus metrics.",
  commands: "Run commands in sandboxed PTYs and talk to them: the two tools an agent uses.",
  sessions: "Live sessions: list, inspect, resize, signal and kill them, read their output, " +
    "follow their events.",
  approvals: "Commands that wait for a person to allow them, and the decisions.",
  agents: "The agents the operator made, each with its own token (operator only).",
  history: "The commands that ran, kept after their sessions end.",
  websocket: "The same operations over one WebSocket connection (JSON-RPC 2.0).",
  mcp: "The same operations as MCP tools, over Streamable HTTP.",
  dashboard: "The operator's web dashboard: its browser session.",
} as const;

/** One route of the API. */
export interface Operation {
  method: "get" | "post" | "delete";
  /** The path as Hono registers it (`:name` parameters). */
  path: string;
  tag: keyof typeof TAGS;
  summary: string;
  description?: string;
  caller: Caller;
  /** Path parameters. */
  params?: Record<string, z.ZodType>;
  /** The query string. */
  query?: z.ZodObject;
  /** The JSON body, validated with this schema (so a bad one is 400 `invalid_request`). */
  body?: z.ZodType;
  /** A JSON body the route hands on as it is (to the MCP transport). */
  passBody?: z.ZodType;
  /**
   * The success status (200 unless said): 204 for an operation without a result, 101 for a
   * WebSocket upgrade (its messages are in the description).
   */
  status?: 101 | 200 | 201 | 204;
  /** The JSON result. */
  result?: z.ZodType;
  /** A `text/plain` form of the result, and when it is given. */
  text?: string;
  /** Server-sent events (`text/event-stream`): what they carry. */
  events?: string;
  /** Errors beyond those every route of its kind can give (added by openapi.ts). */
  errors?: ErrorCode[];
}

/**
 * Numbers that arrive as text are validated as plain decimal (decimal_text.ts); the document
 * describes what a client sends there: an integer.
 */
const SessionId = z.number().int().min(0).max(2 ** 31).describe("A session id.");
const HistoryParams = HistoryQuery.extend({
  limit: z.number().int().min(1).max(500).optional().describe("Items per page (default 50)."),
});

const StreamQuery = z.strictObject({
  encoding: z.enum(["base64"]).optional()
    .describe("base64: output events carry base64 bytes instead of UTF-8 text."),
});

const OutputQuery = z.strictObject({
  since: z.number().int().min(0).optional()
    .describe("The byte offset to read from; default: the oldest byte still held."),
  encoding: z.enum(["base64"]).optional()
    .describe("base64: the bytes as base64 instead of UTF-8 text."),
});

const OutputReadSchema = z.strictObject({
  session_id: z.number().int(),
  since: z.number().int().describe("The offset the returned bytes start at."),
  lost_bytes: z.number().int().describe(
    "Bytes between the asked offset and `since` no longer held.",
  ),
  end: z.number().int().describe("The offset after the returned bytes: the next `since`."),
  output: z.string().optional(),
  base64: z.string().optional(),
  exited: z.boolean(),
  exit_code: z.number().int().optional(),
});

const HealthSchema = z.looseObject({
  ok: z.literal(true),
  version: z.string().optional(),
}).describe(
  "Without a valid credential, or from a sandboxed command, only ok. With one: also the version, " +
    "live sessions, what the sandbox can enforce per profile, containment, the history's state " +
    "and the WebSocket URL.",
);

const ToolsSchema = z.object({
  tools: z.array(z.object({
    type: z.literal("function"),
    function: z.object({
      name: z.string(),
      description: z.string(),
      parameters: z.record(z.string(), z.unknown()).describe("JSON Schema of the arguments."),
    }),
  })).describe("OpenAI function-calling definitions of exec_command and write_stdin."),
});

const JsonRpcMessage = z.looseObject({
  jsonrpc: z.literal("2.0"),
  method: z.string().optional(),
  id: z.union([z.string(), z.number()]).optional(),
}).describe("An MCP JSON-RPC message (MCP Streamable HTTP, stateless).");

const DocumentSchema = z.looseObject({ openapi: z.literal("3.1.0") })
  .describe("This document.");

type _CreatedAgentMatches = Assert<
  Same<z.output<typeof CreatedAgentSchema>, Awaited<ReturnType<Service["createAgent"]>>>
>;

const EXEC_TEXT = "With Accept: text/plain, the result as Codex shows it to a model.";
const SESSION_ERRORS: ErrorCode[] = ["invalid_request", "unknown_session"];

/** The API, route by route. */
export const OPERATIONS: readonly Operation[] = [
  {
    method: "get",
    path: "/healthz",
    tag: "server",
    summary: "Liveness; with a credential, also what the sandbox can enforce",
    caller: "anyone",
    result: HealthSchema,
  },
  {
    method: "get",
    path: "/openapi.json",
    tag: "server",
    summary: "This OpenAPI document",
    description: "Rendered offline at /docs. It describes the API and holds nothing secret.",
    caller: "anyone",
    result: DocumentSchema,
  },
  {
    method: "post",
    path: "/v1/exec_command",
    tag: "commands",
    summary: "Run a command in a sandboxed PTY",
    description: "Returns its output, or a session_id while it still runs.",
    caller: "agent",
    body: ExecBody,
    result: CallResultSchema,
    text: EXEC_TEXT,
    errors: [
      "forbidden",
      "forbidden_workdir",
      "protected_workdir",
      "rejected",
      "session_limit",
      "sandbox_unavailable",
      "idempotency_conflict",
      "shutting_down",
      "out_of_resources",
      "insufficient_storage",
      "spawner_failed",
      "client_gone",
    ],
  },
  {
    method: "post",
    path: "/v1/write_stdin",
    tag: "commands",
    summary: "Write to a session's stdin and collect its output",
    caller: "agent",
    body: WriteBody,
    result: CallResultSchema,
    text: EXEC_TEXT,
    errors: ["unknown_session", "stdin_closed", "stdin_full", "client_gone"],
  },
  {
    method: "get",
    path: "/v1/tools",
    tag: "commands",
    summary: "exec_command and write_stdin as function-calling tools",
    caller: "agent",
    result: ToolsSchema,
  },
  {
    method: "get",
    path: "/v1/sessions",
    tag: "sessions",
    summary: "The caller's live sessions (all, for the operator)",
    caller: "agent",
    result: SessionListSchema,
  },
  {
    method: "get",
    path: "/v1/usage",
    tag: "sessions",
    summary: "CPU time and memory of the caller's sessions",
    caller: "agent",
    result: z.object({ usage: z.array(SessionUsageSchema) }),
  },
  {
    method: "get",
    path: "/v1/sessions/:id",
    tag: "sessions",
    summary: "One session",
    caller: "agent",
    params: { id: SessionId },
    result: SessionInfoSchema,
    errors: SESSION_ERRORS,
  },
  {
    method: "delete",
    path: "/v1/sessions/:id",
    tag: "sessions",
    summary: "Kill a session",
    caller: "agent",
    params: { id: SessionId },
    result: KillResultSchema,
    errors: SESSION_ERRORS,
  },
  {
    method: "post",
    path: "/v1/sessions/:id/resize",
    tag: "sessions",
    summary: "Resize a session's terminal",
    caller: "agent",
    params: { id: SessionId },
    body: ResizeBody,
    result: OkSchema,
    errors: SESSION_ERRORS,
  },
  {
    method: "post",
    path: "/v1/sessions/:id/signal",
    tag: "sessions",
    summary: "Send a signal to a session (by name, e.g. SIGINT)",
    caller: "agent",
    params: { id: SessionId },
    body: SignalBody,
    result: OkSchema,
    errors: SESSION_ERRORS,
  },
  {
    method: "get",
    path: "/v1/sessions/:id/stream",
    tag: "sessions",
    summary: "A session's output as it comes",
    caller: "agent",
    params: { id: SessionId },
    query: StreamQuery,
    events: "`output` events ({text} or {base64}) as output arrives, then one `exit` event " +
      "({exit_code}) when the session ends.",
    errors: SESSION_ERRORS,
  },
  {
    method: "get",
    path: "/v1/sessions/:id/output",
    tag: "sessions",
    summary: "A session's recent output from a byte offset, without taking it",
    description:
      "Reads the session's last 1 MiB by offset; write_stdin still gets the same output.",
    caller: "agent",
    params: { id: SessionId },
    query: OutputQuery,
    result: OutputReadSchema,
    errors: SESSION_ERRORS,
  },
  {
    method: "get",
    path: "/v1/sessions/:id/screen",
    tag: "sessions",
    summary: "What a screen session's terminal shows now",
    description: "400 for a session started without screen: true.",
    caller: "agent",
    params: { id: SessionId },
    result: SessionScreenSchema,
    errors: SESSION_ERRORS,
  },
  {
    method: "get",
    path: "/v1/events",
    tag: "sessions",
    summary: "Lifecycle events of the caller's sessions and approvals",
    caller: "agent",
    events: "`begin`, `interaction`, `abandoned` (a call's client went away), `end`, " +
      "`approval_requested`, `approval_decided`, " +
      "`agent_revoked`, in a fleet `node_lost` and `store_reconnected` (the operator's), " +
      "`egress` (one connection through the egress proxy, once it ended) " +
      "events, each with the agent it concerns; an agent sees only its own, " +
      "and its stream ends (without it) when it is revoked.",
  },
  {
    method: "get",
    path: "/v1/approvals",
    tag: "approvals",
    summary: "Pending approvals (an agent's own, read-only; all for the operator)",
    caller: "agent",
    result: z.object({ approvals: z.array(ApprovalSchema) }),
  },
  {
    method: "post",
    path: "/v1/approvals/:id",
    tag: "approvals",
    summary: "Decide an approval",
    caller: "operator",
    params: { id: z.string().describe("An approval id.") },
    body: DecisionBody,
    result: ApprovalSchema,
    errors: ["forbidden", "not_found", "already_decided"],
  },
  {
    method: "get",
    path: "/v1/agents",
    tag: "agents",
    summary: "Every agent",
    caller: "operator",
    result: z.object({ agents: z.array(AgentSchema) }),
    errors: ["forbidden"],
  },
  {
    method: "post",
    path: "/v1/agents",
    tag: "agents",
    summary: "Create an agent and its token",
    caller: "operator",
    body: AgentBody,
    status: 201,
    result: CreatedAgentSchema,
    errors: ["forbidden", "agent_exists"],
  },
  {
    method: "delete",
    path: "/v1/agents/:name",
    tag: "agents",
    summary: "Revoke an agent: its token stops working, its sessions are killed",
    caller: "operator",
    params: { name: z.string().describe("An agent name.") },
    result: RevokedAgentSchema,
    errors: ["forbidden", "unknown_agent"],
  },
  {
    method: "get",
    path: "/v1/history",
    tag: "history",
    summary: "Command history, newest first (an agent's own; anyone's for the operator)",
    caller: "agent",
    query: HistoryParams,
    result: HistoryPageSchema,
    errors: ["invalid_request", "not_found"],
  },
  {
    method: "get",
    path: "/v1/history/:id",
    tag: "history",
    summary: "One command of the history, with the tail of its output",
    caller: "agent",
    params: { id: z.string().describe("A history id.") },
    result: HistoryDetailSchema,
    errors: ["not_found"],
  },
  {
    method: "get",
    path: "/metrics",
    tag: "server",
    summary: "Prometheus metrics",
    caller: "operator",
    text: "The Prometheus text exposition format.",
    errors: ["forbidden", "not_found"],
  },
  {
    method: "get",
    path: "/v1/ws",
    tag: "websocket",
    summary: "The same operations over one WebSocket (JSON-RPC 2.0)",
    description: "Served on this port (ws://HOST:PORT/v1/ws, as /healthz names it in " +
      "`websocket`); the upgrade must be its connection's first request, and a plain GET " +
      "answers 426. Methods: exec_command, write_stdin, kill, resize, signal, subscribe, " +
      "unsubscribe; output is pushed while subscribed. After the upgrade: JSON-RPC responses, " +
      "and `output`, `gap` and `exit` notifications.",
    caller: "agent",
    // Its one success is 101: the only warning Redocly's recommended rules give on the document
    // (operation-2xx-response). A 2xx would be a lie a generated client believes.
    status: 101,
    errors: ["invalid_request", "upgrade_required", "too_many_requests"],
  },
  {
    method: "post",
    path: "/mcp",
    tag: "mcp",
    summary: "MCP over Streamable HTTP (stateless)",
    description: "The same operations as tools: exec_command, write_stdin, and more.",
    caller: "agent",
    passBody: JsonRpcMessage,
    result: z.looseObject({ jsonrpc: z.literal("2.0") }).describe("A JSON-RPC response."),
    events: "With Accept: text/event-stream, progress notifications and then the response.",
  },
  {
    method: "post",
    path: "/v1/dashboard/sign-in-links",
    tag: "dashboard",
    summary: "A fresh one-time sign-in link for the dashboard",
    description: "With the operator's token only (not an agent's, not a dashboard browser " +
      "session's). The link carries a code in its fragment that opens one browser session, " +
      "once, within UEXEC_DASHBOARD_CODE_MINUTES. Takes no body.",
    caller: "operator",
    status: 201,
    result: SignInLinkSchema,
    errors: ["forbidden"],
  },
  {
    method: "delete",
    path: "/v1/dashboard/sessions",
    tag: "dashboard",
    summary: "End every dashboard browser session (sign out everywhere)",
    description: "Each session's id is refused from then on and its event stream ends.",
    caller: "operator",
    result: EndedSessionsSchema,
    errors: ["forbidden"],
  },
  {
    method: "post",
    path: "/dashboard/sign-in",
    tag: "dashboard",
    summary: "Exchange a sign-in link's one-time code for a browser session",
    description: "What the dashboard's page does with the link's #code=. Refused from a " +
      "sandboxed command (forbidden_peer). The session id goes back as a bearer credential; " +
      "no cookie is set.",
    caller: "anyone",
    body: SignInBody,
    result: SignInResultSchema,
    errors: ["invalid_sign_in_code", "forbidden_peer"],
  },
  {
    method: "post",
    path: "/dashboard/sign-out",
    tag: "dashboard",
    summary: "End the dashboard browser session whose id is the bearer credential",
    caller: "anyone",
    status: 204,
  },
];

/**
 * Routes the app serves that are not API operations, each with the reason it is not in the
 * document: pages and their static files, which a browser loads, and methods that only ever
 * refuse (an operation without a success would only mislead a generated client).
 */
export const NOT_API: ReadonlyMap<string, string> = new Map([
  ["GET /", "the dashboard's HTML page"],
  ["GET /dashboard/:file", "the dashboard's static files (scripts, styles)"],
  ["GET /docs", "the HTML page that renders this document"],
  ["GET /docs/:file", "that page's static files (Swagger UI, its init script)"],
  ["GET /mcp", "always 405 method_not_allowed: the MCP endpoint is stateless (no stream to open)"],
  ["DELETE /mcp", "always 405 method_not_allowed: stateless MCP has no session to end"],
]);
