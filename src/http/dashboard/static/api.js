/**
 * The dashboard's calls to the server's own HTTP API, and the one credential they carry: the
 * browser session id the sign-in gave, kept in memory and in `sessionStorage` (which browsers
 * key by origin, port included, so no page of another port can read it) and sent as
 * `Authorization: Bearer` on every call, live streams included (`openEventStream`, on `fetch`:
 * `EventSource` cannot send a header). It must never put the credential anywhere else (no cookie,
 * no URL, no `localStorage`), never send it to another origin, and never hold the operator's
 * token.
 *
 * @module
 */

const STORED = "uexec.dashboard.session";

/** The session id, or undefined when signed out. */
let session = readStored();

function readStored() {
  try {
    return globalThis.sessionStorage?.getItem(STORED) ?? undefined;
  } catch {
    return undefined; // Storage turned off: the session lives in memory only.
  }
}

function store(id) {
  session = id;
  try {
    if (id === undefined) globalThis.sessionStorage?.removeItem(STORED);
    else globalThis.sessionStorage?.setItem(STORED, id);
  } catch { /* Storage turned off: memory only. */ }
}

function authorization() {
  return session === undefined ? {} : { authorization: `Bearer ${session}` };
}

/** Whether the page holds a session id (it may still have expired on the server). */
export function hasSession() {
  return session !== undefined;
}

/** A refused call: its HTTP status, the API's error code and message. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** Call `method path` with an optional JSON body; returns the parsed JSON reply. */
export async function api(method, path, body) {
  const init = {
    method,
    credentials: "omit",
    headers: { accept: "application/json", ...authorization() },
  };
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  const text = await res.text();
  let data;
  try {
    data = JSON.parse(text);
  } catch {
    data = undefined;
  }
  if (!res.ok) {
    throw new ApiError(
      res.status,
      data?.error?.code ?? `http_${res.status}`,
      data?.error?.message ?? `${method} ${path} answered ${res.status}`,
    );
  }
  return data;
}

/** Exchange a sign-in link's one-time code for a browser session (replacing any held). */
export async function signIn(code) {
  store(undefined);
  const { session: id } = await api("POST", "/dashboard/sign-in", { code });
  store(id);
}

/** End the browser session on the server and forget it here. */
export async function signOut() {
  try {
    await api("POST", "/dashboard/sign-out", {});
  } finally {
    store(undefined);
  }
}

/**
 * A Server-Sent Events parser (the WHATWG "event stream interpretation"): fed decoded text in
 * chunks of any size, it calls `dispatch(type, data, lastEventId)` for each complete event and
 * `retry(ms)` for a `retry:` field. Lines end with CRLF, LF or CR; a CR at the end of a chunk
 * waits for the next one (it may be half of a CRLF).
 */
export class EventStreamParser {
  #pending = "";
  #type = "";
  #data = "";
  #dataSeen = false;
  /** The last `id:` seen (sent back as `Last-Event-ID` on a reconnect). */
  lastEventId = "";

  /**
   * @param {(type: string, data: string, lastEventId: string) => void} dispatch
   * @param {(ms: number) => void} [retry]
   */
  constructor(dispatch, retry = () => {}) {
    this.dispatch = dispatch;
    this.retry = retry;
  }

  /** Feed decoded text. */
  push(text) {
    const buffer = this.#pending + text;
    const ends = /\r\n|\r|\n/g;
    let start = 0;
    for (let m = ends.exec(buffer); m; m = ends.exec(buffer)) {
      if (m[0] === "\r" && m.index === buffer.length - 1) break;
      this.#line(buffer.slice(start, m.index));
      start = ends.lastIndex;
    }
    this.#pending = buffer.slice(start);
  }

  /** The stream ended (or broke): an event not yet terminated by a blank line is dropped. */
  reset() {
    this.#pending = "";
    this.#type = "";
    this.#data = "";
    this.#dataSeen = false;
  }

