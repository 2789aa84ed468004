/**
 * The OpenAPI 3.1 document of the HTTP API (`GET /openapi.json`), generated, never written by
 * hand, from one table of operations: for every route its method and path, who may call it, the
 * zod schemas of its input (the ones the routes validate with) and of its result (the ones
 * checked against the core's types in results.ts), and the errors it can answer with. The JSON
 * Schemas come from the same function that makes `GET /v1/tools`' parameters.
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
  SessionIdParam,
  SignalBody,
  WriteBody,
} from "../service/schemas.ts";
import type { Service } from "../service/service.ts";
import { jsonSchema } from "../service/tools.ts";
import { VERSION } from "../version.ts";

/** Every error code the API answers with: its status and when it is given. */
export const ERRORS = {
  invalid_request: [400, "The request is malformed or a field is invalid; the message names it."],
  unauthorized: [401, "No bearer token (or dashboard cookie), or a wrong one."],
  forbidden: [403, "Reserved to the operator, or beyond the agent's widest profile."],
  forbidden_peer: [403, "The request came from a sandboxed command."],
  forbidden_host: [403, "The Host is neither a loopback name nor in UEXEC_ALLOWED_HOSTS."],
  forbidden_origin: [
    403,
    "The Origin is neither the server's own nor in UEXEC_ALLOWED_ORIGINS, or a cookie-" +
    "authenticated request did not come from the dashboard's own page.",
  ],
  forbidden_workdir: [403, "The workdir is outside the workspace and UEXEC_ALLOWED_ROOTS."],
  protected_workdir: [403, "The workdir is inside a directory that stays read-only (.git)."],
  rejected: [403, "The approval policy or the operator refused the command."],
  not_found: [404, "No such entry, or it is not the caller's; or the feature is off."],
  unknown_session: [404, "No live session with that id that the caller may see."],
  unknown_agent: [404, "No agent by that name."],
  method_not_allowed: [405, "This method has nothing to serve here."],
  already_decided: [409, "The approval is no longer pending."],
  agent_exists: [409, "An agent by that name exists."],
  payload_too_large: [413, "The request body exceeds 1 MiB."],
  unsupported_media_type: [415, "A POST body was not declared content-type: application/json."],
  session_limit: [429, "The caller has as many live sessions as it may."],
  internal: [500, "An unexpected failure; the reply carries a request_id to find it in the log."],
  sandbox_unavailable: [500, "The sandbox could not be set up, so the command did not run."],
  overloaded: [503, "The server is out of connections or file descriptors."],
  out_of_resources: [503, "The server is out of file descriptors; nothing was started."],
  shutting_down: [503, "The server is shutting down; nothing new is started."],
  spawner_failed: [
    503,
    "The worker starting the command died; nothing of it runs. A retry gets a fresh worker.",
  ],
  client_gone: [
    408,
    "The caller went away mid-call (never answered: its output waits for the next call).",
  ],
  stdin_closed: [409, "The session's stdin was closed (^D on a pipe session)."],
  stdin_full: [429, "More input is queued for the session than it reads; the limit is 1 MiB."],
  idempotency_conflict: [422, "The Idempotency-Key was used with a different body."],
  too_many_requests: [
    429,
    "Over the WebSocket: more requests in flight on one connection than it may have.",
  ],
  upgrade_required: [
    426,
    "GET /v1/ws takes a WebSocket upgrade, on the WebSocket port that /healthz names.",
  ],
} as const satisfies Record<string, readonly [number, string]>;

/** An error code of {@link ERRORS}. */
export type ErrorCode = keyof typeof ERRORS;

/**
 * Who may call an operation: anyone who reaches the server (past the Host/Origin guard), any
 * authenticated caller (an agent, scoped to its own, or the operator), or the operator alone.
 */
export type Caller = "anyone" | "agent" | "operator";

