/**
 * The two tools as OpenAI function-calling definitions, generated from the same zod schemas
 * that validate requests, so what an agent is told and what the server accepts never drift.
 *
 * @module
 */

import { z } from "zod";
import { ExecBody, WriteBody } from "./schemas.ts";

/** A function-calling tool definition. */
export interface ToolDefinition {
  type: "function";
  function: { name: string; description: string; parameters: Record<string, unknown> };
}

function parameters(schema: z.ZodType): Record<string, unknown> {
  const { $schema: _, ...rest } = z.toJSONSchema(schema, { io: "input" });
  return rest;
}

/** `exec_command` and `write_stdin`. */
export function toolDefinitions(): ToolDefinition[] {
  return [
    {
      type: "function",
      function: {
        name: "exec_command",
        description:
          "Runs a command in a PTY, returning output or a session ID for ongoing interaction.",
        parameters: parameters(ExecBody),
      },
    },
    {
      type: "function",
      function: {
        name: "write_stdin",
        description:
          "Writes characters to an existing unified exec session and returns recent output.",
        parameters: parameters(WriteBody),
      },
    },
  ];
}
