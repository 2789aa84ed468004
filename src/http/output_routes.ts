/**
 * The routes of resumable output: `GET /v1/sessions/{id}/stream` (SSE with byte offsets as event
 * ids, `Last-Event-ID` to resume) and `GET /v1/sessions/{id}/output?since=N` (what the session's
 * history holds from offset N, and the offset to ask from next). Both read the history only:
 * neither takes output away from `write_stdin`. Routes only translate: the core decides who may
 * see which session.
 *
 * @module
 */

import type { Context, Hono } from "hono";
import { decimalText } from "../decimal_text.ts";
import { describeIssues, SessionIdParam } from "../service/schemas.ts";
import type { Principal } from "../service/principal.ts";
import type { Service } from "../service/service.ts";
import { completeLength } from "../output/utf8.ts";
import { InvalidRequestError } from "../errors.ts";
import { encodeBase64, outputStream } from "./output_stream.ts";

const Offset = decimalText(0, Number.MAX_SAFE_INTEGER);

function offset(raw: string | undefined, field: string): number | undefined {
  if (raw === undefined) return undefined;
  const parsed = Offset.safeParse(raw);
  if (!parsed.success) {
    throw new InvalidRequestError(`${field}: must be a byte offset (an integer >= 0)`);
  }
  return parsed.data;
}

function sessionId(c: Context): number {
  const parsed = SessionIdParam.safeParse(c.req.param("id"));
  if (!parsed.success) throw new InvalidRequestError(`id: ${describeIssues(parsed.error)}`);
  return parsed.data;
}

const decoder = new TextDecoder();

/** Register the output routes; `who` authenticates the caller. */
export function registerOutputRoutes(
  // deno-lint-ignore no-explicit-any
  app: Hono<any>,
  service: Service,
  who: (c: Context) => Principal,
): void {
  app.get("/v1/sessions/:id/stream", (c) => {
    const principal = who(c);
    const id = sessionId(c);
    const from = offset(c.req.header("last-event-id"), "Last-Event-ID");
    const session = service.session(principal, id);
    if (from !== undefined && from > session.ring.end) {
      throw new InvalidRequestError(
        `Last-Event-ID: offset ${from} is past the end of the output (${session.ring.end})`,
      );
    }
    return outputStream(session, {
      from,
      base64: c.req.query("encoding") === "base64",
      // Ends when the caller's credential does, as its event stream does.
      watch: (end) => service.subscribe(principal, () => {}, end),
    });
  });

  app.get("/v1/sessions/:id/output", (c) => {
    const principal = who(c);
    const id = sessionId(c);
    const since = offset(c.req.query("since"), "since");
    const got = service.output(principal, id, since);
    const base64 = c.req.query("encoding") === "base64";
    // Text stops after the last complete character; the rest comes with the next `since`.
    const length = base64 || got.exitCode !== undefined
      ? got.bytes.length
      : completeLength(got.bytes);
    const bytes = got.bytes.subarray(0, length);
    return c.json({
      session_id: id,
      since: got.from,
      lost_bytes: got.lost,
      end: got.from + length,
      ...(base64 ? { base64: encodeBase64(bytes) } : { output: decoder.decode(bytes) }),
      exited: got.exitCode !== undefined,
      ...(got.exitCode !== undefined ? { exit_code: got.exitCode } : {}),
    });
  });
}