/** One route of the API. */
export interface Operation {
  method: "get" | "post" | "delete";
  /** The path as Hono registers it (`:name` parameters). */
  path: string;
  tag: string;
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
  /** The success status (200 unless said); none for an operation without a result. */
  status?: 200 | 201 | 204;
  /** The JSON result. */
  result?: z.ZodType;
  /** A `text/plain` form of the result, and when it is given. */
  text?: string;
  /** Server-sent events (`text/event-stream`): what they carry. */
  events?: string;
  /** Errors beyond those every route of its kind can give (added by {@link apiDocument}). */
  errors?: ErrorCode[];
}

const SessionId = SessionIdParam.describe("A session id.");

const StreamQuery = z.strictObject({
  encoding: z.enum(["base64"]).optional()
    .describe("base64: output events carry base64 bytes instead of UTF-8 text."),
});

const OutputQuery = z.strictObject({
  since: z.string().regex(/^\d+$/).optional()
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
  version: z.string(),
}).describe("Also: live sessions, what the sandbox can enforce per profile, the history's state.");

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
  Same<z.output<typeof CreatedAgentSchema>, ReturnType<Service["createAgent"]>>
>;

const EXEC_TEXT = "With Accept: text/plain, the result as Codex shows it to a model.";
const SESSION_ERRORS: ErrorCode[] = ["invalid_request", "unknown_session"];

/** The API, route by route. */
export const OPERATIONS: readonly Operation[] = [
  {
    method: "get",
    path: "/healthz",
    tag: "server",
    summary: "Health and what the sandbox can enforce",
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
    events: "`begin`, `interaction`, `end`, `approval_requested`, `approval_decided` and " +
      "`agent_revoked` events, each with the agent it concerns; an agent sees only its own, " +
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
    query: HistoryQuery,
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
      "unsubscribe; output is pushed while subscribed.",
    caller: "agent",
    events: "After the upgrade: JSON-RPC responses, and `output`, `gap` and `exit` notifications.",
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
    method: "get",
    path: "/mcp",
    tag: "mcp",
    summary: "Not served: the MCP endpoint is stateless",
    caller: "agent",
    errors: ["method_not_allowed"],
  },
  {
    method: "delete",
    path: "/mcp",
    tag: "mcp",
    summary: "Not served: the MCP endpoint is stateless",
    caller: "agent",
    errors: ["method_not_allowed"],
  },
  {
    method: "post",
    path: "/dashboard/sign-out",
    tag: "dashboard",
    summary: "End the dashboard's browser session (the cookie's holder)",
    caller: "anyone",
    status: 204,
  },
];

/**
 * Routes the app serves that are not API operations, each with the reason it is not in the
 * document: pages and their static files, which a browser loads.
 */
export const NOT_API: ReadonlyMap<string, string> = new Map([
  ["GET /", "the dashboard's HTML page (and its one-time ?token= sign-in exchange)"],
  ["GET /dashboard/:file", "the dashboard's static files (scripts, styles)"],
  ["GET /docs", "the HTML page that renders this document"],
  ["GET /docs/:file", "that page's static files (Swagger UI, its init script)"],
]);

/** `/v1/sessions/:id` as OpenAPI writes it: `/v1/sessions/{id}`. */
export function openApiPath(honoPath: string): string {
  return honoPath.replace(/:([A-Za-z0-9_]+)/g, "{$1}");
}

/** The errors an operation can give: those of every route of its kind, then its own. */
export function operationErrors(op: Operation): ErrorCode[] {
  const codes: ErrorCode[] = ["forbidden_host", "forbidden_origin"];
  if (op.caller !== "anyone") codes.push("unauthorized", "forbidden_peer");
  if (op.method === "post") codes.push("unsupported_media_type");
  if (op.body) codes.push("invalid_request", "payload_too_large");
  if (op.params || op.query) codes.push("invalid_request");
  codes.push(...op.errors ?? [], "internal", "overloaded");
  return [...new Set(codes)];
}

const CALLERS: Record<Caller, string> = {
  anyone: "Anyone who reaches the server (no token).",
  agent: "An agent (scoped to its own sessions, approvals and history) or the operator.",
  operator: "The operator alone.",
};

