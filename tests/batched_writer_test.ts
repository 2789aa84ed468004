/**
 * The log's writer: text goes out in order, one write in flight at a time, what arrives
 * meanwhile in the next write; `flush` waits for all of it; a failed stream is dropped without
 * an error. And the server's logger on a real stderr: every line out before exit after `flush`,
 * and a closed stderr does not crash it.
 *
 * @module
 */

import assert from "node:assert/strict";
import { BatchedWriter } from "../src/io/batched_writer.ts";

const decoder = new TextDecoder();

/** A stream whose writes complete when the test says so, taking at most `max` bytes each. */
function heldStream(max = Infinity) {
  const writes: string[] = [];
  const pending: (() => void)[] = [];
  let nextArrives = Promise.withResolvers<void>();
  const write = (bytes: Uint8Array) => {
    const n = Math.min(bytes.length, max);
    writes.push(decoder.decode(bytes.subarray(0, n)));
    const done = Promise.withResolvers<number>();
    pending.push(() => done.resolve(n));
    nextArrives.resolve();
    nextArrives = Promise.withResolvers<void>();
    return done.promise;
  };
  return {
    writes,
    write,
    /** Waits for the next write to start. */
    started: () => nextArrives.promise,
    /** Completes the oldest write in flight. */
    complete: () => pending.shift()!(),
    get inFlight() {
      return pending.length;
    },
  };
}

Deno.test("batched writer: what arrives during a write goes out next, as one write", async () => {
  const stream = heldStream();
  const out = new BatchedWriter(stream.write);
  let started = stream.started();
  out.write("a\n");
  await started;
  assert.deepEqual(stream.writes, ["a\n"]);
  out.write("b\n");
  out.write("c\n");
  assert.equal(stream.inFlight, 1);
  let flushed = false;
  const flush = out.flush().then(() => flushed = true);
  started = stream.started();
  stream.complete();
  await started;
  assert.deepEqual(stream.writes, ["a\n", "b\nc\n"]);
  assert.equal(stream.inFlight, 1);
  assert.equal(flushed, false);
  stream.complete();
  await flush;
  assert.equal(flushed, true);
  started = stream.started();
  out.write("d\n");
  await started;
  stream.complete();
  await out.flush();
  assert.deepEqual(stream.writes, ["a\n", "b\nc\n", "d\n"]);
});

Deno.test("batched writer: a partial write is continued before anything newer", async () => {
  const stream = heldStream(3);
  const out = new BatchedWriter(stream.write);
  const started = stream.started();
  out.write("hello");
  await started;
  out.write("+0");
  assert.deepEqual(stream.writes, ["hel"]);
  for (const seen of [["hel", "lo"], ["hel", "lo", "+0"]]) {
    const started = stream.started();
    stream.complete();
    await started;
    assert.deepEqual(stream.writes, seen);
  }
  stream.complete();
  await out.flush();
  assert.equal(stream.inFlight, 0);
});

Deno.test("batched writer: a failed stream drops its text and never throws", async () => {
  const attempts: string[] = [];
  const out = new BatchedWriter((bytes) => {
    attempts.push(decoder.decode(bytes));
    return Promise.reject(new Deno.errors.BrokenPipe("closed"));
  });
  out.write("a");
  out.write("b");
  await out.flush();
  out.write("c");
  await out.flush();
  assert.deepEqual(attempts, ["ab"]);
});

/** Runs a script that logs `count` lines through the server's logger and flushes. */
function logScript(count: number, then: string): string {
  return [
    `import { Logger } from ${JSON.stringify(new URL("../src/log.ts", import.meta.url).href)};`,
    `const log = new Logger("json");`,
    `for (let i = 0; i < ${count}; i++) log.info("line", { i });`,
    `await log.flush();`,
    then,
  ].join("\n");
}

Deno.test("logger: every line reaches stderr, in order, before an exit after flush", async () => {
  const count = 5000;
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["eval", logScript(count, "Deno.exit(0);")],
    stdout: "null",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0);
  const lines = decoder.decode(out.stderr).trim().split("\n").map((l) => JSON.parse(l));
  assert.deepEqual(lines.map((l) => l.i), Array.from({ length: count }, (_, i) => i));
});

Deno.test("logger: a closed stderr does not stop the process", async () => {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "eval",
      [
        `await new Promise((resolve) => Deno.stdin.read(new Uint8Array(1)).then(resolve));`,
        logScript(1000, `console.log("alive");`),
      ].join("\n"),
    ],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  await child.stderr.cancel();
  await child.stdin.close();
  const [status, stdout] = await Promise.all([child.status, new Response(child.stdout).text()]);
  assert.equal(stdout, "alive\n");
  assert.equal(status.code, 0);
});
