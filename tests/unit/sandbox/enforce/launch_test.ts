/**
 * How a session's command is started (launch.ts): the exact executable, argv and environment
 * for each case where the gate and the limits are folded into dash itself or put in a wrapper,
 * and that the loader's variables never reach a wrapper.
 *
 * @module
 */

import assert from "node:assert/strict";
import { launch } from "../../../../src/sandbox/enforce/launch.ts";
import { DASH, GATE } from "../../../../src/sandbox/enforce/limits.ts";

const env = { PATH: "/usr/bin:/bin", TERM: "dumb" };
const plain = ["PATH=/usr/bin:/bin", "TERM=dumb"];
const limits = { maxProcesses: 64 };
const ULIMITS = "ulimit -c 0 && ulimit -p 64 || exit 126";

Deno.test("nothing to put first: the shell itself, the environment as given", () => {
  assert.deepEqual(
    launch({ shell: "/bin/bash", login: true, cmd: "ls" }, { ...env, LD_PRELOAD: "/x.so" }, {
      gate: false,
    }),
    { file: "/bin/bash", argv: ["/bin/bash", "-lc", "ls"], env: [...plain, "LD_PRELOAD=/x.so"] },
  );
});

Deno.test("dash, not a login shell: the gate and the limits are its own first commands", () => {
  assert.deepEqual(
    launch({ shell: "/bin/sh", login: false, cmd: "echo hi" }, env, {
      limits,
      gate: true,
      wrapper: "dash",
    }),
    {
      file: DASH,
      argv: ["/bin/sh", "-c", `${GATE}; ${ULIMITS}; echo hi`],
      env: plain,
    },
  );
  assert.deepEqual(
    launch({ shell: "/bin/sh", login: false, cmd: "echo hi" }, env, { gate: true }).argv,
    ["/bin/sh", "-c", `${GATE}; echo hi`],
  );
});

Deno.test("a link to dash runs the dash that was checked, under the name it was asked by", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.symlink(DASH, `${dir}/mysh`);
    const got = launch({ shell: `${dir}/mysh`, login: false, cmd: "x" }, env, { gate: true });
    assert.equal(got.file, DASH);
    assert.equal(got.argv[0], `${dir}/mysh`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a hard link to dash is dash; a copy of it is not the file that was checked", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.copyFile(DASH, `${dir}/copy`);
    await Deno.chmod(`${dir}/copy`, 0o755);
    const copy = launch({ shell: `${dir}/copy`, login: false, cmd: "x" }, env, { gate: true });
    // A wrapper dash runs first, then execs the copy.
    assert.equal(copy.argv[0], DASH);
    assert.deepEqual(copy.argv.slice(-3), [`${dir}/copy`, "-c", "x"]);
    try {
      await Deno.link(DASH, `${dir}/hard`);
    } catch (err) {
      if (err instanceof Deno.errors.NotSupported || /EXDEV|cross-device/i.test(String(err))) {
        return; // Another file system than dash's: no hard link can be made here.
      }
      throw err;
    }
    const hard = launch({ shell: `${dir}/hard`, login: false, cmd: "x" }, env, { gate: true });
    assert.equal(hard.file, DASH);
    assert.deepEqual(hard.argv, [`${dir}/hard`, "-c", `${GATE}; x`]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("bash, a login dash, a relative name or prlimit: a wrapper runs first", () => {
  for (
    const command of [
      { shell: "/bin/bash", login: false, cmd: "x" },
      { shell: "/bin/sh", login: true, cmd: "x" },
      { shell: "sh", login: false, cmd: "x" },
    ]
  ) {
    const argv = [command.shell, command.login ? "-lc" : "-c", "x"];
    assert.deepEqual(launch(command, env, { limits, gate: true, wrapper: "dash" }), {
      file: DASH,
      argv: [DASH, "-c", `${GATE}\n${ULIMITS}\nexec "$@"`, "uexec-limits", ...argv],
      env: plain,
    }, command.shell);
  }
  const prlimit = launch({ shell: "/bin/sh", login: false, cmd: "x" }, env, {
    limits,
    gate: false,
    wrapper: "prlimit",
  });
  assert.equal(prlimit.file, "/usr/bin/prlimit");
});

Deno.test("loader variables: taken from the wrapper's environment, exported after it", () => {
  const loader = { LD_PRELOAD: "/ws/evil.so", LD_LIBRARY_PATH: "/ws", GCONV_PATH: "/ws/g" };
  const exported = ["LD_PRELOAD=/ws/evil.so", "LD_LIBRARY_PATH=/ws", "GCONV_PATH=/ws/g"];
  // Even dash's own script: the loader acts when dash starts, before its first command.
  const command = { shell: "/bin/sh", login: false, cmd: "x" };
  const loop = 'while [ "$1" != -- ]; do export "$1"; shift; done; shift';
  assert.deepEqual(
    launch(command, { ...env, ...loader }, { limits, gate: true, wrapper: "dash" }),
    {
      file: DASH,
      argv: [
        DASH,
        "-c",
        `${GATE}\n${ULIMITS}\n${loop}\nexec "$@"`,
        "uexec-limits",
        ...exported,
        "--",
        "/bin/sh",
        "-c",
        "x",
      ],
      env: plain,
    },
  );
  assert.deepEqual(launch(command, { ...env, ...loader }, { gate: true }).argv, [
    DASH,
    "-c",
    `${GATE}\n${loop}\nexec "$@"`,
    "uexec-gate",
    ...exported,
    "--",
    "/bin/sh",
    "-c",
    "x",
  ]);
  // prlimit cannot export: env(1) sets them after it.
  assert.deepEqual(
    launch(command, { ...env, ...loader }, { limits, gate: false, wrapper: "prlimit" }),
    {
      file: "/usr/bin/prlimit",
      argv: [
        "/usr/bin/prlimit",
        "--core=0:0",
        "--nproc=64:64",
        "--",
        "/usr/bin/env",
        ...exported,
        "/bin/sh",
        "-c",
        "x",
      ],
      env: plain,
    },
  );
  // Names the loader does not read stay where they were.
  assert.deepEqual(
    launch(command, { ...env, LDX: "1", MY_LD_PRELOAD: "2" }, { gate: true }).env,
    [...plain, "LDX=1", "MY_LD_PRELOAD=2"],
  );
});

Deno.test("a wrapper really exports the loader's variables to the command, not to itself", async () => {
  const got = launch(
    { shell: "/bin/bash", login: false, cmd: 'echo "$LD_DEBUG|$LD_DEBUG_OUTPUT"' },
    { ...env, LD_DEBUG: "files", LD_DEBUG_OUTPUT: "/dev/null" },
    { limits, gate: false, wrapper: "dash" },
  );
  const out = await new Deno.Command(got.file, {
    args: got.argv.slice(1),
    clearEnv: true,
    env: Object.fromEntries(got.env.map((a) => a.split("=", 2) as [string, string])),
  }).output();
  assert.equal(new TextDecoder().decode(out.stdout), "files|/dev/null\n");
  assert.equal(out.code, 0);
});
