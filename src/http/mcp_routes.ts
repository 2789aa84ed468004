/**
 * `/mcp`: the MCP front door over Streamable HTTP, stateless (every POST gets a fresh MCP server
 * and transport for its caller, so no MCP session outlives a request; uexec's own sessions live
 * in the core as over `/v1`). The caller is authenticated exactly as on `/v1`, by the same
 * function, before anything of MCP runs; the body is read here within the same 1 MiB limit as
 * `/v1` and checked (see mcp/messages.ts) before the SDK parses it. GET (a server-to-client stream) and DELETE (ending an
 * MCP session) have nothing to serve in stateless mode and answer 405.
 *
 * @module
 */

import type { Context, Env, Hono } from "hono";
// @ts-types="@modelcontextprotocol/sdk/server/webStandardStreamableHttp"
import { WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js";
import { checkMessages, RPC, rpcError } from "../mcp/messages.ts";
import { mcpServer } from "../mcp/server.ts";
import { InvalidRequestError, PayloadTooLargeError } from "../errors.ts";
import type { Principal } from "../service/principal.ts";
import type { Service } from "../service/service.ts";

/** Register `/mcp` on `app`; `who` authenticates a request (throwing when it may not pass). */
export function mcpRoutes<E extends Env>(
  app: Hono<E>,
  service: Service,
  who: (c: Context<E>) => Principal,
  readBody: (req: Request) => Promise<unknown>,
): void {
  app.post("/mcp", async (c) => {
    const principal = who(c);
    let body: unknown;
    try {
      body = await readBody(c.req.raw);
    } catch (err) {
      if (err instanceof PayloadTooLargeError) {
        return c.json(rpcError(null, RPC.invalidRequest, `Invalid Request: ${err.message}`), 413);
      }
      if (err instanceof InvalidRequestError) {
        return c.json(rpcError(null, RPC.parse, `Parse error: ${err.message}`), 400);
      }
      throw err;
    }
    const refused = checkMessages(body);
    if (refused) return c.json(refused, 400);
    const server = mcpServer(service, principal);
    const transport = new WebStandardStreamableHTTPServerTransport();
    await server.connect(transport);
    return transport.handleRequest(c.req.raw, { parsedBody: body });
  });
  app.on(["GET", "DELETE"], "/mcp", (c) => {
    who(c);
    return c.json(
      {
        error: {
          code: "method_not_allowed",
          message: "this MCP endpoint is stateless: POST JSON-RPC messages to it",
        },
      },
      405,
      { allow: "POST" },
    );
  });
}
