/**
 * `GET /v1/sessions/{id}/screen`: what a `screen` session's terminal shows now, as JSON
 * (`session_id`, `rows`, `cols`, `cursor`, `lines`, `alternate`, `scrolled`, `scrolled_lost`).
 * Translation only: the caller is authenticated first and the core decides what it may see.
 *
 * @module
 */

import type { Context, Hono } from "hono";
import type { Principal } from "../service/principal.ts";
import type { Service } from "../service/service.ts";

/** Register the screen route on `app`. */
export function screenRoutes(
  app: Hono<{ Bindings: Deno.ServeHandlerInfo | undefined }>,
  who: (c: Context) => Principal,
  sessionId: (c: Context) => number,
  service: Service,
): void {
  app.get("/v1/sessions/:id/screen", async (c) => {
    const principal = who(c);
    const id = sessionId(c);
    return c.json({ session_id: id, ...await service.screen(principal, id) });
  });
}
