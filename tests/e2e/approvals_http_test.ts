/**
 * The approval policies end to end: real servers, real sandboxed commands, decisions posted over
 * HTTP while the `exec_command` that asked waits.
 *
 * A command that needs approval blocks, so each case issues the exec without awaiting it, waits
 * for `approval_requested` on `GET /v1/events`, decides, then awaits the exec. If the exec
 * returns without asking, the wait fails instead of hanging. "Nothing was asked" is checked by
 * running a marker command afterwards and inspecting every event up to the marker's `begin`.
 *
 * @module
 */

import assert from "node:assert/strict";
import { startServer, type TestServer } from "../helpers/server.ts";
import { connectSse, type SseClient, type SseEvent } from "../helpers/sse.ts";

/** A session uid (each server leases its own block of the default pool: 2000000000 and up). */
const SESSION_UID = /^20\d{8}$/;
/** A file holding what `id -u` printed in a session. */
const SESSION_UID_FILE = /^20\d{8}\n$/;

/** `output` with a leading session uid line replaced by "UID". */
function uidLine(output: string): string {
  return output.replace(/^20\d{8}\r\n/, "UID\r\n");
}
const RETRY_REASON = "command failed in the sandbox; retry it with the access shown?";
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

// deno-lint-ignore no-explicit-any
type Body = any;

/** A server with an open event stream. */
interface Harness {
  server: TestServer;
  /** The server's approval timeout (`UEXEC_APPROVAL_TIMEOUT_MS`, 60000 when unset). */
  timeoutMs: number;
  events: SseClient;
  /** Start an exec without awaiting it. */
  exec(cmd: string, extra?: Record<string, unknown>): Promise<{ status: number; body: Body }>;
  /** Wait for the next approval request, failing if `pending` settles first. */
  nextApproval(pending: Promise<unknown>): Promise<Body>;
  /** Every event since the last call, up to a marker command run now (marker excluded). */
  eventsUntilMarker(): Promise<SseEvent[]>;
  /** Decide as the operator. */
  decide(
    id: string,
    decision: string,
    extra?: Record<string, unknown>,
  ): Promise<{ status: number; body: Body }>;
  stop(): Promise<void>;
}

async function harness(env: Record<string, string>): Promise<Harness> {
  const server = await startServer(env);
  const events = await connectSse(`${server.url}/v1/events`, server.operator.auth);
  let asked = 0;
  let seen = 0;
  const exec = (cmd: string, extra: Record<string, unknown> = {}) =>
    server.post("/v1/exec_command", { cmd, login: false, ...extra });
  const requests = (all: SseEvent[]) => all.filter((e) => e.event === "approval_requested");
  return {
    server,
    timeoutMs: Number(env.UEXEC_APPROVAL_TIMEOUT_MS ?? 60000),
    events,
    exec,
    async nextApproval(pending) {
      const wanted = ++asked;
      let done = false;
      const returnedFirst = pending.then((result) => {
        if (!done) throw new Error(`exec returned without asking: ${JSON.stringify(result)}`);
      });
      returnedFirst.catch(() => {});
      const all = await Promise.race([
        events.until((all) => requests(all).length >= wanted),
        returnedFirst.then(() => new Promise<never>(() => {})),
      ]);
      done = true;
      return requests(all)[wanted - 1].data.approval;
    },
    async eventsUntilMarker() {
      const marker = `echo marker-${crypto.randomUUID()}`;
      const r = await exec(marker);
      assert.equal(r.status, 200);
      const isBegin = (e: SseEvent) => e.event === "begin" && e.data.command === marker;
      const all = await events.until((all) => {
        const begin = all.find(isBegin);
        return begin !== undefined &&
          all.some((e) => e.event === "end" && e.data.session_id === begin.data.session_id);
      });
      const fresh = all.slice(seen, all.findIndex(isBegin));
      seen = all.length;
      asked = requests(all).length;
      return fresh;
    },
    decide: (id, decision, extra = {}) =>
      server.operator.post(`/v1/approvals/${id}`, { decision, ...extra }),
    async stop() {
      await events.close();
      await server.stop();
    },
  };
}

function kinds(events: SseEvent[]): string[] {
  return events.map((e) => e.event);
}

/**
 * An approval record as pending, for `command` from the default agent in the server's
 * workspace (as `h.exec` sends it: login false, with a tty, no env), with `extra` fields.
 */
