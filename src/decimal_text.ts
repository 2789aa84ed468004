/**
 * Whole numbers that arrive as text (a path segment, a query parameter, a header such as
 * `Last-Event-ID`), read strictly: plain decimal only. `Number()` and `z.coerce` also take
 * `0x10`, `+1`, ` 1` and `1e3`, so one value could be spelled many ways past a check.
 *
 * A schema only: it must never accept a spelling other than the canonical one.
 *
 * @module
 */

import { z } from "zod";

/** A whole number from `min` to `max` in plain decimal: no sign, space, exponent, hex or leading zero. */
export function decimalText(min: number, max: number) {
  return z.string().regex(/^(0|[1-9][0-9]{0,15})$/, "must be a whole number in plain decimal")
    .transform(Number).pipe(z.number().int().min(min).max(max));
}
