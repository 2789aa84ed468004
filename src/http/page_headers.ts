/**
 * The headers every HTML page of the server carries (the dashboard and the API docs page): a
 * strict Content-Security-Policy (scripts and connections only to this server, no inline
 * script, no framing, no plugins), no referrer, no sniffing, no caching.
 *
 * It must never loosen a header for one page: a page that needs more gets its own reviewed
 * header set, not a wider one for all.
 *
 * @module
 */

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

/** The headers of an HTML page and of the files it loads. */
export const PAGE_HEADERS = {
  "content-security-policy": CSP,
  "referrer-policy": "no-referrer",
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  "cross-origin-opener-policy": "same-origin",
  "cross-origin-resource-policy": "same-origin",
  "cache-control": "no-store",
};
