/**
 * The argv wrappers that apply resource limits: exact dash script and prlimit options, and a
 * fail-closed error when no wrapper exists.
 *
 * @module
 */

import assert from "node:assert/strict";
import { SandboxUnavailableError } from "../../../../src/sandbox/errors.ts";
import { DASH, dashScript, PRLIMIT, withLimits } from "../../../../src/sandbox/enforce/limits.ts";

const limits = {
  maxProcesses: 1024,
  maxFileSizeBytes: 1_073_741_824,
  cpuSeconds: 3600,
  addressSpaceBytes: 137_438_953_472,
};

Deno.test("dash: one ulimit per limit, sizes in dash's units, then exec the command", () => {
  assert.equal(
    dashScript(limits),
    "ulimit -c 0 && ulimit -p 1024 && ulimit -f 2097152 && ulimit -t 3600 && ulimit -v 134217728" +
      ' || exit 126\nexec "$@"',
  );
  assert.deepEqual(withLimits(["/bin/bash", "-c", "x"], { cpuSeconds: 5 }, "dash"), [
    DASH,
    "-c",
    'ulimit -c 0 && ulimit -t 5 || exit 126\nexec "$@"',
    "uexec-limits",
    "/bin/bash",
    "-c",
    "x",
  ]);
});

Deno.test("prlimit: soft = hard for every limit, core dumps off", () => {
  assert.deepEqual(withLimits(["/bin/sh"], limits, "prlimit"), [
    PRLIMIT,
    "--core=0:0",
    "--nproc=1024:1024",
    "--fsize=1073741824:1073741824",
    "--cpu=3600:3600",
    "--as=137438953472:137438953472",
    "--",
    "/bin/sh",
  ]);
});

Deno.test("no wrapper, a bad limit or an empty argv: refused, nothing runs", () => {
  assert.throws(() => withLimits(["/bin/sh"], limits, null), SandboxUnavailableError);
  assert.throws(() => withLimits(["/bin/sh"], { cpuSeconds: -1 }, "dash"), RangeError);
  assert.throws(() => withLimits([], limits, "dash"), RangeError);
});

Deno.test("the dash wrapper really limits, and a limit it cannot set stops the command", async () => {
  const run = async (argv: string[]) => {
    const out = await new Deno.Command(argv[0], { args: argv.slice(1) }).output();
    const text = new TextDecoder();
    return { code: out.code, stdout: text.decode(out.stdout), stderr: text.decode(out.stderr) };
  };
  const shown = await run(withLimits(["/bin/sh", "-c", "ulimit -p; ulimit -t; ulimit -c"], {
    maxProcesses: 77,
    cpuSeconds: 9,
  }, "dash"));
  assert.deepEqual(shown, { code: 0, stdout: "77\n9\n0\n", stderr: "" });
  const refused = await run([
    "/usr/sbin/runuser",
    "-u",
    "nobody",
    "--",
    ...withLimits(["/bin/echo", "ran"], { maxProcesses: 1e9 }, "dash"),
  ]);
  assert.equal(refused.code, 126);
  assert.equal(refused.stdout, "");
});
