/**
 * `GET /v1/ws`: the WebSocket front door's upgrade. The caller is authenticated as on every
 * route (the `Authorization: Bearer` credential; never a sandboxed peer), and an
 * upgrade carrying any `Origin` but the server's own is refused: browsers apply no CORS to
 * WebSockets, so an origin allowed for CORS (`UEXEC_ALLOWED_ORIGINS`) is refused here too
 * (cross-site WebSocket hijacking). Translation only: the connection runs operations of the core.
 *
 * @module
 */

import type { Context, Hono } from "hono";
import type { Principal } from "../service/principal.ts";
import type { Service } from "../service/service.ts";
import { ApiError, InvalidRequestError } from "../errors.ts";
import { MAX_MESSAGE, type RemoteSessions, serveSocket } from "../ws/connection.ts";
import { CrossSiteError, UnauthorizedError } from "./auth.ts";
import { OPEN } from "../ws/socket.ts";
import type { ConnectionInfo } from "./connection_relay.ts";

/** The WebSocket endpoint's path, on the HTTP port. */
export const WS_PATH = "/v1/ws";

/** A plain GET to the WebSocket endpoint (426 `upgrade_required`). */
class UpgradeRequiredError extends ApiError {
  readonly code = "upgrade_required";
  constructor() {
    super(`GET ${WS_PATH} takes a WebSocket upgrade (Upgrade: websocket)`);
  }
}

/** Register the WebSocket route on `app`. */
export function wsRoutes(
  app: Hono<{ Bindings: Deno.ServeHandlerInfo | undefined }>,
  service: Service,
  who: (c: Context) => Principal,
  remote?: RemoteSessions,
): void {
  app.get(WS_PATH, (c) => {
    const origin = c.req.header("origin");
    const own = `http://${c.req.header("host") ?? ""}`;
    if (origin !== undefined && origin.toLowerCase() !== own.toLowerCase()) {
      throw new CrossSiteError(
        `a WebSocket upgrade may carry no Origin but the server's own (${own}), got ${
          JSON.stringify(origin)
        }`,
      );
    }
    const principal = who(c);
    if (c.req.header("upgrade")?.toLowerCase() !== "websocket") throw new UpgradeRequiredError();
    const upgrade = (c.env as ConnectionInfo | undefined)?.upgrade;
    if (!upgrade) {
      throw new InvalidRequestError(
        "a WebSocket upgrade must be the first request of its connection",
      );
    }
    return upgrade({ maxMessage: MAX_MESSAGE }, (socket) => {
      // The request is gone once upgraded: later requests check that its credential is still
      // registered (a revoked agent's connection is refused and closed, also once another
      // agent is minted under its name).
      serveSocket(socket, service, () => {
        if (!service.isCurrent(principal)) throw new UnauthorizedError();
        return principal;
      }, remote);
      // And it is closed as soon as the credential is revoked, even while the client is silent.
      const unsubscribe = service.subscribe(principal, () => {}, () => {
        if (socket.readyState === OPEN) socket.close(1008, "credential no longer valid");
      });
      socket.addCloseListener(unsubscribe);
    });
  });
}