function pendingRecord(
  h: Harness,
  approval: Body,
  command: string,
  reason: string,
  extra: Record<string, unknown> = {},
) {
  assert.match(approval.id, UUID);
  assert.ok(!Number.isNaN(Date.parse(approval.created_at)), approval.created_at);
  assert.match(approval.exec_id, UUID);
  return {
    id: approval.id,
    agent: "default",
    command,
    shell: "/bin/bash",
    login: false,
    workdir: h.server.workspace,
    tty: true,
    profile: "workspace-write",
    env: {},
    escalation: {},
    runs: "sandboxed under workspace-write",
    reason,
    justification: null,
    denial: null,
    can_choose_unsandboxed: false,
    created_at: approval.created_at,
    expires_at: new Date(Date.parse(approval.created_at) + h.timeoutMs).toISOString(),
    status: "pending",
    exec_id: approval.exec_id,
    ...extra,
  };
}

/** The fields of a retry question after a denied write to `target` in `dir`. */
function writeRetry(dir: string, target: string) {
  return {
    escalation: { write: [dir] },
    runs: `sandboxed under workspace-write, plus write access to ${dir}`,
    denial: {
      kind: "fs-write",
      path: target,
      evidence: `/bin/bash: line 1: ${target}: Read-only file system`,
    },
    can_choose_unsandboxed: true,
  };
}

/** A settled record as the decision returns it. */
function settled(approval: Body, decided: Body, status: string, granted?: Body) {
  assert.ok(!Number.isNaN(Date.parse(decided.decided_at)), decided.decided_at);
  return {
    ...approval,
    status,
    decided_at: decided.decided_at,
    decided_by: "operator",
    ...(granted === undefined ? {} : { granted }),
  };
}

/** A directory outside every writable root that DAC would let the sandbox uid write. */
async function outsideDir(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "uexec-approval-out-" });
  await Deno.chmod(dir, 0o777);
  return dir;
}

/** Runs `fn` with a harness on `env` and a directory outside the workspace; both go after it. */
async function withHarness(
  env: Record<string, string>,
  fn: (h: Harness, out: string) => Promise<void>,
): Promise<void> {
  const out = await outsideDir();
  const h = await harness(env);
  try {
    await fn(h, out);
  } finally {
    await h.stop();
    await Deno.remove(out, { recursive: true });
  }
}

