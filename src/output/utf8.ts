/**
 * UTF-8 boundaries in raw byte streams, so a character split across reads or cut points is
 * never turned into replacement characters. Invalid bytes stay invalid (the decoder marks them
 * with U+FFFD); this module only finds where complete characters end and begin.
 *
 * @module
 */

function isContinuation(byte: number): boolean {
  return (byte & 0xc0) === 0x80;
}

function sequenceLength(lead: number): number {
  if (lead >= 0xf0 && lead <= 0xf4) return 4;
  if (lead >= 0xe0 && lead <= 0xef) return 3;
  if (lead >= 0xc2 && lead <= 0xdf) return 2;
  return 1;
}

/**
 * The length of `bytes` without a trailing, so far valid but incomplete, multibyte sequence:
 * the bytes after it may still arrive in the next read.
 */
export function completeLength(bytes: Uint8Array): number {
  const end = bytes.length;
  for (let back = 1; back <= 3 && back <= end; back++) {
    const b = bytes[end - back];
    if (isContinuation(b)) continue;
    return sequenceLength(b) > back ? end - back : end;
  }
  return end;
}

/** The first index at or after `i` that does not fall inside a multibyte character. */
export function nextBoundary(bytes: Uint8Array, i: number): number {
  let j = i;
  while (j < bytes.length && j < i + 3 && isContinuation(bytes[j])) j++;
  return j;
}

/** The last index at or before `i` that does not fall inside a multibyte character. */
export function previousBoundary(bytes: Uint8Array, i: number): number {
  let j = i;
  while (j > 0 && j > i - 3 && j < bytes.length && isContinuation(bytes[j])) j--;
  return j;
}
