/**
 * Where each HTTP/1.1 request begins and ends in a client's byte stream, for the listener's
 * relay (see listener.ts): it collects each request head, parses what the relay needs of it
 * (method, target, headers) and then passes the body through by its framing (Content-Length,
 * or chunked with its trailers), so that the next head is found where the server will find it.
 *
 * It must never let a request whose framing it cannot tell pass: both Content-Length and
 * Transfer-Encoding, differing or malformed lengths, a transfer coding that does not end in
 * chunked, an HTTP version other than 1.x, folded header lines and heads beyond the bound are
 * a {@link FramingError} (with the status that answers it). Body bytes pass untouched.
 *
 * @module
 */

/** A request head as the client sent it. */
export interface RequestHead {
  method: string;
  target: string;
  version: string;
  /** Header lines in order, names as sent. */
  headers: [string, string][];
}

/** What the stream holds next: a complete head, or body bytes of the request before. */
export type Segment = { head: RequestHead } | { body: Uint8Array };

/**
 * A request the relay cannot frame; `status` answers it and the connection is closed. Not an
 * `ApiError`: it is answered on the raw connection before any route sees a request (with HTTP
 * statuses such as 431 and 505 that no operation gives), never by a front door.
 */
export class FramingError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

/** The largest request head (request line and header lines). */
export const MAX_HEAD = 64 * 1024;
/** The longest chunk-size line or trailer line. */
const MAX_LINE = 8 * 1024;

const latin1 = new TextDecoder("latin1");

type State =
  | { at: "head" }
  | { at: "length"; left: number }
  | { at: "chunk-size" }
  | { at: "chunk-data"; left: number }
  | { at: "chunk-end"; left: number }
  | { at: "trailers" };

/** One connection's request stream. */
export class RequestFraming {
  #state: State = { at: "head" };
  /** Bytes of an unfinished head or line. */
  #held = new Uint8Array(0);

  /** Whether a head has started but is not complete (the header timeout's business). */
  get inHead(): boolean {
    return this.#state.at === "head" && this.#held.length > 0;
  }

  /** Whether the stream is between requests (no head started, no body left). */
  get between(): boolean {
    return this.#state.at === "head" && this.#held.length === 0;
  }

  /**
   * The segments that `bytes` complete, in order, up to and including the first complete head;
   * `rest` is what follows that head, unread (push it next). Throws {@link FramingError}.
   */
  push(bytes: Uint8Array): { segments: Segment[]; rest: Uint8Array } {
    const out: Segment[] = [];
    let data = bytes;
    while (data.length > 0) {
      const s = this.#state;
      if (s.at === "length" || s.at === "chunk-data") {
        const n = Math.min(s.left, data.length);
        out.push({ body: data.subarray(0, n) });
        data = data.subarray(n);
        s.left -= n;
        if (s.left === 0) {
          this.#state = s.at === "length" ? { at: "head" } : { at: "chunk-end", left: 2 };
        }
        continue;
      }
      if (s.at === "chunk-end") {
        const n = Math.min(s.left, data.length);
        const expect = "\r\n".slice(2 - s.left, 2 - s.left + n);
        if (latin1.decode(data.subarray(0, n)) !== expect) {
          throw new FramingError(400, "a chunk must end with CRLF");
        }
        out.push({ body: data.subarray(0, n) });
        data = data.subarray(n);
        s.left -= n;
        if (s.left === 0) this.#state = { at: "chunk-size" };
        continue;
      }
      // A head or a line: collect up to its end.
      const head = s.at === "head";
      const [found, rest] = this.#collect(data, head);
      data = rest;
      if (found === undefined) break;
      if (head) {
        const text = latin1.decode(found);
        if (text.trim() === "") continue; // Empty lines before a request are skipped.
        const parsed = parseHead(text);
        out.push({ head: parsed });
        this.#state = bodyState(parsed);
        return { segments: out, rest: data };
      }
      out.push({ body: found });
      const line = latin1.decode(found).replace(/\r?\n$/, "");
      if (s.at === "chunk-size") {
        const m = /^([0-9a-fA-F]{1,15})(;.*)?$/.exec(line);
        if (!m) throw new FramingError(400, "malformed chunk size");
        const size = parseInt(m[1], 16);
        this.#state = size === 0 ? { at: "trailers" } : { at: "chunk-data", left: size };
      } else if (line === "") this.#state = { at: "head" };
    }
    return { segments: out, rest: data };
  }

