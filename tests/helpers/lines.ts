/**
 * Splitting a text stream into lines (JSR's @std/streams is not reachable here).
 *
 * @module
 */

/** A TransformStream from text chunks to lines, without their line endings. */
export class TextLineStream extends TransformStream<string, string> {
  constructor() {
    let buffered = "";
    super({
      transform(chunk, controller) {
        buffered += chunk;
        let i: number;
        while ((i = buffered.indexOf("\n")) !== -1) {
          controller.enqueue(buffered.slice(0, i).replace(/\r$/, ""));
          buffered = buffered.slice(i + 1);
        }
      },
      flush(controller) {
        if (buffered) controller.enqueue(buffered);
      },
    });
  }
}
