/**
 * What an MCP POST body must be before the SDK sees it: JSON-RPC requests or notifications (one,
 * or a non-empty batch) whose parameters have the shape their method needs. The SDK answers a
 * malformed `initialize` (no string `protocolVersion`, say) or a `tools/call` whose `arguments`
 * are not an object with -32603 (internal error), as if the server had failed; they are the
 * client's mistake, -32602 (invalid params), and an empty batch is -32600 (invalid request).
 *
 * Pure: it must never run a method, and never refuse a message the SDK would serve correctly.
 *
 * @module
 */

/** A JSON-RPC error response. */
export interface RpcError {
  jsonrpc: "2.0";
  id: string | number | null;
  error: { code: number; message: string };
}

/** JSON-RPC's error codes used here. */
export const RPC = { parse: -32700, invalidRequest: -32600, invalidParams: -32602 } as const;

/** An error response for `id`. */
export function rpcError(id: RpcError["id"], code: number, message: string): RpcError {
  return { jsonrpc: "2.0", id, error: { code, message } };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** What is wrong with the params of one message, if its method is one this checks. */
function paramsProblem(method: unknown, params: unknown): string | undefined {
  if (method === "initialize") {
    if (!isObject(params)) return "initialize: params must be an object";
    if (typeof params.protocolVersion !== "string") {
      return "initialize: params.protocolVersion must be a string";
    }
    if (!isObject(params.capabilities)) return "initialize: params.capabilities must be an object";
    const info = params.clientInfo;
    if (!isObject(info) || typeof info.name !== "string" || typeof info.version !== "string") {
      return "initialize: params.clientInfo must be an object with a string name and version";
    }
  } else if (method === "tools/call") {
    if (!isObject(params)) return "tools/call: params must be an object";
    if (typeof params.name !== "string") return "tools/call: params.name must be a string";
    if (params.arguments !== undefined && !isObject(params.arguments)) {
      return "tools/call: params.arguments must be an object";
    }
  }
  return undefined;
}

/**
 * The error answer for `body` (parsed JSON), or undefined when it may go to the SDK. In a batch
 * with one bad message, no message runs: each request gets an error (the good ones -32600 saying
 * why), so nothing is dropped unanswered.
 */
export function checkMessages(body: unknown): RpcError | RpcError[] | undefined {
  const batch = Array.isArray(body);
  const messages = batch ? body : [body];
  if (batch && messages.length === 0) {
    return rpcError(null, RPC.invalidRequest, "Invalid Request: an empty batch");
  }
  const problems = messages.map((m) => isObject(m) ? paramsProblem(m.method, m.params) : undefined);
  if (problems.every((p) => p === undefined)) return undefined;
  const idOf = (m: unknown): RpcError["id"] => {
    const id = isObject(m) ? m.id : undefined;
    return typeof id === "string" || typeof id === "number" ? id : null;
  };
  const errors = messages.flatMap((m, i) => {
    const problem = problems[i];
    if (problem !== undefined) return [rpcError(idOf(m), RPC.invalidParams, problem)];
    // A notification gets no answer; a request that was fine is not run either.
    if (!isObject(m) || m.id === undefined) return [];
    return [
      rpcError(idOf(m), RPC.invalidRequest, "not run: another message of its batch was invalid"),
    ];
  });
  return batch ? errors : errors[0];
}
