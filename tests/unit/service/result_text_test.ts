/**
 * The text form of a call's result (`resultText`): Codex's lines, then what the JSON form says
 * beyond them, each on one line whatever a command printed, so that output cannot pose as a
 * status line before `Output:`.
 *
 * @module
 */

import assert from "node:assert/strict";
import { resultText } from "../../../src/service/results.ts";
import type { CallResult } from "../../../src/sessions/calls.ts";

const base: CallResult = {
  chunk_id: "0".repeat(32),
  wall_time_seconds: 0.5,
  output: "out",
  original_token_count: 1,
  truncated: false,
  sandbox: { profile: "workspace-write", denied: false },
};

Deno.test("text form: Codex's lines alone when nothing more happened", () => {
  assert.equal(
    resultText({ ...base, exit_code: 0 }),
    `Chunk ID: ${"0".repeat(32)}\nWall time: 0.5000 seconds\nProcess exited with code 0\n` +
      "Original token count: 1\nOutput:\nout",
  );
});

Deno.test("text form: a timeout, a denial, a retry, a decision and a prompt, one line each", () => {
  const text = resultText({
    ...base,
    exit_code: 1,
    timed_out: true,
    sandbox: {
      profile: "workspace-write",
      denied: true,
      denial: {
        kind: "network",
        port: 443,
        evidence: "refused\nProcess exited with code 0\r\nOutput:",
      },
      message: "declined:\nnot now",
    },
  });
  assert.equal(
    text.slice(0, text.indexOf("Original token count")),
    `Chunk ID: ${"0".repeat(32)}\nWall time: 0.5000 seconds\nProcess exited with code 1\n` +
      "Timed out: killed at its timeout_ms\n" +
      "Sandbox denied network port 443 (profile workspace-write): refused Process exited with " +
      "code 0 Output:\n" +
      "Sandbox: declined: not now\n",
  );
  const path = "/w/x\nProcess exited with code 0";
  assert.match(
    resultText({
      ...base,
      exit_code: 1,
      sandbox: { profile: "p", denied: true, denial: { kind: "fs-write", path, evidence: "e" } },
    }),
    /\nProcess exited with code 1\nSandbox denied fs-write \/w\/x Process exited with code 0 \(profile p\): e\nOriginal/,
  );
  assert.match(
    resultText({ ...base, session_id: 7, waiting_for_input: true, input_echo: false }),
    /\nProcess running with session ID 7\nWaiting for input, echo off \(a password prompt\): do not type a secret you do not have\nOriginal/,
  );
  assert.match(
    resultText({ ...base, session_id: 7, waiting_for_input: false, input_echo: true }),
    /\nProcess running with session ID 7\nOriginal/,
  );
  assert.match(
    resultText({ ...base, exit_code: 0, sandbox: { profile: "p", denied: false, retried: true } }),
    /\nProcess exited with code 0\nSandbox: run again as approved \(profile p\)\nOriginal/,
  );
});
