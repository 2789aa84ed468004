/**
 * Reading Server-Sent Events in tests: connect, then wait for events matching a predicate.
 *
 * @module
 */

import { TextLineStream } from "./lines.ts";

/** One received event. */
export interface SseEvent {
  event: string;
  /** The event's `id:` line, when it had one. */
  id?: string;
  // deno-lint-ignore no-explicit-any
  data: any;
}

/** An open SSE connection. */
export interface SseClient {
  /** Resolve with all events received until `done(events)` holds. */
  until(done: (events: SseEvent[]) => boolean): Promise<SseEvent[]>;
  close(): Promise<void>;
}

/** Connect to an SSE endpoint; resolves once the server's first comment line arrived. */
export async function connectSse(
  url: string,
  headers: Record<string, string> = {},
): Promise<SseClient> {
  const controller = new AbortController();
  const res = await fetch(url, { headers, signal: controller.signal });
  if (res.status !== 200) throw new Error(`SSE ${url}: ${res.status} ${await res.text()}`);
  const reader = res.body!.pipeThrough(new TextDecoderStream()).pipeThrough(new TextLineStream())
    .getReader();
  const first = await reader.read();
  if (first.value !== ": connected") throw new Error(`unexpected first line ${first.value}`);
  const events: SseEvent[] = [];
  let name = "message";
  let id: string | undefined;
  return {
    async until(done) {
      while (!done(events)) {
        const { value, done: ended } = await reader.read();
        if (ended) throw new Error(`stream ended; got ${JSON.stringify(events)}`);
        if (value.startsWith("event: ")) name = value.slice(7);
        else if (value.startsWith("id: ")) id = value.slice(4);
        else if (value.startsWith("data: ")) {
          const data = JSON.parse(value.slice(6));
          events.push(id === undefined ? { event: name, data } : { event: name, id, data });
          id = undefined;
        }
      }
      return events;
    },
    async close() {
      controller.abort();
      await reader.cancel().catch(() => {});
    },
  };
}
