/**
 * The WebSocket listener: `GET /v1/ws` on a port of its own, next to the HTTP listener. The HTTP
 * listener hands each connection to Deno's per-connection HTTP server, which closes a
 * connection's upgraded WebSocket as soon as the upgrade completes (Deno 2.9); Deno.serve on a
 * listener of its own keeps it open. Only the WebSocket route is served here: every other path
 * is 404, so the HTTP API's connection limits cannot be bypassed through this port.
 *
 * It must never serve anything but the upgrade route, and never listen on another host than the
 * HTTP listener's.
 *
 * @module
 */

/** A listening WebSocket endpoint. */
export interface WebSocketListener {
  readonly addr: Deno.NetAddr;
  /** `ws://host:port/v1/ws`. */
  readonly url: string;
  shutdown(): Promise<void>;
}

/** The one path served here. */
export const WS_PATH = "/v1/ws";

/** Listen on an ephemeral port of `hostname` and pass upgrade requests to `handler`. */
export function listenWebSocket(
  hostname: string,
  handler: (
    req: Request,
    info: Deno.ServeHandlerInfo<Deno.NetAddr>,
  ) => Response | Promise<Response>,
): WebSocketListener {
  const server = Deno.serve({ hostname, port: 0, onListen() {} }, (req, info) => {
    if (new URL(req.url).pathname !== WS_PATH) {
      return Response.json(
        { error: { code: "not_found", message: `this port serves only GET ${WS_PATH}` } },
        { status: 404 },
      );
    }
    return handler(req, info);
  });
  const addr = server.addr;
  const host = addr.hostname.includes(":") ? `[${addr.hostname}]` : addr.hostname;
  return {
    addr,
    url: `ws://${host === "0.0.0.0" ? "127.0.0.1" : host}:${addr.port}${WS_PATH}`,
    shutdown: () => server.shutdown(),
  };
}

/**
 * On the HTTP listener, the answer to a request for the WebSocket path (426 `upgrade_required`,
 * naming the WebSocket listener's URL), or undefined for any other request.
 */
export function elsewhere(
  req: Request,
  websocket: WebSocketListener | undefined,
): Response | undefined {
  if (!req.url.includes(WS_PATH) || new URL(req.url).pathname !== WS_PATH) return undefined;
  return Response.json({
    error: {
      code: "upgrade_required",
      message: websocket
        ? `WebSockets are served at ${websocket.url} (also in GET /healthz as websocket)`
        : "WebSockets are served on TCP servers only",
    },
  }, { status: 426 });
}
