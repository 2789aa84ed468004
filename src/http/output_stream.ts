/**
 * A session's output as a resumable Server-Sent Events stream. Every `output` event carries as
 * its `id:` the byte offset after its bytes; a client that reconnects with `Last-Event-ID` gets
 * exactly the bytes after that offset while the session's output ring still holds them, and
 * otherwise one `gap` event (`{ bytes }`, the number lost) and then what follows (as text, the
 * gap also counts the parts of characters it cut, on either side, so every byte is accounted
 * for: an output event's id plus the next gap's bytes is that gap's id). The stream
 * pulls from the ring only as fast as the client reads, so a slow client costs no memory
 * beyond the ring: when it falls more than the ring behind, it gets a `gap` event.
 * The stream ends with an `exit` event once the child closed and everything was sent, and without
 * one as soon as the caller's credential ends (`watch`: an agent revoked, a dashboard browser
 * session signed out).
 *
 * It never takes output from the session (exec/write collection is unaffected) and never
 * queues more than one event ahead of the client.
 *
 * @module
 */

import { CharCarry } from "../output/carry.ts";
import { nextBoundary } from "../output/utf8.ts";
import type { Session } from "../sessions/session.ts";

/** Most bytes in one `output` event. */
const EVENT_BYTES = 64 * 1024;
const KEEPALIVE_MS = 15_000;

/** Options of a session output stream. */
export interface OutputStreamOptions {
  /** The offset to start from (a `Last-Event-ID`); the current end when absent. */
  from?: number;
  /** Send raw bytes as base64 instead of text. */
  base64: boolean;
  /**
   * Calls `end` when the caller may no longer read the session (its credential ended); returns
   * the unwatch, called when the stream stops.
   */
  watch?: (end: () => void) => () => void;
}

const encoder = new TextEncoder();

function frame(event: string, data: unknown, id?: number): Uint8Array {
  const idLine = id === undefined ? "" : `id: ${id}\n`;
  return encoder.encode(`event: ${event}\n${idLine}data: ${JSON.stringify(data)}\n\n`);
}

/** Raw bytes as base64. */
export function encodeBase64(bytes: Uint8Array): string {
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

/** The SSE response streaming `session`'s output from `opts.from`. */
export function outputStream(session: Session, opts: OutputStreamOptions): Response {
  const ring = session.ring;
  let sent = opts.from ?? ring.end;
  const carry = new CharCarry();
  const decoder = new TextDecoder();
  let wake: (() => void) | undefined;
  let keepalive: ReturnType<typeof setInterval> | undefined;
  const unlisten = session.listen({ output: () => wake?.(), ended: () => wake?.() });
  let unwatch = () => {};
  const stop = () => {
    clearInterval(keepalive);
    unlisten();
    unwatch();
    wake?.();
  };
  let stopped = false;
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      unwatch = opts.watch?.(() => {
        if (stopped) return;
        stopped = true;
        stop();
        controller.close();
      }) ?? unwatch;
      if (stopped) return;
      controller.enqueue(encoder.encode(": connected\n\n"));
      keepalive = setInterval(() => {
        if ((controller.desiredSize ?? 0) > 0) {
          controller.enqueue(encoder.encode(": keepalive\n\n"));
        }
      }, KEEPALIVE_MS);
    },
    async pull(controller) {
      while (!stopped) {
        const ended = session.exit !== undefined;
        const got = ring.read(sent, EVENT_BYTES);
        sent = got.from + got.bytes.length;
        if (got.lost > 0) {
          // As text, a character cut by the gap is lost whole: what was carried of it before
          // the gap and its continuation bytes after it are counted in the gap.
          const cut = opts.base64 ? 0 : nextBoundary(got.bytes, 0);
          const bytes = got.lost + carry.rest.length + cut;
          carry.drop();
          got.bytes = got.bytes.subarray(cut);
          controller.enqueue(frame("gap", { bytes }, got.from + cut));
        }
        const final = ended && sent === ring.end;
        if (got.bytes.length > 0 || (final && carry.rest.length > 0)) {
          if (opts.base64) {
            controller.enqueue(frame("output", { base64: encodeBase64(got.bytes) }, sent));
            return;
          }
          const text = carry.complete(got.bytes, final);
          if (text.length > 0) {
            const data = { text: decoder.decode(text) };
            controller.enqueue(frame("output", data, sent - carry.rest.length));
            return;
          }
        }
        if (got.lost > 0) return;
        if (final) {
          controller.enqueue(frame("exit", { exit_code: session.exit!.code }));
          stopped = true;
          stop();
          controller.close();
          return;
        }
        const { promise, resolve } = Promise.withResolvers<void>();
        wake = resolve;
        await promise;
        wake = undefined;
      }
    },
    cancel() {
      stopped = true;
      stop();
    },
  }, { highWaterMark: 1 });
  return new Response(body, {
    headers: {
      "content-type": "text/event-stream",
      "cache-control": "no-cache",
      "x-accel-buffering": "no",
    },
  });
}
