/**
 * Answers written straight onto a client's socket, outside `Deno.serve`: the refusals the
 * listener gives at accept and the relay gives to a request it cannot frame (each with the API's
 * JSON error body, closing the connection), a response written as HTTP/1.1 on a connection the
 * relay serves in-process, and the linger that keeps a refusal from being lost to a reset.
 *
 * It must never keep a connection open after its answer, nor wait on a client for longer than
 * {@link REFUSAL_LINGER_MS}.
 *
 * @module
 */

import type { FramingError } from "./request_framing.ts";

const encoder = new TextEncoder();

/** The reason phrases of the statuses written here (others get "Status"). */
const REASONS: Record<number, string> = {
  200: "OK",
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  405: "Method Not Allowed",
  413: "Content Too Large",
  426: "Upgrade Required",
  429: "Too Many Requests",
  431: "Request Header Fields Too Large",
  500: "Internal Server Error",
  503: "Service Unavailable",
  505: "HTTP Version Not Supported",
};

/** A complete response with the API's error body, closing the connection. */
export function refusal(status: number, code: string, message: string): Uint8Array {
  const body = JSON.stringify({ error: { code, message } });
  return encoder.encode(
    `HTTP/1.1 ${status} ${REASONS[status] ?? "Status"}\r\ncontent-type: application/json\r\n` +
      `content-length: ${encoder.encode(body).length}\r\nconnection: close\r\n\r\n${body}`,
  );
}

/** The answer to a request the relay could not frame. */
export function framingRefusal(err: FramingError): Uint8Array {
  return refusal(err.status, "invalid_request", err.message);
}

/**
 * How long a refused connection is kept to read its client's request (a close with unread data
 * resets the connection, which can destroy the 503 before the client reads it).
 */
export const REFUSAL_LINGER_MS = 1000;

/** Close `conn` unless it is closed already. */
export function closeQuietly(conn: Deno.Conn): void {
  try {
    conn.close();
  } catch { /* closed */ }
}

/** Write all of `bytes` to `conn`. */
export async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  for (let off = 0; off < bytes.length;) off += await conn.write(bytes.subarray(off));
}

/**
 * Write `answer`, half-close and read (discarding) until the client closes, so that the answer
 * is not lost to the reset a close with unread data causes; at most REFUSAL_LINGER_MS. The
 * caller closes `conn`.
 */
export async function answerAndLinger(conn: Deno.Conn, answer: Uint8Array): Promise<void> {
  const timer = setTimeout(() => closeQuietly(conn), REFUSAL_LINGER_MS);
  const buf = new Uint8Array(4096);
  try {
    await writeAll(conn, answer);
    await conn.closeWrite();
    while (await conn.read(buf) !== null) { /* discard the rest */ }
  } catch { /* the client left, or the time is up */ }
  clearTimeout(timer);
}

/** Write `res` to `conn` as HTTP/1.1 closing the connection, its body streamed as it comes. */
export async function writeClosingResponse(conn: Deno.Conn, res: Response): Promise<void> {
  let head = `HTTP/1.1 ${res.status} ${REASONS[res.status] ?? "Status"}\r\n`;
  for (const [name, value] of res.headers) {
    if (name !== "connection" && name !== "transfer-encoding") head += `${name}: ${value}\r\n`;
  }
  await writeAll(conn, encoder.encode(`${head}connection: close\r\n\r\n`));
  if (!res.body) return;
  for await (const chunk of res.body) await writeAll(conn, chunk);
}
