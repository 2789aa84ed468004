/**
 * Reading a child process's byte stream: split into text lines handed to a callback, or drained
 * keeping only its last bytes (a server's log, read only for an error report, is not decoded
 * line by line while the bench measures).
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

/** The last bytes of a stream, decoded only when asked for. */
export class ByteTail {
  #chunks: Uint8Array[] = [];
  #size = 0;

  constructor(readonly max: number) {}

  /** Reads `stream` to its end, keeping its last `max` bytes (at least). */
  async drain(stream: ReadableStream<Uint8Array>): Promise<void> {
    for await (const chunk of stream) {
      this.#chunks.push(chunk);
      this.#size += chunk.length;
      while (this.#size - this.#chunks[0].length >= this.max) {
        this.#size -= this.#chunks.shift()!.length;
      }
    }
  }

  /** The last `n` lines kept. */
  lines(n: number): string[] {
    const text = new TextDecoder().decode(concat(this.#chunks));
    return text.split("\n").filter((line) => line !== "").slice(-n);
  }
}

function concat(chunks: Uint8Array[]): Uint8Array {
  const all = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.length;
  }
  return all;
}
