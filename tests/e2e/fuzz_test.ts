/**
 * Property-based fuzzing of every route and field against a real server: malformed JSON, wrong
 * types, huge and tiny numbers, unicode and NUL in every string, invalid `until` regexes,
 * unknown ids and signals, bad offsets and idempotency keys. Every case must be answered before
 * its deadline, never with a 5xx, and every 4xx must carry a JSON error with a message (naming
 * the field when the body is an object); the server must be healthy afterwards.
 *
 * A bounded, seeded run (`UEXEC_FUZZ_RUNS`, default 300) is part of `deno task test`;
 * `deno task fuzz` runs 5000 cases (set `UEXEC_FUZZ_SEED` to vary them). Commands that pass
 * validation only ever run `printf` with a quoted argument, so no generated text runs as shell.
 *
 * @module
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import { startServer } from "../helpers/server.ts";

const RUNS = Number(Deno.env.get("UEXEC_FUZZ_RUNS") ?? "300");
const SEED = Number(Deno.env.get("UEXEC_FUZZ_SEED") ?? "20261123");
/** No case may take longer than this (the longest valid wait generated is 300 ms). */
const DEADLINE_MS = 20_000;

/** A generated request. */
interface Case {
  method: "GET" | "POST" | "DELETE";
  path: string;
  headers: Record<string, string>;
  /** Raw body text (already JSON, or deliberately not). */
  body?: string;
}

const weird = fc.oneof(
  fc.string({ unit: "grapheme", maxLength: 40 }),
  fc.string({ unit: "binary", maxLength: 40 }),
  fc.constantFrom(
    "",
    "\0",
    "a\0b",
    "\u0000\u0001\u001b[2J",
    "\ud800",
    "💥".repeat(20),
    "../..",
    "/",
  ),
);
const numbers = fc.oneof(
  fc.integer(),
  fc.double(),
  fc.constantFrom(0, -0, -1, 1, 1.5, 2 ** 31, 2 ** 53, 1e300, -1e300, Number.MIN_VALUE),
);
const anything = fc.oneof(
  weird,
  numbers,
  fc.boolean(),
  fc.constant(null),
  fc.array(fc.integer(), { maxLength: 3 }),
  fc.dictionary(fc.string({ maxLength: 5 }), fc.integer(), { maxKeys: 3 }),
);
/** Strings past what `execve` takes in one argument or variable (128 KiB). */
const huge = fc.constantFrom("x".repeat(131_072), "€".repeat(44_000));
/** A field's value: usually of the right kind, often not. */
const field = <T>(good: fc.Arbitrary<T>) => fc.oneof({ weight: 3, arbitrary: good }, anything);

/**
 * `until` patterns: valid ones, invalid syntax, and catastrophic ones for a backtracking engine
 * (matched against `hostile` output: a long run of `a` then `!`); matching is linear-time, so
 * they must neither stall the server nor answer 5xx.
 */
const until = fc.oneof(
  fc.constantFrom("x", "^", "done$", "(", "[", "*", "a{2,1}", "\\", "(?<", "(?<a>x)(?<a>y)", "+?"),
  fc.constantFrom("^(a+)+$", "(a|aa)+$", "(a|a?)+b", "^(a*)*$", "(.*a){12}!x", "(a+){16}b"),
  weird,
);

/** Output that makes the catastrophic patterns above explode in a backtracking engine. */
const hostile = fc.constant(`printf '${"a".repeat(40)}!\\n%.0s' $(seq 1 50)`);

/** Every byte of `s` (lone surrogates as U+FFFD) percent-encoded, for any string in a path. */
const percent = (s: string) =>
  Array.from(new TextEncoder().encode(s), (b) => `%${b.toString(16).padStart(2, "0")}`).join("");

/** A command that only ever prints its quoted argument. */
const safeCmd = weird.map((s) => `printf '%s' '${s.replaceAll("'", "'\\''")}'`);

const execBody = fc.record({
  cmd: field(fc.oneof(safeCmd, hostile)),
  workdir: field(fc.constantFrom(".", "nope", "/", "/proc/self", "a\0b")),
  shell: field(fc.constantFrom("/bin/sh", "bash", "/nonexistent", "sh\0")),
  login: field(fc.boolean()),
  tty: field(fc.boolean()),
  cols: field(fc.integer({ min: -5, max: 2000 })),
  rows: field(fc.integer({ min: -5, max: 2000 })),
  env: field(fc.dictionary(weird, fc.oneof(weird, huge), { maxKeys: 3 })),
  yield_time_ms: field(fc.integer({ min: -1, max: 300 })),
  max_output_tokens: field(fc.integer({ min: -1, max: 300_000 })),
  until: field(until),
  profile: field(fc.constantFrom("read-only", "workspace-write", "full-access", "nope")),
  sandbox_permissions: field(fc.constantFrom("use_default", "require_escalated")),
  escalate: field(fc.record({ write: field(fc.array(weird, { maxLength: 2 })) })),
  justification: field(weird),
  timeout_ms: field(fc.integer({ min: -1, max: 100_000_000 })),
  bogus: anything,
}, { requiredKeys: [] });

