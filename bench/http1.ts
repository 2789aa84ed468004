/**
 * HTTP transports for the bench client. The default is a lean HTTP/1.1 keep-alive client over
 * Deno.connect (TCP_NODELAY, one request in flight per connection, a pool of idle
 * connections): on these 2-core machines fetch spends about 75-80 µs of client CPU per request
 * against about 17 µs here, and the client shares the cores with the server under test.
 * `fetch` (which also keeps connections alive) stays available for comparison.
 * @module
 */

/** A response: status and the whole body as text. */
export interface HttpResponse {
  status: number;
  text: string;
}

/** Sends one request; `body` is JSON text or undefined. */
export type Transport = (
  method: string,
  path: string,
  body: string | undefined,
  signal: AbortSignal,
) => Promise<HttpResponse>;

/** Makes the transport for one server: its base URL and the bearer token to send. */
export type TransportFactory = (base: string, token: string) => Transport;

/** Requests through Deno's fetch. */
export function fetchTransport(base: string, token: string): Transport {
  const auth = { authorization: `Bearer ${token}` };
  return async (method, path, body, signal) => {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: body === undefined ? auth : { ...auth, "content-type": "application/json" },
      body,
      signal,
    });
    return { status: res.status, text: await res.text() };
  };
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const HEAD_END = [13, 10, 13, 10];

/** Index just past "\r\n\r\n" in `buf[0..len)`, or -1. */
function headEnd(buf: Uint8Array, len: number): number {
  outer: for (let i = 0; i + 4 <= len; i++) {
    for (let k = 0; k < 4; k++) if (buf[i + k] !== HEAD_END[k]) continue outer;
    return i + 4;
  }
  return -1;
}

/** One keep-alive connection; one request at a time. */
class Connection {
  #conn: Deno.TcpConn;
  #buf = new Uint8Array(64 * 1024);
  #len = 0;

  /** The last answer said `Connection: close`: the connection is not used again. */
  closing = false;

  constructor(conn: Deno.TcpConn) {
    this.#conn = conn;
    conn.setNoDelay(true);
  }

  close(): void {
    try {
      this.#conn.close();
    } catch { /* already closed */ }
  }

  async #write(bytes: Uint8Array): Promise<void> {
    for (let off = 0; off < bytes.length;) off += await this.#conn.write(bytes.subarray(off));
  }

  /** Reads more bytes into the buffer (growing it); throws on EOF. */
  async #fill(): Promise<void> {
    if (this.#len === this.#buf.length) {
      const bigger = new Uint8Array(this.#buf.length * 2);
      bigger.set(this.#buf);
      this.#buf = bigger;
    }
    const n = await this.#conn.read(this.#buf.subarray(this.#len));
    if (n === null) throw new Error("server closed the connection");
    this.#len += n;
  }

  async request(head: string, body: Uint8Array): Promise<HttpResponse> {
    await this.#write(body.length > 0 ? concat(encoder.encode(head), body) : encoder.encode(head));
    let end: number;
    while ((end = headEnd(this.#buf, this.#len)) < 0) await this.#fill();
    const headText = decoder.decode(this.#buf.subarray(0, end));
    const status = Number(headText.slice(9, 12));
    const length = headText.match(/\r\ncontent-length:\s*(\d+)/i);
    if (!length) throw new Error(`response without content-length: ${headText.slice(0, 200)}`);
    const total = end + Number(length[1]);
    while (this.#len < total) await this.#fill();
    const text = decoder.decode(this.#buf.subarray(end, total));
    this.#buf.copyWithin(0, total, this.#len);
    this.#len -= total;
    // A server (or a router: nginx after `keepalive_requests`) that closes after this answer.
    this.closing = /\r\nconnection:\s*close\b/i.test(headText);
    return { status, text };
  }
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

/** Requests over pooled raw HTTP/1.1 keep-alive connections to `base` (http://host:port). */
export function rawTransport(base: string, token: string): Transport {
  const { hostname, port } = new URL(base);
  const idle: Connection[] = [];
  return async (method, path, body, signal) => {
    signal.throwIfAborted();
    const conn = idle.pop() ?? new Connection(await Deno.connect({ hostname, port: Number(port) }));
    const bytes = body === undefined ? new Uint8Array() : encoder.encode(body);
    const head = `${method} ${path} HTTP/1.1\r\nhost: ${hostname}:${port}\r\n` +
      `authorization: Bearer ${token}\r\n` +
      (body === undefined ? "" : "content-type: application/json\r\n") +
      `content-length: ${bytes.length}\r\n\r\n`;
    const onAbort = () => conn.close();
    signal.addEventListener("abort", onAbort);
    try {
      const res = await conn.request(head, bytes);
      if (conn.closing) conn.close();
      else idle.push(conn);
      return res;
    } catch (e) {
      conn.close();
      throw signal.aborted ? signal.reason : e;
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  };
}
