/**
 * Idempotent calls by key: one run per key and agent, repeats share its answer, a different body
 * conflicts, and a call every caller left is resumed (not rerun) by the next repeat.
 *
 * @module
 */

import assert from "node:assert/strict";
import { IdempotencyConflictError, IdempotentCalls } from "../../../src/service/idempotency.ts";
import { CallAbandonedError, InvalidRequestError } from "../../../src/errors.ts";
import { compileUntil } from "../../../src/sessions/until.ts";

// Substring patterns: this process runs without the linear engine the others need.
const body = { cmd: "x", until: compileUntil("a") };

Deno.test("one run per key and agent; repeats wait for it and share its answer", async () => {
  const calls = new IdempotentCalls<string>();
  const gate = Promise.withResolvers<string>();
  let runs = 0;
  const start = () => (runs++, gate.promise);
  const resume = () => Promise.reject(new Error("not abandoned"));
  const a = calls.run("agent", "k", body, undefined, start, resume);
  const b = calls.run(
    "agent",
    "k",
    { cmd: "x", until: compileUntil("a") },
    undefined,
    start,
    resume,
  );
  const other = calls.run("other", "k", body, undefined, () => Promise.resolve("other"), resume);
  gate.resolve("answer");
  assert.deepEqual(await Promise.all([a, b, other]), ["answer", "answer", "other"]);
  assert.equal(runs, 1);
  assert.equal(await calls.run("agent", "k", body, undefined, start, resume), "answer");
  assert.throws(
    () => calls.run("agent", "k", { cmd: "x", until: compileUntil("b") }, undefined, start, resume),
    IdempotencyConflictError,
  );
  assert.throws(
    () => calls.run("agent", "a b", body, undefined, start, resume),
    InvalidRequestError,
  );
});

Deno.test("a call all its callers left is abandoned, and the next repeat resumes it", async () => {
  const calls = new IdempotentCalls<string>();
  const gone = new AbortController();
  const stays = new AbortController();
  let runSignal: AbortSignal | undefined;
  const start = (signal: AbortSignal) => {
    runSignal = signal;
    return new Promise<string>((_, reject) =>
      signal.addEventListener("abort", () => reject(new CallAbandonedError(4242)))
    );
  };
  const resumed: number[] = [];
  const resume = (id: number) => (resumed.push(id), Promise.resolve(`resumed ${id}`));
  const first = calls.run("agent", "k", body, gone.signal, start, resume);
  const second = calls.run("agent", "k", body, stays.signal, start, resume);
  gone.abort();
  await assert.rejects(first, CallAbandonedError);
  assert.equal(runSignal!.aborted, false, "one caller still waits");
  stays.abort();
  await assert.rejects(second, CallAbandonedError);
  assert.equal(runSignal!.aborted, true);
  await Promise.resolve();
  assert.equal(await calls.run("agent", "k", body, undefined, start, resume), "resumed 4242");
  assert.deepEqual(resumed, [4242]);
});

Deno.test("forgetting an owner (a revoked agent) drops its keys alone", async () => {
  const calls = new IdempotentCalls<string>();
  const resume = () => Promise.reject(new Error("not abandoned"));
  // An owner name with JSON's own characters must not be confused with another.
  const owners = ["agent", 'agent"]', "other"];
  for (const owner of owners) {
    const first = () => Promise.resolve(`${owner} first`);
    assert.equal(await calls.run(owner, "k", body, undefined, first, resume), `${owner} first`);
  }
  calls.forgetOwner("agent");
  const again = (owner: string) =>
    calls.run(owner, "k", body, undefined, () => Promise.resolve(`${owner} again`), resume);
  assert.deepEqual(await Promise.all(owners.map(again)), [
    "agent again",
    'agent"] first',
    "other first",
  ]);
});