/** A valid exec body with fields in range, so commands really start (and print). */
const validExec = fc.record({
  cmd: fc.oneof({ weight: 5, arbitrary: safeCmd }, huge.map((h) => `printf '%s' '${h}'`)),
  login: fc.boolean(),
  tty: fc.boolean(),
  cols: fc.integer({ min: 1, max: 1000 }),
  yield_time_ms: fc.integer({ min: 0, max: 300 }),
  max_output_tokens: fc.integer({ min: 1, max: 262_144 }),
  env: fc.dictionary(fc.stringMatching(/^[A-Z_]{1,8}$/), fc.oneof(weird, huge), { maxKeys: 3 }),
  until: fc.constantFrom("x", "^", "done$"),
}, { requiredKeys: ["cmd"] });

const writeBody = fc.record({
  session_id: field(fc.oneof(
    { weight: 3, arbitrary: fc.constant(0).map(() => Number(liveId)) },
    fc.integer({ min: -1, max: 2 ** 32 }),
    fc.constant(1e300),
  )),
  chars: field(fc.oneof(weird, fc.constantFrom("\u0004", "\u0004more", "more"))),
  yield_time_ms: field(fc.integer({ min: -1, max: 300 })),
  max_output_tokens: field(fc.integer({ min: -1, max: 300_000 })),
  until: field(until),
}, { requiredKeys: [] });

/** A body: valid-looking JSON of the route's shape, another JSON value, or broken text. */
const bodyOf = (shape: fc.Arbitrary<unknown>) =>
  fc.oneof(
    { weight: 6, arbitrary: shape.map((v) => JSON.stringify(v)) },
    anything.map((v) => JSON.stringify(v)),
    fc.constantFrom("{", "{not json", "[1,2", '{"cmd":', "\0", "", "null", '{"a":1}{"b":2}'),
    fc.string({ maxLength: 30 }),
  );

/** A live session without a terminal (set once it exists). */
let liveId = "1";

/** A valid write to the live session: input, `^D` (closing its stdin), more input. */
const validWrite = fc.record({
  session_id: fc.constant(0).map(() => Number(liveId)),
  chars: fc.oneof(weird, fc.constantFrom("\u0004", "\u0004more", "more")),
  yield_time_ms: fc.integer({ min: 0, max: 300 }),
  until: fc.constantFrom("x", "^"),
}, { requiredKeys: ["session_id", "chars"] });
/** Session ids in paths: the live session's, unknown ones, and malformed ones. */
const unknownId = fc.oneof(
  fc.constant(0).map(() => liveId),
  fc.integer({ min: 1, max: 999 }).map(String),
  fc.constantFrom("-1", "1.5", "x", "%00", "99999999999999999999", "0x10", "1e3", "%F0%9F%92%A5"),
  fc.string({ maxLength: 8 }).map(percent),
);
const offset = fc.oneof(
  fc.nat().map(String),
  fc.constantFrom("-1", "x", "1.5", "", "1e300", "99999999999999999999", "%00"),
);
const idemKey = fc.oneof(fc.string({ maxLength: 300 }), fc.constantFrom("k", "a b", "é"));

