/**
 * Token counting with o200k_base that stays fast on any input. The tokenizer's BPE is
 * quadratic in the length of one pre-token, so text is cut into segments first: at a newline
 * followed by non-whitespace (always a pre-token boundary in o200k, so counts stay exact), and,
 * only inside a line longer than `SEGMENT_CHARS`, at a fixed width (counts may then differ from
 * a whole-text count by about one token per cut). Segment counts are memoized, so repetitive
 * output (progress lines, logs, encoded zeros) costs little. It must never hand the tokenizer
 * an unbounded piece.
 *
 * @module
 */

import {
  countTokens as countPiece,
  decode,
  encode,
  setMergeCacheSize,
} from "gpt-tokenizer/encoding/o200k_base";

/** The longest segment handed to the tokenizer at once. */
export const SEGMENT_CHARS = 4096;

function isWhitespace(code: number): boolean {
  return code === 0x20 || (code >= 0x09 && code <= 0x0d) || code === 0x85 || code === 0xa0 ||
    code === 0x1680 || (code >= 0x2000 && code <= 0x200a) || code === 0x2028 || code === 0x2029 ||
    code === 0x202f || code === 0x205f || code === 0x3000;
}

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}

/** Where the segment starting at `start` ends. */
function segmentEnd(text: string, start: number): number {
  const limit = start + SEGMENT_CHARS;
  if (limit >= text.length) return text.length;
  for (let i = limit; i > start; i--) {
    if (text.charCodeAt(i - 1) === 0x0a && !isWhitespace(text.charCodeAt(i))) return i;
  }
  return isHighSurrogate(text.charCodeAt(limit - 1)) ? limit - 1 : limit;
}

/** Split `text` into segments that can be tokenized independently. */
export function segments(text: string): string[] {
  const out: string[] = [];
  for (let start = 0; start < text.length;) {
    const end = segmentEnd(text, start);
    out.push(text.slice(start, end));
    start = end;
  }
  return out;
}

/**
 * Pre-tokens whose merges the tokenizer keeps. Its default (100,000) keeps every unique word of
 * a long-running server's outputs alive for a long time, which makes garbage collection work
 * hard; common words fit in far fewer.
 */
const MERGE_CACHE_ENTRIES = 2048;
setMergeCacheSize(MERGE_CACHE_ENTRIES);

/**
 * Special-token text (`<|endoftext|>` and the like) in command output is ordinary text: the
 * tokenizer's default is to throw on it, which would fail the call that collected it.
 */
const AS_TEXT = { disallowedSpecial: new Set<string>() };

const MEMO_ENTRIES = 8192;
/**
 * Segments shorter than this are counted directly: that costs about what a memo lookup does, and
 * memoizing them (a shell prompt, an echoed command) only fills the memo with one-off keys.
 */
const MEMO_MIN_CHARS = 32;
const memo = new Map<string, number>();

/** Tokens in one segment, memoized (the memo is dropped whole when full: no per-hit upkeep). */
export function countSegment(segment: string): number {
  if (segment.length < MEMO_MIN_CHARS) return countPiece(segment, AS_TEXT);
  let n = memo.get(segment);
  if (n === undefined) {
    n = countPiece(segment, AS_TEXT);
    if (memo.size >= MEMO_ENTRIES) memo.clear();
    memo.set(segment, n);
  }
  return n;
}

/** The number of o200k_base tokens in `text`. */
export function countTokens(text: string): number {
  let n = 0;
  for (const segment of segments(text)) n += countSegment(segment);
  return n;
}

function commonPrefix(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a.charCodeAt(i) === b.charCodeAt(i)) i++;
  return i;
}

function commonSuffix(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a.charCodeAt(a.length - 1 - i) === b.charCodeAt(b.length - 1 - i)) i++;
  return i;
}

/** The longest prefix of one segment that its first `n` tokens decode to, on a character boundary. */
export function segmentPrefix(segment: string, n: number): string {
  if (n <= 0) return "";
  let end = commonPrefix(decode(encode(segment, AS_TEXT).slice(0, n)), segment);
  if (end > 0 && isHighSurrogate(segment.charCodeAt(end - 1))) end--;
  return segment.slice(0, end);
}

/** The longest suffix of one segment that its last `n` tokens decode to, on a character boundary. */
export function segmentSuffix(segment: string, n: number): string {
  if (n <= 0) return "";
  const tokens = encode(segment, AS_TEXT);
  let start = segment.length -
    commonSuffix(decode(tokens.slice(Math.max(0, tokens.length - n))), segment);
  if (start > 0 && start < segment.length && isHighSurrogate(segment.charCodeAt(start - 1))) {
    start++;
  }
  return segment.slice(start);
}
