/**
 * The route layer's handling of unexpected failures, in-process through Hono's `app.request`:
 * a core that throws stands in for a fault that cannot be produced on demand (under
 * descriptor exhaustion Deno itself panics).
 *
 * @module
 */

import assert from "node:assert/strict";
import { createApp } from "../../../src/http/routes.ts";
import { OPERATOR } from "../../../src/service/principal.ts";
import type { Service } from "../../../src/service/service.ts";
import { Logger } from "../../../src/log.ts";

Deno.test("an unexpected error answers 500 internal with a request id, and is logged", async () => {
  let calls = 0;
  const service = {
    authenticate: (token: string) => token === "t" ? OPERATOR : undefined,
    vouchedFor: () => undefined,
    sessions() {
      calls++;
      if (calls === 1) throw new Error("disk on fire");
      return [];
    },
  } as unknown as Service;
  const app = createApp({ service, health: () => ({}) });
  const auth = { headers: { authorization: "Bearer t" } };
  const logged: unknown[][] = [];
  const original = console.error;
  console.error = (...args: unknown[]) => logged.push(args);
  let res: Response;
  try {
    res = await app.request("/v1/sessions", auth);
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
  const again = await app.request("/v1/sessions", auth);
  assert.equal(again.status, 200);
  assert.deepEqual(await again.json(), { sessions: [] });
});

Deno.test("a 500's request id is the one in its x-request-id header and its log line", async () => {
  const service = {
    authenticate: (token: string) => token === "t" ? OPERATOR : undefined,
    vouchedFor: () => undefined,
    sessions() {
      throw new Error("disk on fire");
    },
  } as unknown as Service;
  const lines: string[] = [];
  const app = createApp({
    service,
    health: () => ({}),
    log: new Logger("json", (l) => lines.push(l)),
  });
  const original = console.error;
  console.error = () => {};
  let res: Response;
  try {
    res = await app.request("/v1/sessions", { headers: { authorization: "Bearer t" } });
  } finally {
    console.error = original;
  }
  assert.equal(res.status, 500);
  const id = (await res.json()).error.request_id;
  assert.match(id, /^[0-9a-f-]{36}$/);
  assert.equal(res.headers.get("x-request-id"), id);
  const logged = lines.map((l) => JSON.parse(l)).filter((l) => l.msg === "request");
  assert.deepEqual(logged.map((l) => [l.request_id, l.status]), [[id, 500]]);
});