  /**
   * Add `data` to the held bytes up to the end of a head (an empty line) or of one line; the
   * whole of it when found, and the bytes after it.
   */
  #collect(data: Uint8Array, head: boolean): [Uint8Array | undefined, Uint8Array] {
    const start = this.#held.length;
    const all = new Uint8Array(start + data.length);
    all.set(this.#held);
    all.set(data, start);
    const end = head ? headEnd(all, Math.max(0, start - 3)) : lineEnd(all, start);
    if ((end < 0 ? all.length : end) > (head ? MAX_HEAD : MAX_LINE)) {
      throw new FramingError(head ? 431 : 400, head ? "request head too large" : "line too long");
    }
    if (end < 0) {
      this.#held = all;
      return [undefined, new Uint8Array(0)];
    }
    this.#held = new Uint8Array(0);
    return [all.subarray(0, end), data.subarray(end - start)];
  }
}

/** The end (exclusive) of the first empty line at or after `from`, or -1. */
function headEnd(bytes: Uint8Array, from: number): number {
  for (let i = from; i < bytes.length; i++) {
    if (bytes[i] !== 0x0a) continue;
    // A line that is empty: "\n" right at the start, or after "\n" or "\n\r".
    if (i === 0 || bytes[i - 1] === 0x0a) return i + 1;
    if (bytes[i - 1] === 0x0d && (i === 1 || bytes[i - 2] === 0x0a)) return i + 1;
  }
  return -1;
}

function lineEnd(bytes: Uint8Array, from: number): number {
  const at = bytes.indexOf(0x0a, Math.max(0, from - 1));
  return at < 0 ? -1 : at + 1;
}

function parseHead(text: string): RequestHead {
  const lines = text.replace(/^(\r?\n)+/, "").split(/\r?\n/);
  while (lines.at(-1) === "") lines.pop();
  const m = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+) (\S+) HTTP\/(1\.[01])$/.exec(lines[0] ?? "");
  if (!m) {
    if (/ HTTP\/\d/.test(lines[0] ?? "")) {
      throw new FramingError(505, "only HTTP/1.0 and HTTP/1.1 are served");
    }
    throw new FramingError(400, "malformed request line");
  }
  const headers: [string, string][] = [];
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(":");
    if (colon <= 0 || /^[ \t]/.test(line)) throw new FramingError(400, "malformed header line");
    // Only spaces and tabs are trimmed: trim() would take a byte 0xa0 (a no-break space in
    // latin1), the end of many UTF-8 characters.
    headers.push([line.slice(0, colon), line.slice(colon + 1).replace(/^[ \t]+|[ \t]+$/g, "")]);
  }
  return { method: m[1], target: m[2], version: m[3], headers };
}

/** The value of the header `name` (joined with ", " when repeated), or undefined. */
export function header(head: RequestHead, name: string): string | undefined {
  const values = head.headers.filter(([n]) => n.toLowerCase() === name).map(([, v]) => v);
  return values.length > 0 ? values.join(", ") : undefined;
}

function bodyState(head: RequestHead): State {
  const te = header(head, "transfer-encoding");
  const cl = header(head, "content-length");
  if (te !== undefined) {
    if (cl !== undefined) {
      throw new FramingError(
        400,
        "a request may not have both Content-Length and Transfer-Encoding",
      );
    }
    const codings = te.toLowerCase().split(",").map((c) => c.trim());
    if (codings.at(-1) !== "chunked" || codings.indexOf("chunked") !== codings.length - 1) {
      throw new FramingError(400, "a request's transfer coding must end in chunked");
    }
    return { at: "chunk-size" };
  }
  if (cl === undefined) return { at: "head" };
  const values = new Set(cl.split(",").map((v) => v.trim()));
  const [value] = values;
  if (values.size !== 1 || !/^\d{1,15}$/.test(value)) {
    throw new FramingError(400, "malformed Content-Length");
  }
  const left = Number(value);
  return left === 0 ? { at: "head" } : { at: "length", left };
}
