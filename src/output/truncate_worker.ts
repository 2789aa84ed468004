/**
 * The tokenizer worker's entry point: fits large outputs to their token budget on its own
 * thread, so the main thread keeps draining terminals meanwhile. It only computes; it must
 * never hold state beyond the tokenizer's memo.
 *
 * @module
 */

/// <reference lib="deno.worker" />

import { truncateToTokens } from "./truncate.ts";

/** A request: fit `text` into `maxTokens`. */
export interface TruncateJob {
  id: number;
  text: string;
  maxTokens: number;
}

self.onmessage = (e: MessageEvent<TruncateJob>) => {
  const { id, text, maxTokens } = e.data;
  self.postMessage({ id, result: truncateToTokens(text, maxTokens) });
};
