/**
 * The headers every HTML page of the server and the files it loads carry (the dashboard and the
 * API docs page), as Hono's `secureHeaders` middleware: a strict Content-Security-Policy
 * (scripts and connections only to this server, no inline script, no framing, no plugins), no
 * referrer, no sniffing, no framing, same-origin opener and resource policies. Caching is the
 * page's own (`cache-control`: `no-store` for a page, `no-cache` for its files).
 *
 * It must never loosen a header for one page: a page that needs more gets its own reviewed
 * header set, not a wider one for all.
 *
 * @module
 */

import type { MiddlewareHandler } from "hono";
import { secureHeaders } from "hono/secure-headers";

/**
 * Scripts and connections only to this server, no inline script, no framing, no plugins.
 * Styles allow inline: xterm.js sizes and colours its rows through `<style>` elements it makes.
 */
const CSP = {
  defaultSrc: ["'self'"],
  scriptSrc: ["'self'"],
  styleSrc: ["'self'", "'unsafe-inline'"],
  connectSrc: ["'self'"],
  imgSrc: ["'self'", "data:"],
  fontSrc: ["'self'"],
  objectSrc: ["'none'"],
  baseUri: ["'none'"],
  formAction: ["'self'"],
  frameAncestors: ["'none'"],
};

/** The middleware of every HTML page and of the files it loads. */
export const pageHeaders: MiddlewareHandler = secureHeaders({
  contentSecurityPolicy: CSP,
  xFrameOptions: "DENY",
  referrerPolicy: "no-referrer",
  crossOriginOpenerPolicy: "same-origin",
  crossOriginResourcePolicy: "same-origin",
  // Served over plain HTTP (on loopback, or behind the operator's TLS proxy, which sets its
  // own): a browser ignores HSTS there, and the server cannot know the name it is reached by.
  strictTransportSecurity: false,
});
