/**
 * The parameters of the WebSocket methods that have no HTTP body of their own (on HTTP the
 * session id is in the path): built from the shared schemas, so a field is checked the same
 * way on every front door. `exec_command` and `write_stdin` take the HTTP bodies as they are.
 *
 * @module
 */

import { z } from "zod";
import { ResizeBody, SessionRefBody, SignalBody } from "../service/schemas.ts";

const sessionId = SessionRefBody.shape.session_id;

/** `kill` and `unsubscribe`. */
export const SessionParams = SessionRefBody;

/** `resize`. */
export const ResizeParams = ResizeBody.extend({ session_id: sessionId });

/** `signal`. */
export const SignalParams = SignalBody.extend({ session_id: sessionId });

/** `subscribe`: output as UTF-8 `text` (the default) or as `base64` of the raw bytes. */
export const SubscribeParams = z.strictObject({
  session_id: sessionId,
  encoding: z.enum(["text", "base64"]).default("text"),
});
