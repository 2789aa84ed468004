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

/** The JSON Schema of what `schema` accepts (`input`) or produces (`output`). */
export function jsonSchema(schema: z.ZodType, io: "input" | "output"): Record<string, unknown> {
  const { $schema: _, ...rest } = z.toJSONSchema(schema, { io });
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
        parameters: jsonSchema(ExecBody, "input"),
      },
    },
    {
      type: "function",
      function: {
        name: "write_stdin",
        description:
          "Writes characters to an existing unified exec session and returns recent output.",
        parameters: jsonSchema(WriteBody, "input"),
      },
    },
  ];
}