function errorResponses(codes: ErrorCode[]): Record<string, unknown> {
  const byStatus = new Map<number, ErrorCode[]>();
  for (const code of codes) {
    const status = ERRORS[code][0];
    byStatus.set(status, [...byStatus.get(status) ?? [], code]);
  }
  return Object.fromEntries(
    [...byStatus].sort(([a], [b]) => a - b).map(([status, group]) => [String(status), {
      description: group.map((code) => `${code}: ${ERRORS[code][1]}`).join(" "),
      content: {
        "application/json": {
          schema: jsonSchema(
            z.object({
              error: z.object({
                code: z.enum(group),
                message: z.string(),
                request_id: z.string().optional(),
              }),
            }),
            "output",
          ),
        },
      },
    }]),
  );
}

function success(op: Operation): Record<string, unknown> {
  const content: Record<string, unknown> = {};
  if (op.result) content["application/json"] = { schema: jsonSchema(op.result, "output") };
  if (op.text) content["text/plain"] = { schema: { type: "string", description: op.text } };
  if (op.events) {
    content["text/event-stream"] = { schema: { type: "string", description: op.events } };
  }
  const status = op.status ?? 200;
  if (status !== 204 && Object.keys(content).length === 0) return {}; // it only ever fails
  return {
    [String(status)]: {
      description: status === 204 ? "Done; no content." : op.summary,
      ...(Object.keys(content).length ? { content } : {}),
    },
  };
}

function parameters(op: Operation): unknown[] {
  const path = Object.entries(op.params ?? {}).map(([name, schema]) => {
    const json = jsonSchema(schema, "input");
    return { name, in: "path", required: true, description: json.description, schema: json };
  });
  if (!op.query) return path;
  const query = jsonSchema(op.query, "input") as {
    properties: Record<string, { description?: string }>;
    required?: string[];
  };
  return [
    ...path,
    ...Object.entries(query.properties).map(([name, schema]) => ({
      name,
      in: "query",
      required: query.required?.includes(name) ?? false,
      description: schema.description,
      schema,
    })),
  ];
}

function operation(op: Operation): Record<string, unknown> {
  const body = op.body ?? op.passBody;
  const params = parameters(op);
  return {
    operationId: `${op.method}${
      op.path.replace(/[^A-Za-z0-9]+(.)?/g, (_, c: string | undefined) => c?.toUpperCase() ?? "")
    }`,
    tags: [op.tag],
    summary: op.summary,
    description: [CALLERS[op.caller], op.description].filter(Boolean).join(" "),
    "x-uexec-caller": op.caller,
    security: op.caller === "anyone" ? [] : [{ bearer: [] }, { dashboard: [] }],
    ...(params.length ? { parameters: params } : {}),
    ...(body
      ? {
        requestBody: {
          required: true,
          content: { "application/json": { schema: jsonSchema(body, "input") } },
        },
      }
      : {}),
    responses: { ...success(op), ...errorResponses(operationErrors(op)) },
  };
}

/** The OpenAPI 3.1 document of `operations` (the API's, unless a test gives others). */
export function apiDocument(
  operations: readonly Operation[] = OPERATIONS,
): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const op of operations) {
    const path = openApiPath(op.path);
    paths[path] = { ...paths[path], [op.method]: operation(op) };
  }
  return {
    openapi: "3.1.0",
    info: {
      title: "uexec",
      version: VERSION,
      description: "Shell commands for AI agents in real PTYs under a Linux kernel sandbox. " +
        "Every route is behind the Host/Origin guard; see each operation for who may call it.",
    },
    tags: [...new Set(operations.map((op) => op.tag))].map((name) => ({ name })),
    security: [{ bearer: [] }, { dashboard: [] }],
    components: {
      securitySchemes: {
        bearer: {
          type: "http",
          scheme: "bearer",
          description: "An agent's token (agent.token, or one POST /v1/agents made) or the " +
            "operator's (operator.token).",
        },
        dashboard: {
          type: "apiKey",
          in: "cookie",
          name: "uexec_session_<port>",
          description: "The operator's dashboard sign-in cookie (from the dashboard's own page).",
        },
      },
    },
    paths,
  };
}
