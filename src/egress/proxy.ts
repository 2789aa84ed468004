/**
 * The egress proxy's handling of one client connection: an HTTP forward proxy for `http://`
 * URLs and `CONNECT` tunnels (HTTPS and anything else over TCP), judged by the domain's rules
 * (rules.ts), dialled at exactly the address judged (resolver.ts), refused with a 403 whose
 * body and `X-Uexec-Egress` header name the rule. Every connection ends in one
 * {@link ConnectionRecord} (allowed or refused, bytes each way, duration) for the audit.
 *
 * One request per connection: a forwarded request goes upstream with `Connection: close` and
 * its `Host` set to the URL's authority (what was judged is what the origin sees), so a second
 * request on the same client connection never reaches anything but the first one's address,
 * and in `read-only` mode nothing the client sends after the request head is forwarded.
 *
 * It must never dial an address it did not judge, never resolve a name twice for one
 * connection, and never throw out of {@link handleConnection}.
 *
 * @module
 */

import {
  canonicalHost,
  type Cidr,
  type EgressRules,
  judgeAddress,
  judgeHost,
  type Verdict,
} from "./rules.ts";
import { relay } from "./relay.ts";
import type { Resolver } from "./resolver.ts";

/** One connection through the proxy, as the audit keeps it. */
export interface ConnectionRecord {
  host: string;
  port: number;
  /** The address dialled (or refused). */
  address?: string;
  /** The request's method (`CONNECT` for a tunnel). */
  method: string;
  decision: "allowed" | "denied" | "failed";
  rule: string;
  /** Bytes from the client to the destination, and back. */
  bytes_up: number;
  bytes_down: number;
  duration_ms: number;
}

/** What one connection is judged and relayed with. */
export interface ProxyContext {
  rules: EgressRules;
  allowPrivate: Cidr[];
  resolver: Resolver;
  /** A connection with no traffic either way for this long is closed. */
  idleMs: number;
}

/** The answer to an allowed CONNECT. */
const ESTABLISHED = new TextEncoder().encode("HTTP/1.1 200 Connection established\r\n\r\n");

/** The largest request head read. */
const MAX_HEAD = 64 * 1024;

/** A request that the proxy answers itself (400, 403, 502...). */
class Answer extends Error {
  constructor(
    readonly status: number,
    readonly reason: string,
    readonly rule: string,
    readonly decision: "denied" | "failed",
  ) {
    super(reason);
  }
}

interface Head {
  method: string;
  host: string;
  port: number;
  /** For a forwarded request: the head to send upstream. */
  upstreamHead?: Uint8Array;
  /** Bytes read past the head (the start of a body, or of a tunnel's stream). */
  rest: Uint8Array;
  /** Whether the forwarded request has a body. */
  hasBody: boolean;
}

/**
 * Request heads are read as windows-1252 ("latin1"): one UTF-16 unit per byte, so a string index
 * is a byte offset, and the search for the head's end is the engine's, not a loop in JS.
 */
const LATIN1 = new TextDecoder("latin1");

/** Reads up to the end of the request head; null when the client went away first. */
async function readHead(conn: Deno.Conn): Promise<{ head: string; rest: Uint8Array } | null> {
  let text = "";
  const chunk = new Uint8Array(16 * 1024);
  for (;;) {
    const n = await conn.read(chunk);
    if (n === null) return null;
    const before = text.length;
    text += LATIN1.decode(chunk.subarray(0, n));
    const end = text.indexOf("\r\n\r\n", Math.max(0, before - 3));
    if (end >= 0) {
      // The head's end lies in this chunk (it was not in the text before it): so does the rest.
      return { head: text.slice(0, end), rest: chunk.slice(end + 4 - before, n) };
    }
    if (text.length > MAX_HEAD) throw new Answer(431, "request head too large", "head", "failed");
  }
}

/** Hop-by-hop and proxy headers, never forwarded. */
const DROPPED = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authorization",
  "proxy-authenticate",
  "te",
  "trailer",
  "upgrade",
  "host",
]);

/** A header line: a name (RFC 9110 token), a colon, then no control byte other than a tab. */
// deno-lint-ignore no-control-regex
const HEADER_LINE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+:[^\x00-\x08\x0a-\x1f\x7f]*$/;

