/**
 * The history and metrics routes: `GET /v1/history`, `GET /v1/history/{id}` and `GET /metrics`.
 * They only translate: the caller is authenticated first and the core decides what it sees
 * (an agent its own commands; metrics the operator alone).
 *
 * @module
 */

import type { Context, Hono } from "hono";
import { HistoryQuery } from "../history/query.ts";
import type { Principal } from "../service/principal.ts";
import { describeIssues } from "../service/schemas.ts";
import type { Service } from "../service/service.ts";
import { InvalidRequestError } from "../errors.ts";

/** Register the history and metrics routes; `who` authenticates a request. */
export function registerHistoryRoutes(
  // deno-lint-ignore no-explicit-any
  app: Hono<any>,
  service: Service,
  who: (c: Context) => Principal,
): void {
  app.get("/v1/history", async (c) => {
    const principal = who(c);
    const parsed = HistoryQuery.safeParse(c.req.query());
    if (!parsed.success) throw new InvalidRequestError(describeIssues(parsed.error));
    return c.json(await service.history(principal, parsed.data));
  });

  app.get("/v1/history/:id", async (c) => {
    return c.json(await service.historyEntry(who(c), c.req.param("id")));
  });

  app.get("/metrics", async (c) => {
    const { text, contentType } = await service.metrics(who(c));
    return c.body(text, 200, { "content-type": contentType });
  });
}