Deno.test("on-failure: denied, asked, then retried, refused or remembered", (t) =>
  withHarness({ UEXEC_APPROVAL_POLICY: "on-failure" }, async (h, out) => {
    let decidedId = "";
    await t.step("approved: the retry runs with write access to that directory only", async () => {
      const cmd = `id -u > ${out}/approved && echo wrote`;
      const pending = h.exec(cmd);
      const approval = await h.nextApproval(pending);
      assert.deepEqual(
        approval,
        pendingRecord(h, approval, cmd, RETRY_REASON, writeRetry(out, `${out}/approved`)),
      );
      assert.deepEqual((await h.server.get("/v1/approvals")).body, { approvals: [approval] });
      const bad = await h.decide(approval.id, "maybe");
      assert.equal(bad.status, 400);
      assert.equal(bad.body.error.code, "invalid_request");
      assert.deepEqual((await h.server.get("/v1/approvals")).body, { approvals: [approval] });
      const decided = await h.decide(approval.id, "approved");
      assert.equal(decided.status, 200);
      assert.deepEqual(
        decided.body,
        settled(approval, decided.body, "approved", { write: [out] }),
      );
      decidedId = approval.id;
      const r = await pending;
      assert.equal(r.status, 200);
      assert.equal(r.body.output, "wrote\r\n");
      assert.equal(r.body.exit_code, 0);
      assert.deepEqual(r.body.sandbox, {
        profile: "workspace-write",
        denied: false,
        retried: true,
      });
      assert.match(await Deno.readTextFile(`${out}/approved`), SESSION_UID_FILE);
      assert.deepEqual((await h.server.get("/v1/approvals")).body, { approvals: [] });
      const events = await h.eventsUntilMarker();
      assert.deepEqual(kinds(events), [
        "begin",
        "end",
        "approval_requested",
        "approval_decided",
        "begin",
        "end",
      ]);
      assert.equal(events[1].data.exit_code, 1);
      assert.deepEqual(events[3].data.approval, decided.body);
      assert.equal(events[5].data.exit_code, 0);
    });

    await t.step("the approver may pick an unsandboxed retry instead", async () => {
      const cmd = `id -u > ${out}/root && echo wrote`;
      const pending = h.exec(cmd);
      const approval = await h.nextApproval(pending);
      const decided = await h.decide(approval.id, "approved", { unsandboxed: true });
      assert.deepEqual(decided.body.granted, { unsandboxed: true });
      const r = await pending;
      assert.equal(r.body.output, "wrote\r\n");
      assert.deepEqual(r.body.sandbox, { profile: "full-access", denied: false, retried: true });
      assert.equal(await Deno.readTextFile(`${out}/root`), "0\n");
      await h.eventsUntilMarker();
    });

    await t.step("deciding twice is 409; an unknown id is 404", async () => {
      const again = await h.decide(decidedId, "denied");
      assert.equal(again.status, 409);
      assert.deepEqual(again.body, {
        error: {
          code: "already_decided",
          message: `approval ${decidedId} is already approved`,
        },
      });
      const unknown = await h.decide("no-such-approval", "approved");
      assert.equal(unknown.status, 404);
      assert.deepEqual(unknown.body, {
        error: { code: "not_found", message: 'no approval with id "no-such-approval"' },
      });
    });

    await t.step("denied: the sandboxed result comes back, marked denied", async () => {
      const target = `${out}/refused`;
      const cmd = `id -u > ${target} && echo wrote`;
      const pending = h.exec(cmd);
      const approval = await h.nextApproval(pending);
      assert.equal(approval.reason, RETRY_REASON);
      const decided = await h.decide(approval.id, "denied");
      assert.deepEqual(decided.body, settled(approval, decided.body, "denied"));
      const r = await pending;
      const message = `/bin/bash: line 1: ${target}: Read-only file system`;
      assert.equal(r.body.output, `${message}\r\n`);
      assert.equal(r.body.exit_code, 1);
      assert.deepEqual(r.body.sandbox, {
        profile: "workspace-write",
        denied: true,
        denial: { kind: "fs-write", path: target, evidence: message },
        message: `denied by the user (approval ${approval.id})`,
      });
      await assert.rejects(Deno.stat(target), Deno.errors.NotFound);
      const events = await h.eventsUntilMarker();
      assert.deepEqual(kinds(events), [
        "begin",
        "end",
        "approval_requested",
        "approval_decided",
      ]);
    });

    await t.step("approved_for_session: the same command is retried without asking", async () => {
      const target = `${out}/session`;
      const cmd = `id -u > ${target}`;
      const pending = h.exec(cmd);
      const approval = await h.nextApproval(pending);
      await h.decide(approval.id, "approved_for_session");
      const first = await pending;
      const retried = { profile: "workspace-write", denied: false, retried: true };
      assert.deepEqual(first.body.sandbox, retried);
      assert.match(await Deno.readTextFile(target), SESSION_UID_FILE);
      await h.eventsUntilMarker();
      await Deno.remove(target);

      const second = await h.exec(cmd);
      assert.equal(second.body.exit_code, 0);
      assert.deepEqual(second.body.sandbox, retried);
      assert.match(await Deno.readTextFile(target), SESSION_UID_FILE);
      const events = await h.eventsUntilMarker();
      assert.deepEqual(kinds(events), ["begin", "end", "begin", "end"]);
      assert.equal(events[1].data.exit_code, 1);
      assert.equal(events[3].data.exit_code, 0);
      await Deno.remove(target);

      // The memory is per agent and everything that decides what runs: without a tty it asks
      // again, and so does a changed environment.
      const other = h.exec(cmd, { tty: false });
      const asked = await h.nextApproval(other);
      assert.equal(asked.command, cmd);
      await h.decide(asked.id, "denied");
      const refused = await other;
      assert.equal(refused.body.sandbox.denied, true);
      await assert.rejects(Deno.stat(target), Deno.errors.NotFound);
      const withEnv = h.exec(cmd, { env: { BASH_ENV: `${out}/planted` } });
      const askedAgain = await h.nextApproval(withEnv);
      assert.deepEqual(askedAgain.env, { BASH_ENV: `${out}/planted` });
      await h.decide(askedAgain.id, "denied");
      assert.equal((await withEnv).body.sandbox.denied, true);
      await assert.rejects(Deno.stat(target), Deno.errors.NotFound);
      await h.eventsUntilMarker();
    });
  }));

