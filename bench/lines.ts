/**
 * Splits a child process's byte stream into text lines, handing each to a callback until the
 * stream ends.
 * @module
 */

/** Reads `stream` to its end, calling `onLine` for each line (without its newline). */
export async function eachLine(
  stream: ReadableStream<Uint8Array>,
  onLine: (line: string) => void,
): Promise<void> {
  let pending = "";
  for await (const text of stream.pipeThrough(new TextDecoderStream())) {
    pending += text;
    let nl: number;
    while ((nl = pending.indexOf("\n")) >= 0) {
      onLine(pending.slice(0, nl));
      pending = pending.slice(nl + 1);
    }
  }
  if (pending) onLine(pending);
}
