/**
 * The errors the session layer reports to callers, each mapping to one HTTP status and code.
 * Nothing here may carry internal details beyond what the caller needs to fix the request.
 *
 * @module
 */

/** A problem with the request itself (400 `invalid_request`). */
export class InvalidRequestError extends Error {
  readonly status = 400;
  readonly code = "invalid_request";
}

/** No live session with that id (404 `unknown_session`). */
export class UnknownSessionError extends Error {
  readonly status = 404;
  readonly code = "unknown_session";
  constructor(id: number) {
    super(`Unknown session id ${id}`);
  }
}

/** The session store is full and pruning cannot make room (429 `session_limit`). */
export class SessionLimitError extends Error {
  readonly status = 429;
  readonly code = "session_limit";
}

/** The approval policy or the user refused the command (403 `rejected`). */
export class RejectedError extends Error {
  readonly status = 403;
  readonly code = "rejected";
}

/** The server is shutting down and starts nothing new (503 `shutting_down`). */
export class ShuttingDownError extends Error {
  readonly status = 503;
  readonly code = "shutting_down";
  constructor() {
    super("the server is shutting down; it starts no new commands");
  }
}

/**
 * The caller's credential was revoked after its request was let in (401 `unauthorized`, as a
 * revoked token gets): nothing more is done for it, and a command it was starting is killed.
 */
export class RevokedError extends Error {
  readonly status = 401;
  readonly code = "unauthorized";
  constructor() {
    super("the agent's token was revoked while this request was in progress");
  }
}

/** The server ran out of a system resource, e.g. file descriptors (503 `out_of_resources`). */
export class OutOfResourcesError extends Error {
  readonly status = 503;
  readonly code = "out_of_resources";
}

/**
 * The worker thread that starts the session's children died while starting this one; nothing
 * of it runs, and the next command gets a fresh worker (503 `spawner_failed`).
 */
export class SpawnerFailedError extends Error {
  readonly status = 503;
  readonly code = "spawner_failed";
}

/** The caller went away before its call was answered (never sent: nobody is listening). */
export class CallAbandonedError extends Error {
  readonly status = 408;
  readonly code = "client_gone";
  /** `sessionId`: the session the abandoned call started, whose output waits for a call. */
  constructor(readonly sessionId?: number) {
    super("the client disconnected before the call was answered");
  }
}
