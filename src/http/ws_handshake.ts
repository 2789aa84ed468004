/**
 * The server side of the WebSocket opening handshake (RFC 6455 4.2), for the connections the
 * relay upgrades itself (see listener.ts for why `Deno.upgradeWebSocket` cannot serve them):
 * whether a request asks for an upgrade, its refusal when it is malformed, and the 101 answer.
 *
 * It must never accept a handshake it has not checked, nor speak any version but 13.
 *
 * @module
 */

/** The error body of a refused handshake. */
function handshakeRefusal(status: number, message: string, headers: HeadersInit = {}): Response {
  return Response.json({ error: { code: "invalid_request", message } }, { status, headers });
}

const WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/** Whether a comma-separated header holds `token` (case-insensitive). */
export function hasToken(value: string | null | undefined, token: string): boolean {
  return (value ?? "").toLowerCase().split(",").some((t) => t.trim() === token);
}

/** A WebSocket handshake's refusal, or undefined when it is well-formed (RFC 6455 4.2.1). */
export function handshakeRefused(req: Request): Response | undefined {
  if (!hasToken(req.headers.get("connection"), "upgrade")) {
    return handshakeRefusal(400, "a WebSocket upgrade needs Connection: Upgrade");
  }
  if (req.headers.get("sec-websocket-version") !== "13") {
    return handshakeRefusal(426, "only WebSocket version 13 is served", {
      "sec-websocket-version": "13",
    });
  }
  const key = req.headers.get("sec-websocket-key") ?? "";
  let decoded: Uint8Array | undefined;
  try {
    decoded = Uint8Array.fromBase64(key);
  } catch { /* not base64 */ }
  if (decoded?.length !== 16) {
    return handshakeRefusal(
      400,
      "a WebSocket upgrade needs Sec-WebSocket-Key: the base64 of 16 random bytes",
    );
  }
  return undefined;
}

const encoder = new TextEncoder();

/** The 101 answering `req`, a handshake {@link handshakeRefused} let through. */
export async function switchingProtocols(req: Request): Promise<Uint8Array> {
  const key = req.headers.get("sec-websocket-key")!;
  const digest = await crypto.subtle.digest("SHA-1", encoder.encode(key + WS_GUID));
  return encoder.encode(
    "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n" +
      `sec-websocket-accept: ${new Uint8Array(digest).toBase64()}\r\n\r\n`,
  );
}