function parseAuthority(authority: string): { host: string; port: number } | undefined {
  const m = /^(\[[0-9a-fA-F:.]+\]|[^:\[\]]+):([0-9]{1,5})$/.exec(authority);
  const port = m ? Number(m[2]) : 0;
  const host = m ? canonicalHost(m[1]) : undefined;
  return host !== undefined && port >= 1 && port <= 65535 ? { host, port } : undefined;
}

function parseHead(text: string, rest: Uint8Array): Head {
  const [requestLine, ...lines] = text.split("\r\n");
  const m = /^([A-Z]+) (\S+) HTTP\/1\.[01]$/.exec(requestLine);
  if (!m) throw new Answer(400, "not an HTTP/1 proxy request", "request", "failed");
  const [, method, target] = m;
  if (method === "CONNECT") {
    const dest = parseAuthority(target);
    if (!dest) throw new Answer(400, `bad CONNECT target ${target}`, "request", "failed");
    return { method, ...dest, rest, hasBody: false };
  }
  let url: URL;
  try {
    url = new URL(target);
  } catch {
    throw new Answer(400, "a proxy request needs an absolute http:// URL", "request", "failed");
  }
  if (url.protocol !== "http:" || url.username || url.password) {
    throw new Answer(400, `only http:// URLs are forwarded (use CONNECT)`, "request", "failed");
  }
  const host = canonicalHost(url.hostname);
  if (host === undefined) throw new Answer(400, `bad host ${url.hostname}`, "request", "failed");
  const port = url.port === "" ? 80 : Number(url.port);
  const headers: string[] = [];
  let hasBody = false;
  for (const line of lines) {
    // Lines go upstream as sent: a bare CR or LF (or another control byte) could read there as
    // a line break, starting a request inside the head that was never judged (a POST past
    // read-only mode); a name must be a token. One expression per line checks both.
    if (!HEADER_LINE.test(line)) {
      throw new Answer(400, "malformed header line", "request", "failed");
    }
    const colon = line.indexOf(":");
    const name = line.slice(0, colon).toLowerCase();
    const value = line.slice(colon + 1).trim();
    if (name === "transfer-encoding" || (name === "content-length" && value !== "0")) {
      hasBody = true;
    }
    if (!DROPPED.has(name)) headers.push(line);
  }
  const head = [
    `${method} ${url.pathname}${url.search} HTTP/1.1`,
    `Host: ${url.host}`,
    ...headers,
    "Connection: close",
    "",
    "",
  ].join("\r\n");
  return {
    method,
    host,
    port,
    upstreamHead: new TextEncoder().encode(head),
    rest,
    hasBody,
  };
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  for (let off = 0; off < bytes.length;) off += await conn.write(bytes.subarray(off));
}

/** The proxy's own answer: status, the `X-Uexec-Egress` header, a one-line body. */
function answerBytes(answer: Answer, host?: string, port?: number): Uint8Array {
  const target = host === undefined ? "" : ` ${host}:${port}`;
  const body = `uexec egress: ${answer.decision === "denied" ? "refused" : "failed"}` +
    `${target}: ${answer.reason} (rule ${answer.rule})\n`;
  const verdict = answer.decision === "denied" ? "denied" : "error";
  return new TextEncoder().encode(
    `HTTP/1.1 ${answer.status} ${answer.status === 403 ? "Forbidden" : "Error"}\r\n` +
      `X-Uexec-Egress: ${verdict}; rule=${answer.rule}\r\n` +
      "Content-Type: text/plain; charset=utf-8\r\n" +
      `Content-Length: ${new TextEncoder().encode(body).length}\r\n` +
      "Connection: close\r\n\r\n" + body,
  );
}

function refusal(verdict: Verdict, what: string): Answer {
  return new Answer(403, what, verdict.rule, "denied");
}

/** Closes `conn`, ignoring that it may be closed already. */
function close(conn: Deno.Conn | undefined): void {
  try {
    conn?.close();
  } catch {
    // Already closed.
  }
}

/** Closes both ends after `idleMs` without traffic; `touch` records traffic. */
class IdleTimer {
  #last = performance.now();
  #timer: ReturnType<typeof setTimeout>;
  #ms: number;
  #expire: () => void;

  constructor(ms: number, expire: () => void) {
    this.#ms = ms;
    this.#expire = expire;
    this.#timer = setTimeout(() => this.#check(), ms);
  }

  touch(): void {
    this.#last = performance.now();
  }

  #check(): void {
    const idle = performance.now() - this.#last;
    if (idle >= this.#ms) return this.#expire();
    this.#timer = setTimeout(() => this.#check(), this.#ms - idle);
  }

