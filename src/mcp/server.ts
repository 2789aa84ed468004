/**
 * The MCP front door's protocol side: an MCP server (one per caller) whose tools are operations
 * of the application core, for one authenticated principal. Inputs are validated by the same zod
 * schemas as the HTTP API (but for the default `output_mode`, `plain` here) and rejected with
 * the same messages; a result is the Codex text form
 * as text content plus the JSON form (the HTTP body) as `structuredContent`, matching the tool's
 * `outputSchema`; a failure is a tool error (`isError`) carrying the HTTP error's message. A call
 * that waits sends progress notifications as output arrives when the client gave a progress
 * token.
 *
 * It is transport-neutral (Streamable HTTP and stdio both connect to it) and must never decide
 * what the principal may do: the core does.
 *
 * The SDK's low-level `Server` is used rather than `McpServer.registerTool`, because the latter
 * validates arguments itself with messages of its own, which would differ from the HTTP API's.
 *
 * @module
 */

import { Server } from "@modelcontextprotocol/sdk/server";
// @ts-types="@modelcontextprotocol/sdk/types"
import {
  CallToolRequestSchema,
  type CallToolResult,
  ErrorCode,
  ListToolsRequestSchema,
  McpError,
  type Tool,
} from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";
import { ApiError } from "../errors.ts";
import type { Principal } from "../service/principal.ts";
import {
  CallResultSchema,
  KillResultSchema,
  resultText,
  screenText,
  SessionListSchema,
  SessionScreenSchema,
} from "../service/results.ts";
import {
  ExecBody,
  outputModeDefault,
  parseInput,
  SessionRefBody,
  WriteBody,
} from "../service/schemas.ts";
import type { Service } from "../service/service.ts";
import { jsonSchema, toolDefinitions } from "../service/tools.ts";
import type { OutputWatcher } from "../sessions/calls.ts";
import { SCROLLED_LOST } from "../sessions/manager.ts";
import { VERSION } from "../version.ts";
import { ProgressReporter } from "./progress.ts";

// The MCP front door's one difference from the HTTP API: `output_mode` defaults to `plain`
// (what a reader sees, without escape sequences and redraws), not `raw`.
const McpExecBody = ExecBody.extend({ output_mode: outputModeDefault("plain") });
const McpWriteBody = WriteBody.extend({ output_mode: outputModeDefault("plain") });

/** A tool's result in its two forms. */
interface Output {
  text: string;
  json: Record<string, unknown>;
}

/** What a tool call acts with. */
interface Call {
  service: Service;
  principal: Principal;
  /** Told of output as it arrives, when the client asked for progress. */
  watch: OutputWatcher | undefined;
}

/** One tool: its schemas and what a call does. */
interface ToolSpec {
  name: string;
  description: string;
  input: z.ZodType;
  output: z.ZodType;
  annotations?: Tool["annotations"];
  /** Run with the validated arguments. */
  run(args: unknown, call: Call): Promise<Output>;
}

function tool<I extends z.ZodType>(
  spec: Omit<ToolSpec, "run" | "input"> & {
    input: I;
    run(args: z.output<I>, call: Call): Promise<Output> | Output;
  },
): ToolSpec {
  return { ...spec, run: async (args, call) => await spec.run(args as z.output<I>, call) };
}

const json = (value: Record<string, unknown>): Output => ({
  text: JSON.stringify(value, null, 2),
  json: value,
});

const callResult = (result: Parameters<typeof resultText>[0]): Output => ({
  text: resultText(result),
  json: { ...result },
});

const described = new Map(toolDefinitions().map((t) => [t.function.name, t.function]));

/** The five tools. */
const TOOLS = new Map([
  tool({
    name: "exec_command",
    description: described.get("exec_command")!.description,
    input: McpExecBody,
    output: CallResultSchema,
    run: async (body, { service, principal, watch }) =>
      callResult(await service.exec(principal, body, { onOutput: watch })),
  }),
  tool({
    name: "write_stdin",
    description: described.get("write_stdin")!.description,
    input: McpWriteBody,
    output: CallResultSchema,
    run: async (body, { service, principal, watch }) =>
      callResult(await service.write(principal, body, { onOutput: watch })),
  }),
  tool({
    name: "list_sessions",
    description: "Lists your running sessions.",
    input: z.strictObject({}),
    output: SessionListSchema,
    annotations: { readOnlyHint: true },
    run: (_, { service, principal }) => json({ sessions: service.sessions(principal) }),
  }),
  tool({
    name: "kill_session",
    description: "Kills a session's whole process tree and returns the output it left.",
    input: SessionRefBody,
    output: KillResultSchema,
    annotations: { destructiveHint: true },
    run: async ({ session_id }, { service, principal }) =>
      json({ ...await service.kill(principal, session_id) }),
  }),
  tool({
    name: "read_screen",
    description: "Shows a session's terminal as it looks now, with the lines that scrolled off " +
      "since the last look (sessions started with screen: true or output_mode screen).",
    input: SessionRefBody,
    output: SessionScreenSchema,
    annotations: { readOnlyHint: true },
    run: async ({ session_id }, { service, principal }) => {
      const screen = { session_id, ...await service.screen(principal, session_id) };
      const scrolled = screen.scrolled_lost ? [SCROLLED_LOST, ...screen.scrolled] : screen.scrolled;
      return {
        text: ["Scrolled off:", ...scrolled, ...screenText(screen)].join("\n"),
        json: screen,
      };
    },
  }),
].map((t) => [t.name, t]));

/** The `tools/list` answer, the same for everyone; made once. */
const LISTED: Tool[] = [...TOOLS.values()].map((t) => ({
  name: t.name,
  description: t.description,
  inputSchema: jsonSchema(t.input, "input") as Tool["inputSchema"],
  outputSchema: jsonSchema(t.output, "output") as Tool["outputSchema"],
  ...(t.annotations ? { annotations: t.annotations } : {}),
}));

/** An MCP server whose tools act for `principal`; connect it to one transport. */
export function mcpServer(service: Service, principal: Principal): Server {
  const server = new Server(
    { name: "uexec", version: VERSION },
    { capabilities: { tools: {} } },
  );
  server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: LISTED }));
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const { name, arguments: args } = request.params;
    const spec = TOOLS.get(name);
    if (!spec) throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${name}`);
    const token = extra._meta?.progressToken;
    const progress = token === undefined
      ? undefined
      : new ProgressReporter((progress, message) =>
        extra.sendNotification({
          method: "notifications/progress",
          params: { progressToken: token, progress, message },
        })
      );
    try {
      const input = parseInput(spec.input, args ?? {});
      const out = await spec.run(input, { service, principal, watch: progress?.output });
      return {
        content: [{ type: "text", text: out.text }],
        structuredContent: out.json,
      } satisfies CallToolResult;
    } catch (err) {
      return toolError(err, name);
    } finally {
      progress?.stop();
    }
  });
  return server;
}

/** A failure as a tool error: the HTTP API's message, or an opaque one for a bug (logged). */
function toolError(err: unknown, tool: string): CallToolResult {
  let message: string;
  if (err instanceof ApiError) message = err.message;
  else {
    const requestId = crypto.randomUUID();
    console.error(`uexec: MCP call ${requestId} ${tool} failed:`, err);
    message = `internal error (request_id ${requestId})`;
  }
  return { content: [{ type: "text", text: message }], isError: true };
}
