/**
 * The errors a caller is answered with: one table of every machine code with its HTTP status and
 * when it is given (the OpenAPI document's error table), one base class {@link ApiError} whose
 * status comes from that table, and the errors more than one layer raises. An error specific to
 * one concern lives in that concern's module and extends the base. Every front door (HTTP,
 * WebSocket, MCP) answers an {@link ApiError} with its code and message and nothing else.
 *
 * It sits below every other module and imports nothing. A message must never carry internal
 * details (paths of the server, tokens, stacks) beyond what the caller needs to fix its request.
 *
 * @module
 */

/** Every error code the API answers with: its status and when it is given. */
export const ERRORS = {
  invalid_request: [400, "The request is malformed or a field is invalid; the message names it."],
  unauthorized: [401, "No bearer token (or dashboard session id), or a wrong one."],
  forbidden: [403, "Reserved to the operator, or beyond the agent's widest profile."],
  forbidden_peer: [403, "The request came from a sandboxed command."],
  forbidden_host: [403, "The Host is neither a loopback name nor in UEXEC_ALLOWED_HOSTS."],
  forbidden_origin: [
    403,
    "The Origin is neither the server's own nor in UEXEC_ALLOWED_ORIGINS, or a WebSocket " +
    "upgrade carried another origin than the server's own.",
  ],
  forbidden_workdir: [403, "The workdir is outside the workspace and UEXEC_ALLOWED_ROOTS."],
  protected_workdir: [403, "The workdir is inside a directory that stays read-only (.git)."],
  invalid_sign_in_code: [
    401,
    "The dashboard sign-in code is unknown, already used or expired; mint a fresh link.",
  ],
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
  insufficient_storage: [
    507,
    "The workspace's or the state directory's file system has less free space than " +
    "UEXEC_DISK_FLOOR_BYTES; nothing was started.",
  ],
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
  dashboard_off: [
    404,
    "The dashboard is off on this server (UEXEC_DASHBOARD=off); only its routes answer it.",
  ],
  idempotency_conflict: [422, "The Idempotency-Key was used with a different body."],
  forbidden_node_header: [403, "X-Uexec-Agent was sent with a credential that is no fleet node's."],
  node_lost: [410, "The fleet node that held the session is lost; the message names it."],
  node_unreachable: [503, "The fleet node that holds the session cannot be reached now."],
  store_unavailable: [503, "The fleet's store (UEXEC_STORE) was away longer than its retry bound."],
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

/** The HTTP status of an error code. */
export type ErrorStatus = (typeof ERRORS)[ErrorCode][0];

/**
 * An error the caller is answered with: its machine `code` (one of {@link ERRORS}) and the HTTP
 * status the table gives it. A subclass names its code; nothing else is needed.
 */
export abstract class ApiError extends Error {
  /** The machine code the caller gets (`{error: {code, message}}`). */
  abstract readonly code: ErrorCode;

  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }

  /** The HTTP status of {@link code}. */
  get status(): ErrorStatus {
    return ERRORS[this.code][0];
  }
}

/**
 * An error another fleet node answered a forwarded call with, passed on with its code (a code
 * this node does not know is `internal`, so nothing unlisted reaches a caller).
 */
export class RelayedError extends ApiError {
  readonly code: ErrorCode;
  constructor(code: string, message: string) {
    super(message);
    this.code = Object.hasOwn(ERRORS, code) ? code as ErrorCode : "internal";
  }
}

/** A problem with the request itself (400 `invalid_request`). */
export class InvalidRequestError extends ApiError {
  readonly code = "invalid_request";
}

/** A request body over the limit (413 `payload_too_large`). */
export class PayloadTooLargeError extends ApiError {
  readonly code = "payload_too_large";
}

/** No live session with that id (404 `unknown_session`). */
export class UnknownSessionError extends ApiError {
  readonly code = "unknown_session";
  constructor(id: number) {
    super(`Unknown session id ${id}`);
  }
}

/** The session store is full and pruning cannot make room (429 `session_limit`). */
export class SessionLimitError extends ApiError {
  readonly code = "session_limit";
}

/** The approval policy or the user refused the command (403 `rejected`). */
export class RejectedError extends ApiError {
  readonly code = "rejected";
}

/** The server is shutting down and starts nothing new (503 `shutting_down`). */
export class ShuttingDownError extends ApiError {
  readonly code = "shutting_down";
  constructor() {
    super("the server is shutting down; it starts no new commands");
  }
}

/**
 * The caller's credential was revoked after its request was let in (401 `unauthorized`, as a
 * revoked token gets): nothing more is done for it, and a command it was starting is killed.
 */
export class RevokedError extends ApiError {
  readonly code = "unauthorized";
  constructor() {
    super("the agent's token was revoked while this request was in progress");
  }
}

/** The server ran out of a system resource, e.g. file descriptors (503 `out_of_resources`). */
export class OutOfResourcesError extends ApiError {
  readonly code = "out_of_resources";
}

/**
 * The worker thread that starts the session's children died while starting this one; nothing
 * of it runs, and the next command gets a fresh worker (503 `spawner_failed`).
 */
export class SpawnerFailedError extends ApiError {
  readonly code = "spawner_failed";
}

/** The caller went away before its call was answered (never sent: nobody is listening). */
export class CallAbandonedError extends ApiError {
  readonly code = "client_gone";
  /** `sessionId`: the session the abandoned call started, whose output waits for a call. */
  constructor(readonly sessionId?: number) {
    super("the client disconnected before the call was answered");
  }
}
