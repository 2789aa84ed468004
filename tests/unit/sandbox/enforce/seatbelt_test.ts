/**
 * Seatbelt output pinned by golden files in tests/golden/seatbelt/. Regenerate them with
 * `UPDATE_GOLDEN=1 deno test --allow-all tests/unit/sandbox/enforce/seatbelt_test.ts` and review the diff.
 *
 * @module
 */
import assert from "node:assert/strict";
import type { ResolvedPolicy } from "../../../../src/sandbox/policy/policy.ts";
import { loadProfiles, resolveProfile } from "../../../../src/sandbox/policy/profiles.ts";
import {
  darwinRealPath,
  SANDBOX_EXEC,
  seatbeltCommand,
  seatbeltProfile,
} from "../../../../src/sandbox/enforce/seatbelt.ts";

const GOLDEN_DIR = new URL("../../../golden/seatbelt/", import.meta.url);
const UPDATE = Deno.env.get("UPDATE_GOLDEN") === "1";
const ARGV = ["/bin/bash", "-lc", "echo hi"];
const CTX = {
  workdir: "/Users/agent/project",
  tmp: "/tmp/uexec-s1",
  home: "/Users/agent",
  serverPid: 4242,
  childIsRoot: false,
};

function golden(name: string, actual: string): void {
  const url = new URL(name, GOLDEN_DIR);
  if (UPDATE) Deno.writeTextFileSync(url, actual);
  assert.equal(actual, Deno.readTextFileSync(url), `golden ${name} (UPDATE_GOLDEN=1 rewrites)`);
}

/** The argv with the policy text swapped for the name of its golden file. */
function argvGolden(argv: string[], sbplFile: string): string {
  const shown = argv[0] === SANDBOX_EXEC ? argv.with(2, `<${sbplFile}>`) : argv;
  return `${JSON.stringify(shown, null, 2)}\n`;
}

function checkGolden(name: string, policy: ResolvedPolicy): void {
  const argv = seatbeltCommand(policy, ARGV);
  if (policy.enforce) golden(`${name}.sbpl`, argv[2]);
  golden(`${name}.argv.json`, argvGolden(argv, `${name}.sbpl`));
}

const shipped = loadProfiles(new URL("../../../../sandbox-profiles", import.meta.url).pathname);
const workspaceWrite = resolveProfile(shipped.get("workspace-write")!, CTX);

for (const [name, profile] of shipped) {
  if (profile.egress) continue;
  Deno.test(`golden: shipped profile ${name}`, () => {
    checkGolden(name, resolveProfile(profile, CTX));
  });
}

Deno.test("an egress profile has no Seatbelt form: refused, never run as plain loopback", () => {
  const egress = resolveProfile(shipped.get("workspace-write-egress")!, CTX);
  assert.throws(() => seatbeltCommand(egress, ARGV), {
    name: "SandboxUnavailableError",
    message: "egress through uexec's proxy needs a Linux network namespace; Seatbelt cannot " +
      "enforce it",
  });
});

Deno.test("golden: loopback with listed ports", () => {
  checkGolden("loopback-ports", { ...workspaceWrite, network: "loopback", tcpPorts: [5432, 8080] });
});

Deno.test("golden: all networks with listed ports", () => {
  checkGolden("all-ports", { ...workspaceWrite, network: "all", tcpPorts: [443] });
});

Deno.test("golden: restricted read roots, root-owned child", () => {
  checkGolden("restricted-read", {
    ...workspaceWrite,
    readableRoots: ["/usr", "/bin", "/Users/agent/project"],
    denyRead: ["/Users/agent/project/secrets", "/etc/shadow"],
  });
});

Deno.test("full-access runs the argv unsandboxed", () => {
  const policy = resolveProfile(shipped.get("full-access")!, CTX);
  assert.deepEqual(seatbeltCommand(policy, ARGV), ARGV);
});

Deno.test("argv shape: launcher, policy, -D params, --, command", () => {
  const argv = seatbeltCommand(workspaceWrite, ARGV);
  const { text, params } = seatbeltProfile(workspaceWrite);
  assert.deepEqual(argv, [
    SANDBOX_EXEC,
    "-p",
    text,
    ...[...params].map(([k, v]) => `-D${k}=${v}`),
    "--",
    ...ARGV,
  ]);
  assert.equal(params.get("WRITABLE_ROOT_0"), "/Users/agent/project");
  assert.equal(params.get("WRITABLE_ROOT_1"), "/private/tmp/uexec-s1");
  assert.equal(params.get("READ_ONLY_0"), "/Users/agent/project/.git");
  assert.equal(params.get("DENY_READ_0"), "/Users/agent/.ssh");
});

Deno.test("paths never appear in the policy text, even hostile ones", () => {
  const hostile = '/Users/agent/we"ird) (allow default';
  const policy = { ...workspaceWrite, writableRoots: [hostile], readOnlySubpaths: [] };
  const { text, params } = seatbeltProfile(policy);
  assert.ok(!text.includes("/Users"), text);
  assert.ok(!text.includes("weird"));
  assert.equal(params.get("WRITABLE_ROOT_0"), hostile);
  assert.ok(!text.includes("(allow default"));
});

Deno.test("enforced policies always start with deny default", () => {
  for (const profile of shipped.values()) {
    const policy = resolveProfile(profile, CTX);
    if (!policy.enforce) continue;
    assert.match(seatbeltProfile(policy).text, /^\(version 1\)\n\(deny default\)\n/);
  }
});

Deno.test("network none has no network allow rule", () => {
  assert.doesNotMatch(seatbeltProfile(workspaceWrite).text, /network-|system-socket/);
});

Deno.test("invalid input is refused", () => {
  assert.throws(() => seatbeltCommand(workspaceWrite, []), /empty argv/);
  assert.throws(
    () => seatbeltProfile({ ...workspaceWrite, network: "all", tcpPorts: [0] }),
    /invalid TCP port/,
  );
});

Deno.test("darwinRealPath maps the /private symlinks only", () => {
  assert.equal(darwinRealPath("/tmp"), "/private/tmp");
  assert.equal(darwinRealPath("/var/folders/x"), "/private/var/folders/x");
  assert.equal(darwinRealPath("/etc/shadow"), "/private/etc/shadow");
  assert.equal(darwinRealPath("/tmpfoo"), "/tmpfoo");
  assert.equal(darwinRealPath("/Users/a"), "/Users/a");
});
