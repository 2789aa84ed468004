/**
 * `until` patterns run on V8's linear-time engine against a real server: patterns that engine
 * refuses are 400s naming the construct, and a pattern that backtracks exponentially, fed
 * hostile output, stalls neither the server nor other sessions. A pattern without syntax is a
 * substring, which matches exactly where the RegExp would (and needs no engine: this test
 * process runs without it).
 *
 * @module
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import {
  compileUntil,
  maxMatchLength,
  UntilMatcher,
  type UntilPattern,
} from "../../src/sessions/until.ts";
import { startServer } from "../helpers/server.ts";

Deno.test("until: constructs the linear engine refuses are named in a 400", async (t) => {
  const server = await startServer();
  try {
    const refused = [
      ["(a)\\1", "backreference \\1"],
      ["(?<q>a)\\k<q>", "backreference \\k<q>"],
      ["done(?=!)", "lookahead (?=…)"],
      ["done(?!x)", "lookahead (?!…)"],
      ["(?i:done)", "case-insensitive group (?i:…)"],
      ["(?<=(a))b", "capture group inside a lookbehind (?<=…)"],
      ["a{17}", "counted repetition {17} (at most 16 copies, nested counts multiply)"],
      ["(?:a{4}){5}", "counted repetitions nested past 16 copies"],
    ];
    for (const [until, construct] of refused) {
      await t.step(until, async () => {
        const r = await server.post("/v1/exec_command", { cmd: "true", until });
        assert.equal(r.status, 400);
        assert.deepEqual(r.body, {
          error: {
            code: "invalid_request",
            message: `until: cannot be matched in linear time: ${construct} is not supported`,
          },
        });
      });
    }
    // A regex by its size in the linear engine, a substring by its length.
    for (
      const [until, size] of [["(?:ab){1,8}".repeat(12), 1056], ["x".repeat(513), 513]] as const
    ) {
      await t.step(`a pattern too large for a bounded match is a 400 (size ${size})`, async () => {
        const r = await server.post("/v1/exec_command", { cmd: "true", until });
        assert.equal(r.status, 400);
        assert.deepEqual(r.body, {
          error: {
            code: "invalid_request",
            message: "until: too large to match in bounded time: length times largest " +
              `repetition count is ${size}, at most 512`,
          },
        });
      });
    }
    await t.step("the latest output matches after more than a window of it", async () => {
      const r = await server.post("/v1/exec_command", {
        cmd: "head -c 300000 /dev/zero | tr '\\0' a; echo; echo DONE; read x",
        until: "DONE\\r\\n",
        yield_time_ms: 30000,
        login: false,
      });
      assert.equal(r.status, 200);
      assert.match(r.body.output, /a\r\nDONE\r\n$/);
      assert.equal(typeof r.body.session_id, "number");
      await server.del(`/v1/sessions/${r.body.session_id}`);
    });
    await t.step("lookbehind, classes and small counts are accepted", async () => {
      const r = await server.post("/v1/exec_command", {
        cmd: "echo 'x=12;'",
        until: "(?<=x=)\\d{1,3}[;,]",
        login: false,
      });
      assert.equal(r.status, 200);
      assert.equal(r.body.output, "x=12;\r\n");
    });
  } finally {
    await server.stop();
  }
});

Deno.test("until: an exponential pattern over hostile output stalls nothing", async () => {
  const server = await startServer();
  let answered = false;
  try {
    // 30 a's and a '!' take a backtracking engine minutes per match attempt.
    const hostile = server.post("/v1/exec_command", {
      cmd: `yes ${"a".repeat(30)}! | head -n 20000; echo; read x`,
      until: "^(a+)+$",
      yield_time_ms: 2000,
      login: false,
    });
    let done = false;
    const finished = hostile.finally(() => done = true);
    finished.catch(() => {}); // A stalled server fails the requests below first.
    const deadline = () => AbortSignal.timeout(5000);
    // Until the hostile call returns (at its yield time), the server must keep answering.
    do {
      const health = await fetch(`${server.url}/healthz`, { signal: deadline() });
      assert.equal(health.status, 200);
      await health.body?.cancel();
      const other = await fetch(`${server.url}/v1/exec_command`, {
        method: "POST",
        headers: { "content-type": "application/json", ...server.auth },
        body: JSON.stringify({ cmd: "echo other", login: false }),
        signal: deadline(),
      });
      assert.equal(other.status, 200);
      assert.equal((await other.json()).output, "other\r\n");
    } while (!done);
    const r = await finished;
    assert.equal(r.status, 200);
    // No match: the call returned at its yield time with the session still running.
    assert.equal(typeof r.body.session_id, "number");
    assert.match(r.body.output, /(a{30}!\r\n){100}/);
    answered = true;
    await server.del(`/v1/sessions/${r.body.session_id}`);
  } finally {
    // A stalled server cannot run its SIGTERM handler.
    if (!answered) Deno.kill(server.pid, "SIGKILL");
    await server.stop();
  }
});

Deno.test("until: a pattern is compiled once and shared while it is recently used", async () => {
  const until = new URL("../../src/sessions/until.ts", import.meta.url).href;
  const script = `
    import { CACHED_PATTERNS, compileUntil, UntilMatcher } from ${JSON.stringify(until)};
    const first = compileUntil("\\\\$ $");
    const again = compileUntil("\\\\$ $");
    // A shared pattern keeps no state: every matcher finds its prompt.
    const found = [1, 2, 3].map(() => new UntilMatcher(again).feed(new TextEncoder().encode("x $ ")));
    for (let i = 1; i < CACHED_PATTERNS; i++) compileUntil("p" + i);
    const kept = compileUntil("\\\\$ $") === first;
    for (let i = 0; i < CACHED_PATTERNS; i++) compileUntil("q" + i);
    const evicted = compileUntil("\\\\$ $") !== first;
    let errors = 0;
    for (let i = 0; i < 2; i++) try { compileUntil("(a"); } catch { errors++; }
    console.log(JSON.stringify({ same: first === again, as: first, found, kept, evicted, errors }));
  `;
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["eval", "--v8-flags=--enable-experimental-regexp-engine", script],
    stderr: "inherit",
  }).output();
  assert.equal(out.code, 0);
  assert.deepEqual(JSON.parse(new TextDecoder().decode(out.stdout)), {
    same: true,
    as: "/\\$ $/",
    found: [true, true, true],
    kept: true,
    evicted: true,
    errors: 2,
  });
});

Deno.test("until: a pattern without syntax matches exactly where its RegExp would", () => {
  // Characters a pattern may hold: syntax among them sends it to the linear engine, which this
  // process lacks, so only substrings compile here.
  const char = fc.constantFrom(..."ab$.*?+^|\\()[]{}/-,:=!<>#\n\r \u00e9\ud83d\ude00");
  const source = fc.array(char, { minLength: 1, maxLength: 8 }).map((cs) => cs.join(""));
  const text = fc.array(char, { maxLength: 40 }).map((cs) => cs.join(""));
  let substrings = 0;
  fc.assert(
    fc.property(source, text, (source, text) => {
      let pattern;
      try {
        pattern = compileUntil(source);
      } catch (err) {
        assert.match(String(err), /V8 runs without --enable-experimental-regexp-engine/);
        assert.match(source, /[\\^$.|?*+()[\]{}]/, "only a pattern with syntax needs the engine");
        return;
      }
      substrings++;
      const bytes = new TextEncoder().encode(text);
      assert.equal(new UntilMatcher(pattern).feed(bytes), new RegExp(source).test(text));
    }),
    { numRuns: 2000, seed: 7 },
  );
  assert.ok(substrings > 100, `only ${substrings} substring patterns were tried`);
});

Deno.test("until: literals joined by [\\s\\S]* match exactly where their RegExp would", () => {
  // Compiled without the linear engine (this process lacks it), so never as a RegExp.
  const char = fc.constantFrom(..."aab\n\r$\u00e9\ud83d\ude00");
  const literal = fc.array(fc.constantFrom(..."ab\n\ud83d\ude00"), { maxLength: 3 })
    .map((cs) => cs.join(""));
  const source = fc.array(literal, { minLength: 2, maxLength: 4 }).map((ls) =>
    ls.join("[\\s\\S]*")
  );
  const text = fc.array(char, { maxLength: 40 }).map((cs) => cs.join(""));
  let matched = 0;
  fc.assert(
    fc.property(source, text, (source, text) => {
      const pattern = compileUntil(source);
      assert.equal(pattern.maxLength, undefined);
      const expected = new RegExp(source).test(text);
      if (expected) matched++;
      assert.equal(new UntilMatcher(pattern).feed(new TextEncoder().encode(text)), expected);
    }),
    { numRuns: 2000, seed: 11 },
  );
  assert.ok(matched > 100 && matched < 1900, `${matched} of 2000 matched: too few of one outcome`);
  // Overlap is not a second match; a literal with syntax still needs the engine.
  assert.equal(compileUntil("aba[\\s\\S]*aba").test("ababa"), false);
  assert.equal(compileUntil("ping7[\\s\\S]*ping7").test("ping7\r\nping7\r\n"), true);
  assert.throws(() => compileUntil("a.[\\s\\S]*b"), /V8 runs without/);
});

Deno.test("until: the longest match a pattern can make, or no bound", () => {
  const cases: [string, number | undefined][] = [
    ["abc", 3],
    [">>> $", 4],
    ["\\$ $", 2],
    ["^done\\r?\\n", undefined],
    ["a|bcd|ef", 3],
    ["(?:ab){3}x?", 7],
    ["x\\d{2,5}", 6],
    ["[a-z\\]]{4}", 4],
    ["(?<name>ab)(?<=b)c", undefined],
    ["(?<name>ab)c\\b", undefined],
    ["(?<name>ab)c$", 3],
    ["\\u00e9\\x41\\cJ", 3],
    ["a{2,}", undefined],
    ["a.*b", undefined],
    ["(ab)+", undefined],
    ["x*?", undefined],
  ];
  for (const [source, longest] of cases) assert.equal(maxMatchLength(source), longest, source);
  // Never less than a real match: checked with the backtracking engine on small random input.
  const char = fc.constantFrom(..."ab.|?*+()[]{}^$\\d2,:");
  fc.assert(
    fc.property(
      fc.array(char, { minLength: 1, maxLength: 10 }).map((cs) => cs.join("")),
      fc.array(fc.constantFrom(..."ab2 \n"), { maxLength: 30 }).map((cs) => cs.join("")),
      (source, text) => {
        let regexp;
        try {
          regexp = new RegExp(source, "g");
        } catch {
          return;
        }
        const longest = maxMatchLength(source);
        if (longest === undefined) return;
        for (const m of text.matchAll(regexp)) {
          assert.ok(m[0].length <= longest, `${source} ${m[0]}`);
        }
      },
    ),
    { numRuns: 3000, seed: 11 },
  );
});

Deno.test("until: an assertion at a chunk's edge sees the text before it, as over the window", () => {
  /** A matcher of `source` (on the backtracking engine: this process has no linear one). */
  const matcher = (source: string) => {
    const regexp = new RegExp(source);
    const pattern = {
      window: 16 * 1024,
      maxLength: maxMatchLength(source),
      test: (text: string) => regexp.test(text),
    };
    return new UntilMatcher(pattern as unknown as UntilPattern);
  };
  const feed = (m: UntilMatcher, ...chunks: string[]) =>
    chunks.map((chunk) => m.feed(new TextEncoder().encode(chunk))).at(-1);
  // Each pair: the same text in one chunk and in two; the answer must not depend on the cut.
  const cases: [string, string, string][] = [
    ["\\bok\\b", "boo", "k"],
    ["\\Bok", "o", "k"],
    ["^done", "xxxxdon", "e"],
    ["(?<=ab)c", "ab", "c"],
    ["(?<!ab)c", "ab", "c"],
  ];
  for (const [source, before, after] of cases) {
    const whole = feed(matcher(source), before + after);
    assert.equal(whole, new RegExp(source).test(before + after), source);
    assert.equal(feed(matcher(source), before, after), whole, `${source}: ${before}|${after}`);
  }
});

