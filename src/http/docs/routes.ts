/**
 * `GET /openapi.json` (the API's OpenAPI 3.1 document, see ../openapi.ts) and `GET /docs` (Swagger
 * UI rendering it, every file served from here, so it works offline and behind a firewall).
 * Both are open like `/healthz`: they describe the API and hold nothing secret; the Host/Origin
 * guard still applies. The page runs under the Content-Security-Policy of every page (page_headers.ts) (scripts only
 * from this server, no inline script). It must never serve data or a file not in the table.
 *
 * @module
 */

import type { Env, Hono } from "hono";
import { apiDocument } from "../openapi.ts";
import { pageHeaders } from "../page_headers.ts";
import { DOCS_ASSETS, DOCS_HTML } from "./assets.ts";

/** Register `/openapi.json`, `/docs` and its files on `app`. */
export function docsRoutes<E extends Env>(app: Hono<E>): void {
  let document: string | undefined;
  app.get("/openapi.json", (c) => {
    document ??= JSON.stringify(apiDocument());
    return c.body(document, 200, { "content-type": "application/json" });
  });
  app.get("/docs", pageHeaders, () =>
    new Response(DOCS_HTML, {
      headers: { "cache-control": "no-store", "content-type": "text/html; charset=utf-8" },
    }));
  app.get("/docs/:file", pageHeaders, (c) => {
    const asset = DOCS_ASSETS.get(c.req.param("file"));
    if (!asset) return c.notFound();
    return new Response(asset.body, {
      headers: { "cache-control": "no-cache", "content-type": asset.type },
    });
  });
}