Deno.test("an approval nobody decides times out as denied", (t) =>
  withHarness({
    UEXEC_APPROVAL_POLICY: "on-failure",
    UEXEC_APPROVAL_TIMEOUT_MS: "300",
  }, async (h, out) => {
    await t.step("a retry question times out: the denial comes back", async () => {
      const target = `${out}/late`;
      const r = await h.exec(`echo x > ${target}`);
      assert.equal(r.status, 200);
      assert.equal(r.body.exit_code, 1);
      assert.equal(r.body.sandbox.denied, true);
      assert.equal(r.body.sandbox.denial.kind, "fs-write");
      assert.equal(r.body.sandbox.retried, undefined);
      await assert.rejects(Deno.stat(target), Deno.errors.NotFound);
      const events = await h.eventsUntilMarker();
      assert.deepEqual(kinds(events), [
        "begin",
        "end",
        "approval_requested",
        "approval_decided",
      ]);
      assert.equal(events[3].data.approval.status, "timed_out");
      assert.deepEqual((await h.server.get("/v1/approvals")).body, { approvals: [] });
      const late = await h.decide(events[3].data.approval.id, "approved");
      assert.equal(late.status, 409);
      await assert.rejects(Deno.stat(target), Deno.errors.NotFound);
    });

    await t.step("an escalation times out: 403 with the reason, nothing ran", async () => {
      const target = `${out}/escalated`;
      const r = await h.exec(`touch ${target}`, {
        sandbox_permissions: "require_escalated",
        justification: "write outside the workspace",
      });
      assert.equal(r.status, 403);
      assert.equal(r.body.error.code, "rejected");
      assert.match(
        r.body.error.message,
        new RegExp(
          `^approval ${
            UUID.source.slice(1, -1)
          } timed out after 300 ms without a decision; treated as denied$`,
        ),
      );
      await assert.rejects(Deno.stat(target), Deno.errors.NotFound);
      const events = await h.eventsUntilMarker();
      assert.deepEqual(kinds(events), ["approval_requested", "approval_decided"]);
      assert.equal(events[1].data.approval.status, "timed_out");
    });
  }));

Deno.test("on-request: require_escalated asks with the justification", (t) =>
  withHarness({ UEXEC_APPROVAL_POLICY: "on-request" }, async (h, out) => {
    await t.step("approved: runs without the sandbox, as root", async () => {
      const justification = "need to read root-only state for the diagnosis";
      const pending = h.exec("id -u", { sandbox_permissions: "require_escalated", justification });
      const approval = await h.nextApproval(pending);
      assert.deepEqual(approval, {
        ...pendingRecord(h, approval, "id -u", justification, {
          escalation: { unsandboxed: true },
          runs: "without any sandbox, with the server's own privileges",
        }),
        justification,
      });
      await h.decide(approval.id, "approved");
      const r = await pending;
      assert.equal(r.status, 200);
      assert.equal(r.body.output, "0\r\n");
      assert.equal(r.body.exit_code, 0);
      assert.deepEqual(r.body.sandbox, { profile: "full-access", denied: false });
      const events = await h.eventsUntilMarker();
      assert.deepEqual(kinds(events), [
        "approval_requested",
        "approval_decided",
        "begin",
        "end",
      ]);
    });

    await t.step("denied: 403 rejected, and the command never ran", async () => {
      const target = `${out}/escalated`;
      const pending = h.exec(`touch ${target}`, { sandbox_permissions: "require_escalated" });
      const approval = await h.nextApproval(pending);
      assert.equal(approval.reason, "the agent asks to run this command without the sandbox");
      assert.equal(approval.justification, null);
      await h.decide(approval.id, "denied");
      const r = await pending;
      assert.equal(r.status, 403);
      assert.deepEqual(r.body, {
        error: { code: "rejected", message: `denied by the user (approval ${approval.id})` },
      });
      await assert.rejects(Deno.stat(target), Deno.errors.NotFound);
      const events = await h.eventsUntilMarker();
      assert.deepEqual(kinds(events), ["approval_requested", "approval_decided"]);
    });

    await t.step("use_default: a denial goes back to the agent without asking", async () => {
      const target = `${out}/plain`;
      const r = await h.exec(`id -u; echo x > ${target}`);
      assert.equal(r.status, 200);
      assert.equal(
        uidLine(r.body.output),
        `UID\r\n/bin/bash: line 1: ${target}: Read-only file system\r\n`,
      );
      assert.equal(r.body.sandbox.denied, true);
      assert.equal(r.body.sandbox.retried, undefined);
      const events = await h.eventsUntilMarker();
      assert.deepEqual(kinds(events), ["begin", "end"]);
    });
  }));

