/**
 * The checks every request passes before routing, against web pages and DNS rebinding: the
 * `Host` must be a loopback name or an allowed host, an `Origin` must be the server's own or an
 * allowed one, and a POST body must be declared `application/json` (so no CORS "simple
 * request" from a page, which needs no preflight, can reach a route). CORS headers are sent
 * only for configured origins.
 *
 * It must never let a refused request reach a route, and never answer with more than the
 * reason it was refused.
 *
 * @module
 */

/** What the guard allows beyond loopback. */
export interface GuardOptions {
  /** `UEXEC_ALLOWED_HOSTS`: more host names (with or without a port). */
  allowedHosts: string[];
  /** `UEXEC_ALLOWED_ORIGINS`: more origins (`scheme://host[:port]`), which also get CORS. */
  allowedOrigins: string[];
}

const LOOPBACK_HOST = /^(?:localhost|127(?:\.\d{1,3}){3}|\[::1\])(?::\d{1,5})?$/i;
const JSON_TYPE = /^application\/json\s*(?:;|$)/i;
const BODY_METHODS = new Set(["POST", "PUT", "PATCH"]);

function refusal(status: number, code: string, message: string): Response {
  return Response.json({ error: { code, message } }, { status });
}

/** A guard: a refusal `Response`, or undefined when the request may be routed. */
export type Guard = (req: Request) => Response | undefined;

/** Build the guard. */
export function requestGuard(opts: GuardOptions): Guard {
  const hosts = new Set(opts.allowedHosts.map((h) => h.toLowerCase()));
  const origins = new Set(opts.allowedOrigins.map((o) => o.toLowerCase()));
  const hostAllowed = (host: string) =>
    LOOPBACK_HOST.test(host) || hosts.has(host) || hosts.has(host.replace(/:\d+$/, ""));
  return (req) => {
    const host = (req.headers.get("host") ?? "").toLowerCase();
    if (!hostAllowed(host)) {
      return refusal(
        403,
        "forbidden_host",
        `Host ${JSON.stringify(host)} is not a loopback name; list it in UEXEC_ALLOWED_HOSTS`,
      );
    }
    const origin = req.headers.get("origin")?.toLowerCase();
    if (origin !== undefined && origin !== `http://${host}` && !origins.has(origin)) {
      return refusal(
        403,
        "forbidden_origin",
        `Origin ${
          JSON.stringify(origin)
        } may not use this server; list it in UEXEC_ALLOWED_ORIGINS`,
      );
    }
    if (origin !== undefined && origins.has(origin) && req.method === "OPTIONS") {
      return new Response(null, { status: 204, headers: corsHeaders(origin, true) });
    }
    if (BODY_METHODS.has(req.method) && !JSON_TYPE.test(req.headers.get("content-type") ?? "")) {
      return refusal(
        415,
        "unsupported_media_type",
        "request bodies must be sent as content-type: application/json",
      );
    }
    return undefined;
  };
}

/** Adds CORS headers to `res` when `req` came from a configured origin. */
export function withCors(req: Request, res: Response, opts: GuardOptions): Response {
  const origin = req.headers.get("origin")?.toLowerCase();
  if (origin === undefined || !opts.allowedOrigins.some((o) => o.toLowerCase() === origin)) {
    return res;
  }
  for (const [k, v] of Object.entries(corsHeaders(origin, false))) res.headers.set(k, v);
  return res;
}

function corsHeaders(origin: string, preflight: boolean): Record<string, string> {
  return {
    "access-control-allow-origin": origin,
    vary: "origin",
    ...(preflight
      ? {
        "access-control-allow-methods": "GET, POST, DELETE",
        "access-control-allow-headers": "authorization, content-type, accept",
        "access-control-max-age": "600",
      }
      : {}),
  };
}