  #line(line) {
    if (line === "") {
      const { type, data, seen } = { type: this.#type, data: this.#data, seen: this.#dataSeen };
      this.#type = "";
      this.#data = "";
      this.#dataSeen = false;
      if (seen) this.dispatch(type || "message", data, this.lastEventId);
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.#type = value;
    else if (field === "data") {
      this.#data = this.#dataSeen ? `${this.#data}\n${value}` : value;
      this.#dataSeen = true;
    } else if (field === "id") {
      if (!value.includes("\0")) this.lastEventId = value;
    } else if (field === "retry") {
      if (/^\d+$/.test(value)) this.retry(Number(value));
    }
  }
}

const CONNECTING = 0;
const OPEN = 1;
const CLOSED = 2;
/** The reconnection time until the server sets one with `retry:` (the spec leaves it open). */
const DEFAULT_RETRY_MS = 1000;

/**
 * What `EventSource` does, on `fetch` so that the request carries the session's `Authorization`:
 * `open`, `error` and each named event (a `MessageEvent` with `data` and `lastEventId`), the
 * `onopen`/`onmessage`/`onerror` properties, `readyState`, `close()`. A stream that ends or
 * breaks is opened again after the reconnection time (the spec's, as `EventSource` waits), with
 * `Last-Event-ID`; an answer that is not a 200 event stream (401 after "Sign out", 404 for an
 * ended session) closes it for good, as it does `EventSource`.
 */
class EventStream extends EventTarget {
  CONNECTING = CONNECTING;
  OPEN = OPEN;
  CLOSED = CLOSED;
  readyState = CONNECTING;
  /** @type {((event: Event) => void) | null} */
  onopen = null;
  /** @type {((event: MessageEvent) => void) | null} */
  onmessage = null;
  /** @type {((event: Event) => void) | null} */
  onerror = null;
  #abort = new AbortController();
  #retryMs = DEFAULT_RETRY_MS;
  #parser;

  constructor(url) {
    super();
    this.url = new URL(url, globalThis.location?.href).href;
    this.#parser = new EventStreamParser(
      (type, data, lastEventId) => {
        if (this.readyState !== OPEN) return;
        const origin = new URL(this.url).origin;
        this.#fire(new MessageEvent(type, { data, lastEventId, origin }));
      },
      (ms) => this.#retryMs = ms,
    );
    this.#run();
  }

  /** Stop for good: the request is aborted and nothing more is dispatched. */
  close() {
    this.readyState = CLOSED;
    this.#abort.abort();
  }

  #fire(event) {
    this.dispatchEvent(event);
    const handler = this[`on${event.type}`];
    if (["open", "message", "error"].includes(event.type) && typeof handler === "function") {
      handler.call(this, event);
    }
  }

  async #run() {
    const { signal } = this.#abort;
    while (this.readyState !== CLOSED) {
      try {
        const headers = { accept: "text/event-stream", ...authorization() };
        if (this.#parser.lastEventId) headers["last-event-id"] = this.#parser.lastEventId;
        const res = await fetch(this.url, {
          headers,
          credentials: "omit",
          cache: "no-store",
          signal,
        });
        const type = res.headers.get("content-type") ?? "";
        if (res.status !== 200 || !/^text\/event-stream\b/i.test(type)) {
          await res.body?.cancel();
          if (this.readyState === CLOSED) return;
          this.readyState = CLOSED;
          this.#fire(new Event("error"));
          return;
        }
        if (this.readyState === CLOSED) return;
        this.readyState = OPEN;
        this.#fire(new Event("open"));
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        for (let r = await reader.read(); !r.done; r = await reader.read()) {
          this.#parser.push(r.value);
        }
      } catch {
        // A network failure or the abort of close(): the same as the stream ending.
      }
      this.#parser.reset();
      if (this.readyState === CLOSED) return;
      this.readyState = CONNECTING;
      this.#fire(new Event("error"));
      if (this.readyState === CLOSED) return;
      await new Promise((resolve) => {
        const done = () => {
          clearTimeout(timer);
          signal.removeEventListener("abort", done);
          resolve();
        };
        const timer = setTimeout(done, this.#retryMs);
        signal.addEventListener("abort", done);
      });
    }
  }
}

/**
 * Open the Server-Sent Events stream at `path` (this server's), authenticated like every call;
 * the result is shaped like an `EventSource`.
 */
export function openEventStream(path) {
  return new EventStream(path);
}
