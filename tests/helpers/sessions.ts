/**
 * Session helpers shared by tests.
 *
 * @module
 */

import assert from "node:assert/strict";
import type { Client } from "./server.ts";

/** Starts `cmd` (no login shell, a 250 ms yield) and returns the id of the session left running. */
export async function execLive(
  server: Client,
  cmd: string,
  extra: Record<string, unknown> = {},
): Promise<number> {
  const r = await server.post("/v1/exec_command", {
    cmd,
    login: false,
    yield_time_ms: 250,
    ...extra,
  });
  assert.equal(typeof r.body.session_id, "number", JSON.stringify(r.body));
  return r.body.session_id as number;
}
