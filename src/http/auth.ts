/**
 * Authentication of HTTP requests: the bearer credential from `Authorization` (a token, or a
 * dashboard browser session's id), turned into a principal by the application core, and the
 * defense-in-depth refusal of requests whose TCP peer is a sandboxed process (even one holding a
 * valid token). Nothing a browser sends by itself (a cookie) authenticates anyone. It must never
 * log or echo a token.
 *
 * @module
 */

import { ApiError } from "../errors.ts";

/** No or a wrong token (401 `unauthorized`). */
export class UnauthorizedError extends ApiError {
  readonly code = "unauthorized";
  constructor() {
    super("missing or wrong bearer token");
  }
}

/** A request from inside the sandbox (403 `forbidden_peer`). */
export class SandboxedPeerError extends ApiError {
  readonly code = "forbidden_peer";
  constructor() {
    super("requests from sandboxed commands are refused");
  }
}

/**
 * The token of an `Authorization: Bearer <token>` header, or undefined.
 *
 * Hand-written rather than Hono's `bearerAuth`: that middleware checks a token against a fixed
 * list or a callback and answers for itself (400 for a malformed header, a text body with
 * `WWW-Authenticate`), while here a credential (an agent's token or a browser session's id) is
 * turned into a principal by the core on each route, and every refusal is the API's JSON error.
 */
export function bearerToken(header: string | undefined | null): string | undefined {
  const match = /^Bearer ([\x21-\x7e]+)$/.exec(header ?? "");
  return match ? match[1] : undefined;
}

/** A WebSocket upgrade from a page of another origin (403 `forbidden_origin`). */
export class CrossSiteError extends ApiError {
  readonly code = "forbidden_origin";
}