Deno.test("until: a flood in small chunks tests each character about twice, and finds what spans chunks", async () => {
  /** A pattern stand-in that counts the characters it is tested over. */
  const counting = (regexp: RegExp, maxLength: number | undefined) => {
    const pattern = {
      window: 16 * 1024,
      maxLength,
      tested: 0,
      test(text: string) {
        pattern.tested += text.length;
        return regexp.test(text);
      },
    };
    return pattern;
  };
  const chunk = new TextEncoder().encode("x".repeat(4096));
  const flood = 256;
  // A bounded pattern: only the new text and its length - 1 before it.
  const bounded = counting(/>>> $/, 4);
  const a = new UntilMatcher(bounded as unknown as UntilPattern);
  for (let i = 0; i < flood; i++) assert.equal(a.feed(chunk), false);
  assert.ok(bounded.tested <= flood * (4096 + 3), `${bounded.tested}`);
  assert.equal(a.feed(new TextEncoder().encode(">>")), false);
  assert.equal(a.feed(new TextEncoder().encode("> ")), true, "a match across two chunks");
  // An unbounded one: the window at most once per half window, and when the burst ends.
  const open = counting(/done.*!/, undefined);
  let late = 0;
  const b = new UntilMatcher(open as unknown as UntilPattern, () => late++);
  for (let i = 0; i < flood; i++) assert.equal(b.feed(chunk), false);
  assert.ok(open.tested <= 2.5 * flood * 4096, `${open.tested}`);
  assert.equal(b.feed(new TextEncoder().encode("done")), false);
  assert.equal(b.feed(new TextEncoder().encode(" now!")), false, "put off to the burst's end");
  await new Promise<void>((resolve) => setTimeout(resolve, 0));
  assert.equal(late, 1);
  assert.equal(b.matched, true);
  b.close();
});

Deno.test("until: a short answer to a pattern without a length bound is matched at once", () => {
  const pattern = {
    window: 16 * 1024,
    maxLength: undefined,
    test: (text: string) => /ping1[\s\S]*ping1/.test(text),
  };
  let late = 0;
  const m = new UntilMatcher(pattern as unknown as UntilPattern, () => late++);
  assert.equal(m.feed(new Uint8Array()), false);
  assert.equal(m.feed(new TextEncoder().encode("ping1\r\n")), false);
  // Put off to a timer, this round trip would wait for the next turn of the event loop.
  assert.equal(m.feed(new TextEncoder().encode("ping1\r\n")), true);
  assert.equal(late, 0);
  m.close();
});
