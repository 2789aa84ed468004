/**
 * The version of uexec that every front door reports (`/healthz`, MCP `serverInfo`). A constant
 * only.
 *
 * @module
 */

/** uexec's version. */
export const VERSION = "0.2.0";
