/**
 * Authentication of HTTP requests: the bearer token from `Authorization`, turned into a
 * principal by the application core, and the defense-in-depth refusal of requests whose TCP
 * peer is a sandboxed process (even one holding a valid token). It must never log or echo a
 * token.
 *
 * @module
 */

/** No or a wrong token (401 `unauthorized`). */
export class UnauthorizedError extends Error {
  readonly status = 401;
  readonly code = "unauthorized";
  constructor() {
    super("missing or wrong bearer token");
  }
}

/** A request from inside the sandbox (403 `forbidden_peer`). */
export class SandboxedPeerError extends Error {
  readonly status = 403;
  readonly code = "forbidden_peer";
  constructor() {
    super("requests from sandboxed commands are refused");
  }
}

/** The token of an `Authorization: Bearer <token>` header, or undefined. */
export function bearerToken(header: string | undefined | null): string | undefined {
  const match = /^Bearer ([\x21-\x7e]+)$/.exec(header ?? "");
  return match ? match[1] : undefined;
}

/**
 * The name of the cookie that carries a dashboard sign-in session id. Browsers send a host's
 * cookies to every port of it, so the name carries the port of the `Host` the browser used:
 * two servers on one host keep apart.
 */
export function sessionCookieName(host: string | undefined | null): string {
  const port = /:(\d{1,5})$/.exec(host ?? "")?.[1];
  return port ? `uexec_session_${port}` : "uexec_session";
}

/** The dashboard session id in a `Cookie` header sent to `host`, or undefined. */
export function sessionCookie(
  header: string | undefined | null,
  host: string | undefined | null,
): string | undefined {
  const name = sessionCookieName(host);
  for (const part of (header ?? "").split(";")) {
    const eq = part.indexOf("=");
    if (eq > 0 && part.slice(0, eq).trim() === name) {
      const value = part.slice(eq + 1).trim();
      if (/^[\x21-\x7e]{1,256}$/.test(value)) return value;
    }
  }
  return undefined;
}

/** A cookie-authenticated request that did not come from the dashboard's own page (403). */
export class CrossSiteError extends Error {
  readonly status = 403;
  readonly code = "forbidden_origin";
}

const SAFE_METHODS = new Set(["GET", "HEAD"]);

/**
 * Refuses a cookie-authenticated request that a page of another origin could have made: a
 * state change must carry an `Origin` equal to the server's own (`http://` and the `Host`), and a
 * browser's `Sec-Fetch-Site`, when sent, must say `same-origin` (so no `<script>`/`<img>` of a
 * same-site page on another port rides on the cookie).
 */
export function checkCookieOrigin(req: Request): void {
  const host = req.headers.get("host") ?? "";
  const origin = req.headers.get("origin");
  if (!SAFE_METHODS.has(req.method) && origin?.toLowerCase() !== `http://${host}`.toLowerCase()) {
    throw new CrossSiteError(
      `a cookie-authenticated ${req.method} must come from the dashboard's own origin ` +
        `(Origin: http://${host}), got ${origin === null ? "none" : JSON.stringify(origin)}`,
    );
  }
  const site = req.headers.get("sec-fetch-site");
  if (site !== null && site !== "same-origin") {
    throw new CrossSiteError(
      `a cookie-authenticated request must come from the dashboard's own page ` +
        `(Sec-Fetch-Site: ${JSON.stringify(site)})`,
    );
  }
}
