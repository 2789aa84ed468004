/**
 * Server-Sent Events responses: a stream the route feeds with named events, which releases the
 * route's subscriptions as soon as the client goes away. A comment line every 15 s keeps idle
 * connections open through proxies. It never buffers without bound on its own side beyond what
 * the stream queue holds.
 *
 * @module
 */

const KEEPALIVE_MS = 15_000;

/** Send one event. */
export type SendEvent = (event: string, data: unknown) => void;

/**
 * Open an SSE response. `start` subscribes and returns its cleanup; it may call `close` to end
 * the stream from the server side.
 */
export function sseResponse(start: (send: SendEvent, close: () => void) => () => void): Response {
  const encoder = new TextEncoder();
  let cleanup: (() => void) | undefined;
  let keepalive: ReturnType<typeof setInterval> | undefined;
  let done = false;
  const stop = () => {
    if (done) return;
    done = true;
    clearInterval(keepalive);
    cleanup?.();
  };
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      const send: SendEvent = (event, data) => {
        if (done) return;
        controller.enqueue(encoder.encode(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`));
      };
      const close = () => {
        if (done) return;
        stop();
        controller.close();
      };
      keepalive = setInterval(
        () => controller.enqueue(encoder.encode(": keepalive\n\n")),
        KEEPALIVE_MS,
      );
      controller.enqueue(encoder.encode(": connected\n\n"));
      cleanup = start(send, close);
      if (done) cleanup();
    },
    cancel: stop,
  });
  return new Response(body, {
    headers: {
      "content-type": "text/event-stream",
      "cache-control": "no-cache",
      "x-accel-buffering": "no",
    },
  });
}
