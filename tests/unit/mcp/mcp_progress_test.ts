/**
 * Progress notifications of a waiting MCP call: sent as output arrives, spaced by the interval
 * (a burst gives one now and one when the interval ends), growing from one to the next, never
 * after the call is over, and never failing the call when the client cannot be told.
 *
 * @module
 */

import assert from "node:assert/strict";
import { ProgressReporter } from "../../../src/mcp/progress.ts";

const bytes = (n: number) => new Uint8Array(n);

Deno.test("progress: the first output is reported at once, a burst once more at the interval", async () => {
  const sent: [number, string][] = [];
  let next = Promise.withResolvers<void>();
  const reporter = new ProgressReporter((progress, message) => {
    sent.push([progress, message]);
    next.resolve();
    return Promise.resolve();
  }, 20);
  reporter.output(bytes(3));
  assert.deepEqual(sent, [[3, "3 bytes of output so far"]]);
  next = Promise.withResolvers<void>();
  reporter.output(bytes(2));
  reporter.output(bytes(4));
  assert.equal(sent.length, 1, "the burst waits for the interval");
  await next.promise;
  assert.deepEqual(sent, [[3, "3 bytes of output so far"], [9, "9 bytes of output so far"]]);
  reporter.stop();
});

Deno.test("progress: output after stop is not reported", () => {
  const sent: number[] = [];
  const reporter = new ProgressReporter((progress) => {
    sent.push(progress);
    return Promise.resolve();
  }, 60_000);
  reporter.output(bytes(1));
  reporter.output(bytes(1));
  reporter.stop();
  reporter.output(bytes(1));
  assert.deepEqual(sent, [1]);
});

Deno.test("progress: no notification without new bytes; a failed send does not throw", () => {
  const sent: number[] = [];
  const reporter = new ProgressReporter((progress) => {
    sent.push(progress);
    return Promise.reject(new Error("client gone"));
  }, 0);
  reporter.output(bytes(0));
  reporter.output(bytes(5));
  reporter.output(bytes(0));
  reporter.output(bytes(1));
  reporter.stop();
  assert.deepEqual(sent, [5, 6]);
});
