/**
 * The route layer's handling of unexpected failures, in-process through Hono's `app.request`:
 * a manager that throws stands in for a fault that cannot be produced on demand (under
 * descriptor exhaustion Deno itself panics).
 *
 * @module
 */

import assert from "node:assert/strict";
import { EventBus } from "../src/events/bus.ts";
import { createApp } from "../src/http/routes.ts";
import type { SessionManager } from "../src/sessions/manager.ts";
import type { Supervisor } from "../src/sandbox/supervisor.ts";
import { ApprovalStore } from "../src/approvals/store.ts";

Deno.test("an unexpected error answers 500 internal with a request id, and is logged", async () => {
  let calls = 0;
  const manager = {
    list() {
      calls++;
      if (calls === 1) throw new Error("disk on fire");
      return [];
    },
  } as unknown as SessionManager;
  const app = createApp({
    manager,
    supervisor: {} as Supervisor,
    approvals: new ApprovalStore(),
    bus: new EventBus(),
    workspace: "/tmp",
    shell: "/bin/sh",
    health: () => ({}),
  });
  const logged: unknown[][] = [];
  const original = console.error;
  console.error = (...args: unknown[]) => logged.push(args);
  let res: Response;
  try {
    res = await app.request("/v1/sessions");
  } finally {
    console.error = original;
  }
  assert.equal(res.status, 500);
  const body = await res.json();
  assert.equal(body.error.code, "internal");
  assert.equal(body.error.message, "internal error");
  assert.match(body.error.request_id, /^[0-9a-f-]{36}$/);
  assert.equal(logged.length, 1);
  assert.equal(logged[0][0], `uexec: request ${body.error.request_id} GET /v1/sessions failed:`);
  assert.equal((logged[0][1] as Error).message, "disk on fire");
  const again = await app.request("/v1/sessions");
  assert.equal(again.status, 200);
  assert.deepEqual(await again.json(), { sessions: [] });
});
