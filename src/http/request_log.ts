/**
 * The request log: one line per HTTP request with its id, the agent that made it, the method,
 * the route pattern (never the raw path with its ids and query), the status and the
 * milliseconds it took. It must never log a token, a header, a body or command output.
 *
 * @module
 */

import type { MiddlewareHandler } from "hono";
import { routePath } from "hono/route";
import type { Logger } from "../log.ts";
import { ownerOf, type Principal } from "../service/principal.ts";

const callers = new WeakMap<Request, string>();
const ids = new WeakMap<Request, string>();

/** The id `req` was logged under (and answered with in `x-request-id`), if it is logged. */
export function requestIdOf(req: Request): string | undefined {
  return ids.get(req);
}

/** Remember who made `req`, for its log line. */
export function noteCaller(req: Request, principal: Principal): void {
  callers.set(req, ownerOf(principal));
}

/**
 * The middleware that logs each request once it is answered.
 *
 * Its id is always the server's own, hence not Hono's `requestId`: that middleware adopts a
 * well-formed `X-Request-Id` the client sends, so a caller could have its requests logged, and a
 * 500 answered, under an id of its choosing (another request's).
 */
export function requestLog(log: Logger): MiddlewareHandler {
  return async (c, next) => {
    const started = performance.now();
    const id = crypto.randomUUID();
    ids.set(c.req.raw, id);
    c.header("x-request-id", id);
    try {
      await next();
    } finally {
      log.info("request", {
        request_id: id,
        agent: callers.get(c.req.raw) ?? null,
        method: c.req.method,
        route: routePath(c),
        status: c.res.status,
        ms: Math.round((performance.now() - started) * 100) / 100,
      });
    }
  };
}
