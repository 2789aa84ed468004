/**
 * A denied read under `on-failure` (issue 29, point 7): the retry proposed is the narrowest
 * widening that names what was denied, the deny-read entry that hid it, lifted for that run
 * alone, not an unsandboxed run of agent-written code; what else the profile hides stays hidden,
 * and the server's own hidden paths are never proposed. Real servers as root.
 *
 * @module
 */

import assert from "node:assert/strict";
import { widening } from "../../src/service/supervisor.ts";
import { connectSse } from "../helpers/sse.ts";
import { startServer } from "../helpers/server.ts";

Deno.test("widening: a denied read asks for the deny-read entry that hid it, the deepest", () => {
  const context = {
    command: "cat x",
    workdir: "/w",
    denyRead: ["/root", "/root/.ssh", "/etc/shadow"],
  };
  const denial = (path: string) => ({ kind: "fs-read" as const, path, evidence: "denied" });
  assert.deepEqual(widening(denial("/root/.ssh/id_rsa"), context), { read: ["/root/.ssh"] });
  assert.deepEqual(widening(denial("/root/notes"), context), { read: ["/root"] });
  assert.deepEqual(widening(denial("/etc/shadow"), context), { read: ["/etc/shadow"] });
  // Hidden by nothing the policy names: nothing narrower fits.
  assert.deepEqual(widening(denial("/srv/x"), context), { unsandboxed: true });
});

Deno.test("on-failure: a denied read proposes lifting what hid it, for that run alone", async () => {
  const secret = await Deno.makeTempDir({ prefix: "uexec-hidden-" });
  const other = await Deno.makeTempDir({ prefix: "uexec-hidden-other-" });
  const profiles = await Deno.makeTempDir({ prefix: "uexec-profiles-" });
  for (const dir of [secret, other]) await Deno.chmod(dir, 0o755);
  await Deno.writeTextFile(`${secret}/token`, "s3cret\n", { mode: 0o644 });
  await Deno.writeTextFile(`${other}/x`, "other\n", { mode: 0o644 });
  const shipped = new URL("../../sandbox-profiles/", import.meta.url).pathname;
  for await (const entry of Deno.readDir(shipped)) {
    const profile = JSON.parse(await Deno.readTextFile(shipped + entry.name));
    if (profile.enforce) profile.deny_read.push(secret, other);
    await Deno.writeTextFile(`${profiles}/${entry.name}`, JSON.stringify(profile));
  }
  const server = await startServer({
    UEXEC_APPROVAL_POLICY: "on-failure",
    UEXEC_PROFILES_DIR: profiles,
  });
  const events = await connectSse(`${server.url}/v1/events`, server.operator.auth);
  try {
    const cmd = `cat ${secret}/token; cat ${other}/x`;
    const pending = server.post("/v1/exec_command", { cmd, login: false });
    const all = await events.until((evs) => evs.some((e) => e.event === "approval_requested"));
    const approval = all.find((e) => e.event === "approval_requested")!.data.approval;
    assert.equal(approval.denial.kind, "fs-read");
    assert.equal(approval.denial.path, `${secret}/token`);
    assert.deepEqual(approval.escalation, { read: [secret] });
    assert.equal(
      approval.runs,
      `sandboxed under workspace-write, plus read access to ${secret} (which the profile hides)`,
    );
    await server.operator.post(`/v1/approvals/${approval.id}`, { decision: "approved" });
    const r = await pending;
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.sandbox.retried, true);
    // The lifted entry only: the other hidden directory stays hidden in the retry.
    assert.match(r.body.output, new RegExp(`^s3cret\\r\\ncat: ${other}/x: Permission denied`));

    // The server's state directory is never proposed to be read: only no sandbox would do.
    const state = await Deno.realPath(server.stateDir);
    const again = server.post("/v1/exec_command", { cmd: `ls ${state}`, login: false });
    const later = await events.until((evs) =>
      evs.filter((e) => e.event === "approval_requested").length >= 2
    );
    const second = later.filter((e) => e.event === "approval_requested")[1].data.approval;
    assert.deepEqual(second.escalation, { unsandboxed: true }, JSON.stringify(second));
    await server.operator.post(`/v1/approvals/${second.id}`, { decision: "denied" });
    assert.equal((await again).status, 200);
  } finally {
    await events.close();
    await server.stop();
    for (const dir of [secret, other, profiles]) await Deno.remove(dir, { recursive: true });
  }
});
