/**
 * Approvals: the approval policy decision, the known-safe command list, and the store of
 * pending approvals. Pure logic for the HTTP layer to wire up; it must never serve HTTP or run
 * commands itself.
 *
 * @module
 */

export * from "./policy.ts";
export * from "./safe_commands.ts";
export * from "./store.ts";
