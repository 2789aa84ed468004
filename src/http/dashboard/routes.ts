/**
 * The dashboard's front door on the server: the page shell and its files, and the sign-in. The
 * link printed at start-up (or minted by the operator, `POST /v1/dashboard/sign-in-links`)
 * carries a one-time code in its fragment (`/#code=…`, which no browser sends in a request, so
 * it reaches no log, proxy or `Referer`, and a link preview that fetches the URL cannot spend
 * it); the page posts it to `POST /dashboard/sign-in` for a browser session id, which it keeps
 * for its own origin and sends as a bearer header. No cookie is set or read.
 *
 * It serves only the fixed files of `assets.ts`, every page under a strict Content-Security-Policy
 * (scripts only from this server, no inline script). It must never serve data, never echo a
 * token, never open a session but for a code redeemed this once, and never mint a code for
 * anyone but the operator's own token.
 *
 * @module
 */

import type { Context, Hono } from "hono";
import { ApiError } from "../../errors.ts";
import { ForbiddenError, type Principal } from "../../service/principal.ts";
import { parseInput } from "../../service/schemas.ts";
import type { Service } from "../../service/service.ts";
import { bearerToken, SandboxedPeerError } from "../auth.ts";
import { readJson } from "../body.ts";
import { pageHeaders } from "../page_headers.ts";
import { ASSETS, INDEX_HTML, SIGNIN_HTML } from "./assets.ts";
import { SignInBody, signInLink } from "./schemas.ts";

/** What the dashboard needs from the server. */
export interface DashboardDeps {
  service: Service;
  /** True when the request's TCP peer is a sandboxed process. */
  fromSandbox?(info: Deno.ServeHandlerInfo | undefined): boolean;
}

const HTML = "text/html; charset=utf-8";
const MAX_BODY_BYTES = 1024 * 1024;

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function signInPage(message: string): Response {
  return new Response(SIGNIN_HTML.replace(/\{\{\s*message\s*\}\}/, escapeHtml(message)), {
    status: 400,
    headers: { "cache-control": "no-store", "content-type": HTML },
  });
}

/** A sign-in code that is unknown, already used or expired (401 `invalid_sign_in_code`). */
export class SignInCodeError extends ApiError {
  readonly code = "invalid_sign_in_code";
  constructor() {
    super(
      "This sign-in link was already used or has expired (a link works once, for a few " +
        "minutes). Ask the server for a fresh one: POST /v1/dashboard/sign-in-links with the " +
        "operator's token, or restart it for a new start-up link.",
    );
  }
}

/** Register the dashboard's routes on `app`; `who` authenticates a request. */
export function dashboardRoutes(
  app: Hono<{ Bindings: Deno.ServeHandlerInfo | undefined }>,
  deps: DashboardDeps,
  who: (c: Context) => Principal,
): void {
  const { service } = deps;

  app.get("/", pageHeaders, (c) => {
    // The old sign-in URL carried the operator's token; it opens nothing now, and says so.
    if (c.req.query("token") !== undefined) {
      return signInPage(
        "Sign-in links no longer carry the operator's token, and this one was not used. Open " +
          "the link the server prints at start-up instead.",
      );
    }
    return new Response(INDEX_HTML, {
      headers: { "cache-control": "no-store", "content-type": HTML },
    });
  });

  app.get("/dashboard/:file", pageHeaders, (c) => {
    const asset = ASSETS.get(c.req.param("file"));
    if (!asset) return c.notFound();
    return new Response(asset.body, {
      headers: { "cache-control": "no-cache", "content-type": asset.type },
    });
  });

  app.post("/dashboard/sign-in", async (c) => {
    if (deps.fromSandbox?.(c.env)) throw new SandboxedPeerError();
    const { code } = parseInput(
      SignInBody,
      await readJson(c.req.raw, MAX_BODY_BYTES, "request body exceeds 1 MiB"),
    );
    const opened = await service.dashboard.signIn(code);
    if (!opened) throw new SignInCodeError();
    return Response.json(
      { session: opened.id, expires_in_seconds: opened.maxAgeSeconds },
      { headers: { "cache-control": "no-store" } },
    );
  });

  app.post("/dashboard/sign-out", async (c) => {
    const id = bearerToken(c.req.header("authorization"));
    if (id !== undefined) await service.dashboard.signOut(id);
    return new Response(null, { status: 204, headers: { "cache-control": "no-store" } });
  });

  app.delete("/v1/dashboard/sessions", async (c) => {
    return c.json({ ended: await service.dashboard.endAll(who(c)) });
  });

  app.post("/v1/dashboard/sign-in-links", async (c) => {
    const principal = who(c);
    // A browser session may not renew itself past "Sign out" or its expiry: only the token.
    if (service.dashboard.authenticate(bearerToken(c.req.header("authorization"))!)) {
      throw new ForbiddenError(
        "a dashboard browser session cannot mint sign-in links; use the operator's token",
      );
    }
    const { code, expiresInSeconds } = await service.dashboard.mintCode(principal);
    const url = signInLink(`http://${c.req.header("host")}`, code);
    return c.json({ url, code, expires_in_seconds: expiresInSeconds }, 201, {
      "cache-control": "no-store",
    });
  });
}
