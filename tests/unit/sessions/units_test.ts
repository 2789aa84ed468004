/**
 * Pure pieces of the session layer, tested directly: a call with no time to wait, Codex's
 * pruning cases, the base
 * environment, wait-status decoding, and truncation's exact format.
 *
 * @module
 */

import assert from "node:assert/strict";
import { countTokens } from "gpt-tokenizer/encoding/o200k_base";
import { decodeWaitStatus } from "../../../src/pty/child.ts";
import type { ResolvedPolicy } from "../../../src/sandbox/policy/policy.ts";
import { baseEnv, childEnv, FORCED_ENV, isSecretName } from "../../../src/sessions/env.ts";
import { chunkId, pickPruneVictim } from "../../../src/sessions/manager.ts";
import { Session } from "../../../src/sessions/session.ts";
import { collect } from "../../../src/sessions/collect.ts";
import { countLines, truncateToTokens } from "../../../src/output/truncate.ts";

const policy = { profile: "p", enforce: false } as ResolvedPolicy;

/** Ten sessions, used in id order (1 oldest), with the given ids exited. */
function sessions(exited: number[]): Session[] {
  return Array.from({ length: 10 }, (_, i) => {
    const id = i + 1;
    const s = new Session(
      { id, node: "n", owner: "a", command: "x", workdir: "/", tty: true, profile: "p", policy },
      () => {},
    );
    s.lastUsedAt = 1_700_000_000_000 + id * 1000;
    if (exited.includes(id)) s.ended({ code: 0 });
    return s;
  });
}

Deno.test("a call with no time to wait (yield 0) takes what is pending without a timer", async () => {
  const [live] = sessions([]);
  let done = false;
  const call = collect(live, { yieldMs: 0 }).then((got) => {
    done = true;
    return got;
  });
  // Answered within the microtasks of this turn: no deadline's timer between call and answer.
  for (let i = 0; i < 5 && !done; i++) await Promise.resolve();
  assert.equal(done, true);
  assert.deepEqual({ text: (await call).text, exited: (await call).exited }, {
    text: "",
    exited: false,
  });
});

Deno.test("pruning prefers an exited session outside the 8 most recently used", () => {
  assert.equal(pickPruneVictim(sessions([2]))?.id, 2);
});

Deno.test("pruning falls back to the least recently used when none exited", () => {
  assert.equal(pickPruneVictim(sessions([]))?.id, 1);
});

Deno.test("pruning protects recent sessions even when they exited", () => {
  assert.equal(pickPruneVictim(sessions([3, 10]))?.id, 1);
});

Deno.test("with 8 sessions or fewer nothing may be pruned", () => {
  assert.equal(pickPruneVictim(sessions([]).slice(0, 8)), undefined);
});

Deno.test("the base environment keeps the minimum, drops secrets and forces Codex's values", () => {
  const env = baseEnv({
    PATH: "/p",
    HOME: "/h",
    USER: "u",
    NO_COLOR: "0",
    TERM: "xterm",
    UEXEC_TOKEN: "t",
    AWS_SECRET_ACCESS_KEY: "s",
    GITHUB_TOKEN: "g",
    DB_PASSWORD: "p",
    RANDOM_VAR: "r",
  });
  assert.deepEqual(env, { PATH: "/p", HOME: "/h", USER: "u", ...FORCED_ENV });
  assert.deepEqual(
    Object.entries(childEnv(env, "/w", { EXTRA: "1", TERM: "xterm-256color" })).filter(([k]) =>
      /^(PWD|EXTRA|TERM)$/.test(k)
    ),
    [["TERM", "xterm-256color"], ["PWD", "/w"], ["EXTRA", "1"]],
  );
  for (const name of ["UEXEC_ANYTHING", "MY_API_KEY", "SECRET", "npm_token", "PASSWD_FILE"]) {
    assert.equal(isSecretName(name), true, name);
  }
  for (const name of ["PATH", "HOME", "LANG", "EDITOR"]) {
    assert.equal(isSecretName(name), false, name);
  }
});

Deno.test("wait statuses: exit codes, and 128 + signal for signal deaths", () => {
  assert.deepEqual(decodeWaitStatus(17 << 8), { code: 17 });
  assert.deepEqual(decodeWaitStatus(9), { code: 137, signal: 9 });
  assert.deepEqual(decodeWaitStatus(15 | 0x80), { code: 143, signal: 15 });
});

Deno.test("chunk ids are 128 random bits in hex", () => {
  const ids = new Set(Array.from({ length: 100 }, chunkId));
  assert.equal(ids.size, 100);
  for (const id of ids) assert.match(id, /^[0-9a-f]{32}$/);
});

Deno.test("line counts follow Codex (a last line without newline counts)", () => {
  assert.deepEqual(["", "a", "a\n", "a\nb", "a\nb\n", "\n\n"].map(countLines), [0, 1, 1, 2, 2, 2]);
});

Deno.test("under budget the text comes back whole, with its exact token count", () => {
  const text = "hello world\nsecond line\n";
  assert.deepEqual(truncateToTokens(text, 100), {
    output: text,
    originalTokenCount: countTokens(text),
    truncated: false,
  });
  assert.deepEqual(truncateToTokens("", 1), {
    output: "",
    originalTokenCount: 0,
    truncated: false,
  });
});

Deno.test("over budget: head and tail within the budget, on character boundaries", () => {
  const text = Array.from({ length: 400 }, (_, i) => `línea ${i} 😀 ✓\n`).join("");
  const r = truncateToTokens(text, 40);
  const m = /^Total output lines: 400\n\n([\s\S]*)…(\d+) tokens truncated…([\s\S]*)$/.exec(
    r.output,
  );
  assert.ok(m, r.output);
  const [, head, cut, tail] = m;
  assert.ok(text.startsWith(head) && text.endsWith(tail));
  assert.ok(head.length > 0 && tail.length > 0);
  assert.equal(head.includes("\uFFFD") || tail.includes("\uFFFD"), false);
  const kept = countTokens(head) + countTokens(tail);
  assert.ok(kept <= 40, `kept ${kept}`);
  assert.equal(Number(cut), r.originalTokenCount - kept);
  assert.equal(r.originalTokenCount, countTokens(text));
});

Deno.test("a single huge line is counted and cut without an unbounded tokenizer call", () => {
  const text = "x".repeat(200_000);
  const r = truncateToTokens(text, 10);
  assert.equal(r.truncated, true);
  assert.ok(Math.abs(r.originalTokenCount - 25_000) <= 60, String(r.originalTokenCount));
  assert.match(r.output, /^Total output lines: 1\n\nx+…\d+ tokens truncated…x+$/);
});

Deno.test("special-token text in output is counted and cut as ordinary text", () => {
  const line = "vocab: <|endoftext|> <|im_start|>\n";
  const plain = { disallowedSpecial: new Set<string>() };
  assert.deepEqual(truncateToTokens(line, 100), {
    output: line,
    originalTokenCount: countTokens(line, plain),
    truncated: false,
  });
  const r = truncateToTokens(line.repeat(50), 10);
  assert.equal(r.truncated, true);
  assert.equal(r.output, "Total output lines: 50\n\nvocab: <|…790 tokens truncated…|im_start|>\n");
});
