/**
 * The dashboard's files, embedded at load time: its own plain ES modules, page and style from
 * `static/`, and xterm.js (`@xterm/xterm`, pinned in deno.json) from the npm package, so the page
 * needs no CDN, works offline and no build step runs. A fixed table: a request can name only
 * these paths, never a file on disk.
 *
 * @module
 */

import xtermJs from "@xterm/xterm/lib/xterm.mjs" with { type: "text" };
import xtermCss from "@xterm/xterm/css/xterm.css" with { type: "text" };
import agentsJs from "./static/agents.js" with { type: "text" };
import apiJs from "./static/api.js" with { type: "text" };
import appJs from "./static/app.js" with { type: "text" };
import approvalsJs from "./static/approvals.js" with { type: "text" };
import domJs from "./static/dom.js" with { type: "text" };
import egressJs from "./static/egress.js" with { type: "text" };
import historyJs from "./static/history.js" with { type: "text" };
import indexHtml from "./static/index.html" with { type: "text" };
import sessionsJs from "./static/sessions.js" with { type: "text" };
import signinHtml from "./static/signin.html" with { type: "text" };
import styleCss from "./static/style.css" with { type: "text" };
import terminalJs from "./static/terminal.js" with { type: "text" };
import themeJs from "./static/theme.js" with { type: "text" };

/** A file served under `/dashboard/`. */
export interface Asset {
  body: string;
  type: string;
}

const JS = "text/javascript; charset=utf-8";
const CSS = "text/css; charset=utf-8";

/** The page shell (static: it holds no data and no token). */
export const INDEX_HTML = indexHtml;

/** The page an old token link gets; `{{ message }}` is replaced by an HTML-escaped message. */
export const SIGNIN_HTML = signinHtml;

/** The files under `/dashboard/`, by name. */
export const ASSETS: ReadonlyMap<string, Asset> = new Map([
  ["app.js", { body: appJs, type: JS }],
  ["api.js", { body: apiJs, type: JS }],
  ["dom.js", { body: domJs, type: JS }],
  ["sessions.js", { body: sessionsJs, type: JS }],
  ["terminal.js", { body: terminalJs, type: JS }],
  ["egress.js", { body: egressJs, type: JS }],
  ["approvals.js", { body: approvalsJs, type: JS }],
  ["history.js", { body: historyJs, type: JS }],
  ["agents.js", { body: agentsJs, type: JS }],
  ["theme.js", { body: themeJs, type: JS }],
  ["style.css", { body: styleCss, type: CSS }],
  // The source map it names is not shipped; drop the comment so no browser asks for it.
  ["xterm.mjs", { body: xtermJs.replace(/\n\/\/# sourceMappingURL=\S+\s*$/, "\n"), type: JS }],
  ["xterm.css", { body: xtermCss, type: CSS }],
]);
