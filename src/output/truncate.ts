/**
 * Cutting collected output to a token budget with the o200k_base tokenizer (not a bytes/4
 * guess). Over budget, it keeps a head and a tail of about half the budget each, cut on
 * character boundaries, with `…N tokens truncated…` between them and `Total output lines: N`
 * in front. The kept text never exceeds the budget; only the marker line comes on top.
 *
 * @module
 */

import {
  countSegment,
  countTokens,
  segmentPrefix,
  segments,
  segmentSuffix,
} from "./token_count.ts";

/** The result of fitting text to a budget. */
export interface Truncated {
  output: string;
  originalTokenCount: number;
  truncated: boolean;
}

/** Number of lines, counting a last line without a newline. */
export function countLines(text: string): number {
  let n = 0;
  for (let i = text.indexOf("\n"); i !== -1; i = text.indexOf("\n", i + 1)) n++;
  return text.length > 0 && !text.endsWith("\n") ? n + 1 : n;
}

/** Whole segments from the front (or back) within `budget`, then part of the next one. */
function takeWithin(
  segs: string[],
  counts: number[],
  budget: number,
  fromEnd: boolean,
): string {
  const kept: string[] = [];
  let used = 0;
  for (let k = 0; k < segs.length; k++) {
    const i = fromEnd ? segs.length - 1 - k : k;
    if (used + counts[i] <= budget) {
      kept.push(segs[i]);
      used += counts[i];
      continue;
    }
    const rest = budget - used;
    kept.push(fromEnd ? segmentSuffix(segs[i], rest) : segmentPrefix(segs[i], rest));
    break;
  }
  return (fromEnd ? kept.reverse() : kept).join("");
}

/** Fit `text` into `maxTokens` tokens. */
export function truncateToTokens(text: string, maxTokens: number): Truncated {
  const segs = segments(text);
  const counts = segs.map(countSegment);
  const total = counts.reduce((a, b) => a + b, 0);
  if (total <= maxTokens) return { output: text, originalTokenCount: total, truncated: false };
  let headBudget = Math.floor(maxTokens / 2);
  let tailBudget = maxTokens - headBudget;
  for (;;) {
    const head = takeWithin(segs, counts, headBudget, false);
    const tail = takeWithin(segs, counts, tailBudget, true);
    const kept = countTokens(head) + countTokens(tail);
    if (kept <= maxTokens) {
      return {
        output: `Total output lines: ${countLines(text)}\n\n${head}…${
          total - kept
        } tokens truncated…${tail}`,
        originalTokenCount: total,
        truncated: true,
      };
    }
    const over = kept - maxTokens;
    const fromTail = Math.min(tailBudget, Math.ceil(over / 2));
    tailBudget -= fromTail;
    headBudget = Math.max(0, headBudget - (over - fromTail));
  }
}
