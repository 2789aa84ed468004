/**
 * The files of the API docs page (`/docs`), embedded at load time: the page and its init script
 * from `static/`, and Swagger UI (`swagger-ui-dist`, pinned in deno.json) from the npm package,
 * so the page needs no CDN and works offline. A fixed table: a request can name only these
 * files, never a path on disk.
 *
 * @module
 */

import bundleJs from "swagger-ui-dist/swagger-ui-bundle.js" with { type: "text" };
import swaggerCss from "swagger-ui-dist/swagger-ui.css" with { type: "text" };
import indexHtml from "./static/index.html" with { type: "text" };
import initJs from "./static/init.js" with { type: "text" };

/** A file served under `/docs/`. */
export interface Asset {
  body: string;
  type: string;
}

/** The page (static: it holds no data). */
export const DOCS_HTML = indexHtml;

/** The files under `/docs/`, by name. */
export const DOCS_ASSETS: ReadonlyMap<string, Asset> = new Map([
  ["init.js", { body: initJs, type: "text/javascript; charset=utf-8" }],
  ["swagger-ui-bundle.js", { body: bundleJs, type: "text/javascript; charset=utf-8" }],
  // The source map it names is not shipped; drop the comment so no browser asks for it.
  [
    "swagger-ui.css",
    { body: swaggerCss.replace(/\/\*# sourceMappingURL=\S+\s*\*\/\s*$/, ""), type: "text/css" },
  ],
]);