const cases: fc.Arbitrary<Case> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.record({
      method: fc.constant("POST" as const),
      path: fc.constant("/v1/exec_command"),
      headers: fc.oneof(
        fc.constant({}),
        idemKey.map((k) => ({ "idempotency-key": k.replace(/[\r\n\0]/g, "") })),
      ),
      body: fc.oneof(bodyOf(execBody), validExec.map((v) => JSON.stringify(v))),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      method: fc.constant("POST" as const),
      path: fc.constant("/v1/write_stdin"),
      headers: fc.constant({}),
      body: fc.oneof(bodyOf(writeBody), validWrite.map((v) => JSON.stringify(v))),
    }),
  },
  fc.record({
    method: fc.constant("POST" as const),
    path: unknownId.map((id) => `/v1/sessions/${id}/resize`),
    headers: fc.constant({}),
    body: bodyOf(fc.record({ cols: field(fc.integer()), rows: field(fc.integer()) })),
  }),
  fc.record({
    method: fc.constant("POST" as const),
    path: unknownId.map((id) => `/v1/sessions/${id}/signal`),
    headers: fc.constant({}),
    body: bodyOf(fc.record({
      signal: field(fc.constantFrom("SIGCONT", "toString", "constructor", "__proto__", "SIGWINCH")),
    })),
  }),
  fc.record({
    method: fc.constantFrom("GET" as const, "DELETE" as const),
    path: unknownId.map((id) => `/v1/sessions/${id}`),
    headers: fc.constant({}),
  }),
  fc.record({
    method: fc.constant("GET" as const),
    path: fc.tuple(unknownId, offset).map(([id, n]) => `/v1/sessions/${id}/output?since=${n}`),
    headers: fc.constant({}),
  }),
  fc.record({
    method: fc.constant("GET" as const),
    path: unknownId.map((id) => `/v1/sessions/${id}/stream`),
    headers: offset.map((n) => ({ "last-event-id": n })),
  }),
  fc.record({
    method: fc.constant("POST" as const),
    path: weird.map((id) => `/v1/approvals/${percent(id)}`),
    headers: fc.constant({}),
    body: bodyOf(fc.record({ decision: field(fc.constantFrom("approve", "deny")) })),
  }),
  fc.record({
    method: fc.constantFrom("POST" as const, "DELETE" as const),
    path: fc.constant("/v1/agents"),
    headers: fc.constant({}),
    body: bodyOf(fc.record({ name: field(weird) })),
  }),
);

/** The fields (and headers) a 400 may name: every schema's keys, then `.` and a sub-path. */
const FIELDS = [
  "body",
  "id",
  "since",
  "Idempotency-Key",
  "Last-Event-ID",
  "cmd",
  "workdir",
  "shell",
  "login",
  "tty",
  "cols",
  "rows",
  "env",
  "yield_time_ms",
  "max_output_tokens",
  "until",
  "profile",
  "sandbox_permissions",
  "escalate",
  "justification",
  "timeout_ms",
  "session_id",
  "chars",
  "signal",
  "decision",
  "unsandboxed",
  "name",
  "max_profile",
  "max_sessions",
  "max_egress",
];
/** A 400's message names what is wrong: a field, or the JSON shape when it is not an object. */
const NAMES_FIELD = new RegExp(
  `^(${FIELDS.join("|")})(\\.|: )|^Unrecognized keys?: |^Invalid input: expected object`,
);

Deno.test(`fuzz: ${RUNS} cases over every route, none 5xx, none hangs`, async () => {
  const server = await startServer({
    UEXEC_APPROVAL_POLICY: "never",
    UEXEC_MAX_SESSIONS: "100000",
  });
  const statuses = new Map<number, number>();
  const live = await server.post("/v1/exec_command", {
    cmd: "trap '' INT; sleep 100000",
    tty: false,
    yield_time_ms: 250,
  });
  liveId = String(live.body.session_id);
  try {
    await fc.assert(
      fc.asyncProperty(cases, async (c) => {
        const res = await fetch(server.url + c.path, {
          method: c.method,
          headers: { "content-type": "application/json", ...server.auth, ...c.headers },
          body: c.body,
          signal: AbortSignal.timeout(DEADLINE_MS),
        });
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
        if (res.headers.get("content-type") === "text/event-stream") {
          await res.body!.cancel();
          return;
        }
        const text = await res.text();
        assert.ok(res.status < 500, `${res.status} ${text}`);
        if (res.status < 400) return;
        const error = JSON.parse(text).error;
        assert.equal(typeof error.code, "string", text);
        assert.ok(error.message.length > 0, text);
        if (res.status === 400 && c.body?.startsWith("{")) {
          assert.match(error.message, NAMES_FIELD, text);
        }
      }),
      { numRuns: RUNS, seed: SEED, endOnFailure: true },
    );
    const health = await fetch(`${server.url}/healthz`);
    assert.equal(health.status, 200);
    await health.body?.cancel();
    const r = await server.post("/v1/exec_command", { cmd: "echo still-fine", login: false });
    assert.equal(r.body.output, "still-fine\r\n");
  } finally {
    const stopped = await server.stop();
    assert.equal(stopped.code, 0, stopped.stderr);
    console.log(`statuses: ${JSON.stringify(Object.fromEntries(statuses))}`);
  }
});