Deno.test("never: no prompts, and escalation is rejected", (t) =>
  withHarness({ UEXEC_APPROVAL_POLICY: "never" }, async (h, out) => {
    await t.step("require_escalated is 403 rejected without asking", async () => {
      const target = `${out}/never`;
      const r = await h.exec(`touch ${target}`, {
        sandbox_permissions: "require_escalated",
        justification: "please",
      });
      assert.equal(r.status, 403);
      assert.deepEqual(r.body, {
        error: {
          code: "rejected",
          message:
            "approval policy is never: require_escalated cannot be approved; run the command with use_default",
        },
      });
      await assert.rejects(Deno.stat(target), Deno.errors.NotFound);
    });

    await t.step("a sandbox denial is returned without asking", async () => {
      const target = `${out}/never`;
      const r = await h.exec(`id -u; touch ${target}`);
      assert.equal(r.status, 200);
      assert.equal(
        uidLine(r.body.output),
        `UID\r\ntouch: cannot touch '${target}': Read-only file system\r\n`,
      );
      assert.equal(r.body.sandbox.denied, true);
      await assert.rejects(Deno.stat(target), Deno.errors.NotFound);
      assert.deepEqual((await h.server.get("/v1/approvals")).body, { approvals: [] });
      const events = await h.eventsUntilMarker();
      assert.deepEqual(kinds(events), ["begin", "end"]);
    });
  }));

Deno.test("untrusted: known-safe commands run, others ask", (t) =>
  withHarness({ UEXEC_APPROVAL_POLICY: "untrusted" }, async (h, out) => {
    const ws = h.server.workspace;
    await t.step("ls and id -u run sandboxed without asking", async () => {
      await Deno.writeTextFile(`${ws}/listed.txt`, "x");
      const ls = await h.exec("ls");
      assert.equal(ls.body.output, "listed.txt\r\n");
      const id = await h.exec("id -u");
      assert.equal(uidLine(id.body.output), "UID\r\n");
      const events = await h.eventsUntilMarker();
      assert.deepEqual(kinds(events), ["begin", "end", "begin", "end"]);
    });

    await t.step("a known-safe line with a variable or shell the agent chose asks", async () => {
      await Deno.writeTextFile(`${ws}/env.sh`, "touch planted.txt\n");
      const pending = h.exec("ls", { env: { BASH_ENV: `${ws}/env.sh` } });
      const approval = await h.nextApproval(pending);
      assert.equal(
        approval.reason,
        "untrusted policy: this command runs with a shell or environment variables the agent chose",
      );
      assert.deepEqual(approval.env, { BASH_ENV: `${ws}/env.sh` });
      await h.decide(approval.id, "denied");
      assert.equal((await pending).status, 403);
      await assert.rejects(Deno.stat(`${ws}/planted.txt`), Deno.errors.NotFound);
      await Deno.remove(`${ws}/env.sh`);
      const shell = h.exec("ls", { shell: "/bin/sh" });
      const asked = await h.nextApproval(shell);
      await h.decide(asked.id, "denied");
      assert.equal((await shell).status, 403);
      await h.eventsUntilMarker();
    });

    await t.step("a command not known to be safe asks, then runs sandboxed", async () => {
      const pending = h.exec("touch made.txt");
      const approval = await h.nextApproval(pending);
      assert.deepEqual(
        approval,
        pendingRecord(
          h,
          approval,
          "touch made.txt",
          "untrusted policy: this command is not known to be read-only",
        ),
      );
      await h.decide(approval.id, "approved");
      const r = await pending;
      assert.equal(r.body.exit_code, 0);
      assert.deepEqual(r.body.sandbox, { profile: "workspace-write", denied: false });
      assert.match(String((await Deno.stat(`${ws}/made.txt`)).uid), SESSION_UID);
    });

    await t.step("after a denial it asks again before running with more access", async () => {
      const target = `${out}/untrusted`;
      const cmd = `id -u > ${target}`;
      const pending = h.exec(cmd);
      const first = await h.nextApproval(pending);
      assert.equal(first.reason, "untrusted policy: this command is not known to be read-only");
      await h.decide(first.id, "approved");
      const second = await h.nextApproval(pending);
      assert.equal(second.reason, RETRY_REASON);
      assert.deepEqual(second.escalation, { write: [out] });
      assert.equal(second.exec_id, first.exec_id);
      await h.decide(second.id, "approved");
      const r = await pending;
      assert.deepEqual(r.body.sandbox, {
        profile: "workspace-write",
        denied: false,
        retried: true,
      });
      assert.match(await Deno.readTextFile(target), SESSION_UID_FILE);
      const events = await h.eventsUntilMarker();
      assert.deepEqual(kinds(events).filter((k) => k.startsWith("approval")), [
        "approval_requested",
        "approval_decided",
        "approval_requested",
        "approval_decided",
        "approval_requested",
        "approval_decided",
      ]);
    });
  }));
