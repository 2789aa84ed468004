/**
 * The WebSocket front door's wire format: JSON-RPC 2.0, one message per text frame. It reads a
 * frame into a request (or the error answering a malformed one) and writes responses,
 * errors and notifications. An operation's failure keeps what the HTTP API says about it: the
 * error's `message` is the same, and `data` carries the HTTP `code` and `status`; the JSON-RPC
 * `code` is -32602 (invalid params) for a 400 and -32000 (server error) for any other refusal.
 *
 * It must never act on a message: it only translates.
 *
 * @module
 */

import { ApiError } from "../errors.ts";

/** A request id (`null` answers a message whose id could not be read). */
export type RpcId = string | number | null;

/** A well-formed request; `id` undefined: a notification, which gets no answer. */
export interface RpcRequest {
  id?: string | number;
  method: string;
  params: unknown;
}

/** The JSON-RPC error codes this server answers with. */
export const RPC = {
  parseError: -32700,
  invalidRequest: -32600,
  methodNotFound: -32601,
  invalidParams: -32602,
  internalError: -32603,
  serverError: -32000,
} as const;

/** A JSON-RPC error object: `data` names the HTTP API's error code and status. */
export interface RpcError {
  code: number;
  message: string;
  data: { code: string; status: number; request_id?: string };
}

/** A refusal that is not the operation's own (a bad frame, an unknown method). */
export class ProtocolError extends Error {
  constructor(readonly rpcCode: number, readonly code: string, message: string) {
    super(message);
  }
}

/**
 * The request in a text frame. Throws {@link ProtocolError} (with the id when one was readable)
 * for anything that is not one JSON-RPC 2.0 request object.
 */
export function parseRequest(frame: string): RpcRequest {
  let message: unknown;
  try {
    message = JSON.parse(frame);
  } catch {
    throw new ProtocolError(RPC.parseError, "invalid_json", "the frame is not valid JSON");
  }
  if (typeof message !== "object" || message === null || Array.isArray(message)) {
    throw new ProtocolError(
      RPC.invalidRequest,
      "invalid_request",
      "a frame must hold one JSON-RPC request object (batches are not supported)",
    );
  }
  const { jsonrpc, id, method, params } = message as Record<string, unknown>;
  if (
    jsonrpc !== "2.0" || typeof method !== "string" ||
    (id !== undefined && typeof id !== "string" && typeof id !== "number")
  ) {
    throw new ProtocolError(
      RPC.invalidRequest,
      "invalid_request",
      'a request needs jsonrpc: "2.0", a string method and a string or number id',
    );
  }
  return { id, method, params: params ?? {} };
}

/** The id of a frame that failed to parse as a request, when it has a readable one. */
export function idOf(frame: string): RpcId {
  try {
    const id = (JSON.parse(frame) as { id?: unknown })?.id;
    return typeof id === "string" || typeof id === "number" ? id : null;
  } catch {
    return null;
  }
}

/**
 * The error for a failure: an operation's error (with `status` and `code`, as the HTTP API
 * answers it), a protocol error, or undefined for an unexpected one.
 */
export function rpcError(err: unknown): RpcError | undefined {
  if (err instanceof ProtocolError) {
    return { code: err.rpcCode, message: err.message, data: { code: err.code, status: 400 } };
  }
  if (err instanceof ApiError) {
    const status = err.status;
    return {
      code: status === 400 ? RPC.invalidParams : RPC.serverError,
      message: err.message,
      data: { code: err.code, status },
    };
  }
  return undefined;
}

/** The error answering an unexpected failure, logged under `requestId`. */
export function internalError(requestId: string): RpcError {
  return {
    code: RPC.internalError,
    message: "internal error",
    data: { code: "internal", status: 500, request_id: requestId },
  };
}

/** A response frame. */
export function resultFrame(id: RpcId, result: unknown): string {
  return JSON.stringify({ jsonrpc: "2.0", id, result });
}

/** An error response frame. */
export function errorFrame(id: RpcId, error: RpcError): string {
  return JSON.stringify({ jsonrpc: "2.0", id, error });
}

/** A notification frame (server to client). */
export function notificationFrame(method: string, params: unknown): string {
  return JSON.stringify({ jsonrpc: "2.0", method, params });
}
