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
