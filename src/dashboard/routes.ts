/**
 * The dashboard's front door on the server: the page shell and its files, and the sign-in
 * exchange. Opening `/?token=<operator token>` (the URL printed at start-up) opens a browser
 * session and answers 303 to `/` with an `HttpOnly`, `SameSite=Strict` cookie, so the token
 * leaves the address bar and the history at once; `Referrer-Policy: no-referrer` keeps it from
 * any other site. Everything else the page does goes through the core's HTTP API from the
 * browser, authenticated by that cookie.
 *
 * It serves only the fixed files of `assets.ts`, every page under a strict Content-Security-Policy
 * (scripts only from this server, no inline script). It must never serve data, never echo a
 * token, and never open a session for anyone but the operator.
 *
 * @module
 */

import type { Context, Hono } from "hono";
import {
  checkCookieOrigin,
  SandboxedPeerError,
  sessionCookie,
  sessionCookieName,
} from "../http/auth.ts";
import { ForbiddenError } from "../service/principal.ts";
import type { Service } from "../service/service.ts";
import { ASSETS, INDEX_HTML, SIGNIN_HTML } from "./assets.ts";

/** What the dashboard needs from the server. */
export interface DashboardDeps {
  service: Service;
  /** True when the request's TCP peer is a sandboxed process. */
  fromSandbox?(info: Deno.ServeHandlerInfo | undefined): boolean;
}

/**
 * Scripts and connections only to this server, no inline script, no framing, no plugins.
 * Styles allow inline: xterm.js sizes and colours its rows through `<style>` elements it makes.
 */
const CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "connect-src 'self'",
  "img-src 'self' data:",
  "font-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join("; ");

export const PAGE_HEADERS = {
  "content-security-policy": CSP,
  "referrer-policy": "no-referrer",
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  "cross-origin-opener-policy": "same-origin",
  "cross-origin-resource-policy": "same-origin",
  "cache-control": "no-store",
};

const HTML = "text/html; charset=utf-8";

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function signInPage(status: 401 | 403, message: string): Response {
  return new Response(SIGNIN_HTML.replace(/\{\{\s*message\s*\}\}/, escapeHtml(message)), {
    status,
    headers: { ...PAGE_HEADERS, "content-type": HTML },
  });
}

/** Register the dashboard's routes on `app`. */
export function dashboardRoutes(
  app: Hono<{ Bindings: Deno.ServeHandlerInfo | undefined }>,
  deps: DashboardDeps,
): void {
  const { service } = deps;

  app.get("/", (c) => {
    const token = c.req.query("token");
    if (token === undefined) {
      return new Response(INDEX_HTML, { headers: { ...PAGE_HEADERS, "content-type": HTML } });
    }
    return signIn(c, token);
  });

  const signIn = (c: Context, token: string): Response => {
    if (deps.fromSandbox?.(c.env)) throw new SandboxedPeerError();
    let opened;
    try {
      opened = service.signIn(token);
    } catch (err) {
      if (!(err instanceof ForbiddenError)) throw err;
      return signInPage(403, "This token may not open the dashboard: it is not the operator's.");
    }
    if (!opened) return signInPage(401, "This sign-in link is not valid (wrong or old token).");
    const cookie = `${sessionCookieName(c.req.header("host"))}=${opened.id}; HttpOnly; ` +
      `SameSite=Strict; Path=/; Max-Age=${opened.maxAgeSeconds}`;
    return new Response(null, {
      status: 303,
      headers: { ...PAGE_HEADERS, location: "/", "set-cookie": cookie },
    });
  };

  app.get("/dashboard/:file", (c) => {
    const asset = ASSETS.get(c.req.param("file"));
    if (!asset) return c.notFound();
    return new Response(asset.body, {
      headers: { ...PAGE_HEADERS, "cache-control": "no-cache", "content-type": asset.type },
    });
  });

  app.post("/dashboard/sign-out", (c) => {
    const host = c.req.header("host");
    const id = sessionCookie(c.req.header("cookie"), host);
    if (id !== undefined) {
      checkCookieOrigin(c.req.raw);
      service.signOut(id);
    }
    return new Response(null, {
      status: 204,
      headers: {
        ...PAGE_HEADERS,
        "set-cookie": `${sessionCookieName(host)}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0`,
      },
    });
  });
}
