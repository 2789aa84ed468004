/**
 * The input of a history query (`GET /v1/history?agent=&status=&q=&since=&limit=&cursor=`),
 * validated with zod for every front door, and its opaque page cursor: a keyset position
 * (started time and id of the last row shown), base64url-encoded.
 *
 * A cursor is not a secret and grants nothing: the query it continues is scoped again on every
 * page. It must never be trusted beyond its shape.
 *
 * @module
 */

import { z } from "zod";
import { decimalText } from "../decimal_text.ts";
import { HISTORY_STATUSES } from "./store.ts";

/** The query string of `GET /v1/history`. */
export const HistoryQuery = z.strictObject({
  agent: z.string().min(1).max(200).optional(),
  status: z.enum(HISTORY_STATUSES).optional(),
  q: z.string().max(1000).optional(),
  since: z.iso.datetime({ offset: true }).optional(),
  limit: decimalText(1, 500).default(50),
  cursor: z.string().max(500).optional(),
});

/** A position in the history, newest first. */
export interface HistoryPosition {
  startedMs: number;
  id: string;
}

const Position = z.tuple([z.number().int().nonnegative(), z.string().min(1).max(100)]);

/** The opaque cursor for `position`. */
export function encodeCursor(position: HistoryPosition): string {
  const json = JSON.stringify([position.startedMs, position.id]);
  return btoa(json).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

/** The position in `cursor`, or undefined when it is not one this server made. */
export function decodeCursor(cursor: string): HistoryPosition | undefined {
  try {
    const json = atob(cursor.replaceAll("-", "+").replaceAll("_", "/"));
    const [startedMs, id] = Position.parse(JSON.parse(json));
    return { startedMs, id };
  } catch {
    return undefined;
  }
}
