/**
 * The OpenAPI 3.1 document of the HTTP API (`GET /openapi.json`), generated, never written by
 * hand, from the table of operations (operations.ts) and the error table (errors.ts). The JSON
 * Schemas come from the same function that makes `GET /v1/tools`' parameters.
 *
 * Description only: it must never hold a secret nor change what a route does.
 *
 * @module
 */

import { z } from "zod";
import { jsonSchema } from "../service/tools.ts";
import { VERSION } from "../version.ts";
import { type ErrorCode, ERRORS } from "../errors.ts";

import { type Caller, type Operation, OPERATIONS, TAGS } from "./operations.ts";

/**
 * The licence the document names (Redocly's `info-license`): the repository carries no licence
 * file, so none is granted; say so rather than name one nobody chose.
 */
const LICENSE = {
  name: "None granted: all rights reserved",
  identifier: "LicenseRef-uexec-all-rights-reserved",
};

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
  if (op.caller !== "anyone") codes.push("forbidden_node_header", "store_unavailable");
  // In a fleet, a call for another node's session is forwarded there (src/http/forward.ts).
  if (op.path.startsWith("/v1/sessions/:id") || op.path === "/v1/write_stdin") {
    codes.push("node_lost", "node_unreachable");
  }
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
  const bare = { 101: "Switching Protocols: the connection is a WebSocket.", 204: "Done." };
  if (status !== 101 && status !== 204 && Object.keys(content).length === 0) {
    throw new Error(`${op.method} ${op.path}: a ${status} needs a result, text or events`);
  }
  return {
    [String(status)]: {
      description: status === 101 || status === 204 ? bare[status] : op.summary,
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
    security: op.caller === "anyone" ? [] : [{ bearer: [] }],
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
      license: LICENSE,
    },
    servers: [{
      url: "/",
      description: "The server that serves this document (GET /v1/ws: the WebSocket port that " +
        "/healthz names).",
    }],
    tags: [...new Set(operations.map((op) => op.tag))].map((name) => ({
      name,
      description: TAGS[name],
    })),
    security: [{ bearer: [] }],
    components: {
      securitySchemes: {
        bearer: {
          type: "http",
          scheme: "bearer",
          description: "An agent's token (agent.token, or one POST /v1/agents made), the " +
            "operator's (operator.token), or a dashboard browser session's id (the operator).",
        },
      },
    },
    paths,
  };
}
