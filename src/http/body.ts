/**
 * Reading a JSON request body within a byte limit: a declared length over the limit is refused
 * before anything is read, and a streamed (chunked) body is counted as it arrives and cut off
 * once it passes the limit; a body that is malformed or cut off is the client's error (400). It
 * must never buffer more than the limit of any body.
 *
 * @module
 */

import { concat } from "../output/head_tail.ts";
import { InvalidRequestError, PayloadTooLargeError } from "../errors.ts";

const decoder = new TextDecoder();

/** Reads a body of unknown length; leaving the loop early cancels the rest of the stream. */
async function readCounted(
  body: ReadableStream<Uint8Array>,
  limit: number,
  tooLarge: string,
): Promise<string> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += chunk.length;
    if (size > limit) throw new PayloadTooLargeError(tooLarge);
    chunks.push(chunk);
  }
  return decoder.decode(concat(chunks, size));
}

/**
 * The body of `req` parsed as JSON; `tooLarge` names the limit in the 413 message.
 *
 * Hand-written rather than Hono's `bodyLimit`: that middleware lets a body whose stream breaks
 * mid-way (a bad chunk, fewer bytes than declared) throw its reader's own error, which this API
 * would answer 500 where it promises 400 `invalid_request`.
 */
export async function readJson(req: Request, limit: number, tooLarge: string): Promise<unknown> {
  const declared = req.headers.get("content-length");
  if (declared !== null && Number(declared) > limit) throw new PayloadTooLargeError(tooLarge);
  let text: string;
  try {
    text = declared !== null || req.body === null
      ? await req.text()
      : await readCounted(req.body, limit, tooLarge);
  } catch (err) {
    if (err instanceof PayloadTooLargeError) throw err;
    throw new InvalidRequestError(
      "body: the request body is malformed or was cut off before its end " +
        "(a bad chunk, or fewer bytes than Content-Length)",
    );
  }
  try {
    return JSON.parse(text);
  } catch {
    throw new InvalidRequestError("body: malformed JSON");
  }
}
