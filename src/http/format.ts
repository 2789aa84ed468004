/**
 * The plain-text form of a tool result, as Codex shows it to the model, for clients that send
 * `Accept: text/plain`. Formatting only; it must never change the result.
 *
 * @module
 */

import type { CallResult } from "../sessions/manager.ts";

/** Render a result the way Codex's `response_text` does. */
export function resultText(r: CallResult): string {
  const lines = [`Chunk ID: ${r.chunk_id}`, `Wall time: ${r.wall_time_seconds.toFixed(4)} seconds`];
  if (r.exit_code !== undefined) lines.push(`Process exited with code ${r.exit_code}`);
  if (r.session_id !== undefined) lines.push(`Process running with session ID ${r.session_id}`);
  lines.push(`Original token count: ${r.original_token_count}`, "Output:", r.output);
  if (r.screen) {
    const { rows, cols, cursor } = r.screen;
    lines.push(
      `Screen (${rows} rows, ${cols} columns, cursor at row ${cursor.row + 1}, ` +
        `column ${cursor.col + 1}):`,
      ...r.screen.lines,
    );
  }
  return lines.join("\n");
}

/** True when the client asked for the text form. */
export function wantsText(accept: string | undefined): boolean {
  return accept !== undefined && /(^|,)\s*text\/plain/i.test(accept) &&
    !/(^|,)\s*application\/json/i.test(accept);
}
