/**
 * One session's output pushed over a WebSocket: `output {session_id, offset, text|base64}`
 * notifications as the bytes arrive, then one `exit {session_id, exit_code}` once all of it was
 * delivered. `offset` is the byte offset of the notification's first byte in everything the
 * session printed, so a reader can tell that nothing was lost. In text form a character split
 * between two reads goes out whole with the second.
 *
 * Backpressure: while the socket has more than its bound queued (a client that does not read),
 * output is dropped, not queued; as soon as the queue drained below half the bound (the
 * socket's drain, not the session's next output), one `gap {session_id, offset, bytes}` names
 * the bytes skipped (also sent before `exit`), and output resumes after it. The
 * dropped output stays with the session for `write_stdin` polls: a subscription never takes
 * output away. It must never queue more than the bound plus one read's worth per session.
 *
 * @module
 */

import { CharCarry } from "../output/carry.ts";
import type { Session, SessionListener } from "../sessions/session.ts";
import { notificationFrame } from "./json_rpc.ts";

/** Where notifications go, and how much is queued there. */
export interface Outbox {
  send(frame: string): void;
  readonly bufferedAmount: number;
  /** Call `listener` each time some of the queue was written; returns its removal. */
  onDrain(listener: () => void): () => void;
}

/** Queued bytes beyond which output is dropped. */
export const QUEUE_BOUND = 4 * 1024 * 1024;
/** Queued bytes below which a dropping subscription resumes. */
const RESUME_BELOW = QUEUE_BOUND / 2;

const decoder = new TextDecoder();

/** Push `session`'s output to `outbox` from now on; returns the unsubscribe function. */
export function subscribe(
  session: Session,
  outbox: Outbox,
  encoding: "text" | "base64",
  onEnd: () => void,
): () => void {
  const sessionId = session.id;
  const carry = encoding === "text" ? new CharCarry() : undefined;
  /** The bytes dropped since `from`, while the client did not read. */
  let gap: { offset: number; bytes: number } | undefined;
  const notify = (method: string, params: Record<string, unknown>) =>
    outbox.send(notificationFrame(method, { session_id: sessionId, ...params }));
  const closeGap = () => {
    if (gap) notify("gap", gap);
    gap = undefined;
  };
  // The client caught up: it learns of the gap now, not when the session prints again.
  const stopDrain = outbox.onDrain(() => {
    if (gap && outbox.bufferedAmount < RESUME_BELOW) closeGap();
  });
  const push = (bytes: Uint8Array, offset: number, final: boolean) => {
    if (!carry) {
      if (bytes.length > 0) notify("output", { offset, base64: bytes.toBase64() });
      return;
    }
    const start = offset - carry.rest.length;
    const whole = carry.complete(bytes, final);
    if (whole.length > 0) notify("output", { offset: start, text: decoder.decode(whole) });
  };
  const listener: SessionListener = {
    output(bytes, offset) {
      const queued = outbox.bufferedAmount;
      if (gap) {
        if (queued >= RESUME_BELOW) {
          gap.bytes += bytes.length;
          return;
        }
        closeGap();
      } else if (queued > QUEUE_BOUND) {
        const held = carry?.rest.length ?? 0;
        carry?.drop();
        gap = { offset: offset - held, bytes: held + bytes.length };
        return;
      }
      push(bytes, offset, false);
    },
    ended(status) {
      if (gap) {
        gap.bytes += carry?.rest.length ?? 0;
        carry?.drop();
        closeGap();
      } else {
        push(new Uint8Array(), session.offset, true);
      }
      notify("exit", { exit_code: status.code });
      stopDrain();
      onEnd();
    },
  };
  // A session that already ended tells no listener again: its exit follows the answer.
  const ended = session.exit;
  if (ended) queueMicrotask(() => listener.ended!(ended));
  const unlisten = session.listen(listener);
  return () => {
    stopDrain();
    unlisten();
  };
}
