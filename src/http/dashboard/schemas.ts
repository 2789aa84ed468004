/**
 * The shapes of the dashboard's sign-in calls: the exchange of a one-time code for a browser
 * session, and the operator's request for a fresh sign-in link. Shapes only (the routes validate
 * with them, the API's description shows them); it must never hold a code or a session id.
 *
 * @module
 */

import { z } from "zod";

/** `POST /dashboard/sign-in`: the code from the link's `#code=`. */
export const SignInBody = z.strictObject({
  code: z.string().min(1).max(256).describe("The one-time code from the sign-in link."),
});

/** A browser session just opened. */
export const SignInResultSchema = z.object({
  session: z.string().describe(
    "The browser session's id: sent back as `Authorization: Bearer` on every call; shown once.",
  ),
  expires_in_seconds: z.number().int(),
});

/** A fresh sign-in link for the operator. */
export const SignInLinkSchema = z.object({
  url: z.string().describe("The link to open: it carries the code in its fragment (#code=)."),
  code: z.string().describe("The one-time code alone."),
  expires_in_seconds: z.number().int().describe("How long the code may be redeemed, once."),
});

/** Every browser session ended. */
export const EndedSessionsSchema = z.object({
  ended: z.number().int().describe("How many browser sessions were live."),
});

/** A sign-in link on `origin` (`http://host:port`) for `code`. */
export function signInLink(origin: string, code: string): string {
  return `${origin}/#code=${encodeURIComponent(code)}`;
}