  stop(): void {
    clearTimeout(this.#timer);
  }
}

/**
 * Serves one client connection to its end, then reports what happened: `record` is told once
 * for every request the proxy read a method and target from (one that sends no request, or an
 * unparsable one, gets its 400 unrecorded). A connection the proxy answers itself (a refusal, a
 * failure) is reported before its answer is written, one relayed once it ended.
 */
export async function handleConnection(
  client: Deno.TcpConn,
  ctx: ProxyContext,
  record: (r: ConnectionRecord) => void,
): Promise<void> {
  const started = performance.now();
  const rec: ConnectionRecord = {
    host: "",
    port: 0,
    method: "",
    decision: "failed",
    rule: "request",
    bytes_up: 0,
    bytes_down: 0,
    duration_ms: 0,
  };
  let upstream: Deno.TcpConn | undefined;
  let recorded = false;
  const report = () => {
    if (recorded) return;
    recorded = true;
    rec.duration_ms = performance.now() - started;
    if (rec.method !== "" || rec.decision !== "failed") record(rec);
  };
  const idle = new IdleTimer(ctx.idleMs, () => {
    close(client);
    close(upstream);
  });
  try {
    const read = await readHead(client);
    if (read === null) return;
    idle.touch();
    const head = parseHead(read.head, read.rest);
    Object.assign(rec, { host: head.host, port: head.port, method: head.method });
    const verdict = judgeHost(ctx.rules, head.host, head.method);
    if (!verdict.allowed) throw refusal(verdict, "not allowed by the egress rules");
    if (ctx.rules.methods === "read-only" && head.hasBody) {
      throw refusal({ allowed: false, rule: "read-only:body" }, "read-only allows no body");
    }
    const known = ctx.resolver.resolve(head.host);
    const addresses = Array.isArray(known) ? known : await known;
    if (addresses.length === 0) {
      throw new Answer(502, "the name does not resolve", "resolve", "failed");
    }
    // The first address the rules allow: the one judged is the one dialled.
    const judged = addresses.map((address) => ({
      address,
      v: judgeAddress(address, ctx.allowPrivate),
    }));
    const chosen = judged.find((j) => j.v.allowed);
    if (!chosen) {
      rec.address = judged[0].address;
      throw refusal(judged[0].v, `${judged[0].address} is not a public address`);
    }
    rec.address = chosen.address;
    rec.rule = verdict.rule;
    try {
      upstream = await Deno.connect({ hostname: chosen.address, port: head.port });
    } catch (err) {
      throw new Answer(502, `cannot connect: ${(err as Error).message}`, "connect", "failed");
    }
    idle.touch();
    rec.decision = "allowed";
    const forwardClient = head.upstreamHead === undefined || ctx.rules.methods === "all";
    const rest = forwardClient ? head.rest : head.rest.subarray(0, 0);
    if (head.upstreamHead) {
      // The head and the body's start in one write: a second small write could wait for the
      // first one's ACK (Nagle's algorithm against a delayed ACK).
      const first = new Uint8Array(head.upstreamHead.length + rest.length);
      first.set(head.upstreamHead);
      first.set(rest, head.upstreamHead.length);
      await writeAll(upstream, first);
      rec.bytes_up += first.length;
    } else {
      await writeAll(client, ESTABLISHED);
      if (rest.length > 0) await writeAll(upstream, rest);
      rec.bytes_up += rest.length;
    }
    // Set once the request is on its way (a first write is never held back): what the relays
    // write next goes out at once too, however small.
    upstream.setNoDelay(true);
    client.setNoDelay(true);
    const up = forwardClient
      ? relay(client, upstream, (n) => {
        idle.touch();
        rec.bytes_up += n;
      })
      : Promise.resolve();
    const down = relay(upstream, client, (n) => {
      idle.touch();
      rec.bytes_down += n;
    });
    await Promise.all([up, down]);
  } catch (err) {
    const answer = err instanceof Answer
      ? err
      : new Answer(502, `proxy error: ${(err as Error).message}`, "internal", "failed");
    rec.decision = answer.decision;
    rec.rule = answer.rule;
    // Reported before the answer: a command that read its 403 finds its refusal recorded.
    report();
    try {
      if (rec.bytes_down === 0) {
        await writeAll(client, answerBytes(answer, rec.host || undefined, rec.port));
      }
    } catch {
      // The client went away.
    }
  } finally {
    idle.stop();
    close(upstream);
    close(client);
    report();
  }
}
