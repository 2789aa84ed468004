/**
 * Text as an approver must see it: every control character (C0, DEL, C1) and every invisible
 * or direction-changing format character shown as an escape (`\n`, `\r`, `\t`, `\x1b`,
 * `\u{202e}`), so what the approver reads is exactly what runs. Pure; it must never drop or
 * reorder a character.
 *
 * @module
 */

const NAMED: Record<string, string> = { "\n": "\\n", "\r": "\\r", "\t": "\\t" };

/** C0, DEL, C1, zero-width and bidirectional controls, line/paragraph separators, BOM. */
// deno-lint-ignore no-control-regex
const HIDDEN = new RegExp(
  "[\\u0000-\\u001f\\u007f-\\u009f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u2064\\u2066-\\u2069\\ufeff]",
  "gu",
);

/** `text` with its hidden characters escaped. */
export function visible(text: string): string {
  return text.replace(HIDDEN, (c) => {
    const named = NAMED[c];
    if (named) return named;
    const code = c.codePointAt(0)!;
    return code <= 0xff ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u{${code.toString(16)}}`;
  });
}
