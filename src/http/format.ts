/**
 * Content negotiation for tool results: whether a client that sent `Accept: text/plain` gets
 * the Codex text form instead of JSON. It must never change the result.
 *
 * @module
 */

/** True when the client asked for the text form. */
export function wantsText(accept: string | undefined): boolean {
  return accept !== undefined && /(^|,)\s*text\/plain/i.test(accept) &&
    !/(^|,)\s*application\/json/i.test(accept);
}
