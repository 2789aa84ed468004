/**
 * The command line (`src/cli.ts`): flags parsed by `node:util`'s `parseArgs`; `--help` and
 * `--version` answer and exit 0; an unknown flag, a flag without its value or a stray argument is
 * a clear error and exit 2, through the real `deno task serve`.
 *
 * @module
 */

import assert from "node:assert/strict";
import { parseCommandLine, UsageError } from "../../src/cli.ts";
import { VERSION } from "../../src/version.ts";

const root = new URL("../../", import.meta.url).pathname;

async function serve(...args: string[]) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["task", "--quiet", "--config", `${root}deno.json`, "serve", ...args],
    cwd: root,
    // A workspace the server would refuse: nothing here may get as far as reading it.
    env: { UEXEC_WORKSPACE: "/nonexistent/uexec-cli" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);
  return { code: out.code, stdout: text(out.stdout), stderr: text(out.stderr) };
}

Deno.test("parseCommandLine: flags, both spellings of a value, help and version", () => {
  assert.deepEqual(parseCommandLine([]), {
    kind: "run",
    flags: { host: undefined, port: undefined },
  });
  assert.deepEqual(parseCommandLine(["--host", "::1", "--port=0"]), {
    kind: "run",
    flags: { host: "::1", port: "0" },
  });
  assert.deepEqual(parseCommandLine(["--port", "0", "-h"]), { kind: "help" });
  assert.deepEqual(parseCommandLine(["--version"]), { kind: "version" });
});

Deno.test("parseCommandLine: what it does not know is a UsageError naming it", () => {
  for (
    const [args, names] of [
      [["--bogus"], "--bogus"],
      [["--port"], "--port"],
      [["serve"], "serve"],
      [["--help=yes"], "--help"],
      [["--token", "x"], "--token"],
    ] as const
  ) {
    assert.throws(() => parseCommandLine(args), (err: Error) => {
      assert.ok(err instanceof UsageError, String(err));
      assert.ok(err.message.includes(names), err.message);
      assert.ok(err.message.includes("known flags: --host, --port, --help, --version"));
      return true;
    });
  }
});

Deno.test("deno task serve --version prints the version and exits 0", async () => {
  const { code, stdout } = await serve("--version");
  assert.equal(code, 0);
  assert.equal(stdout, `uexec ${VERSION}\n`);
});

Deno.test("deno task serve with an unknown flag or a missing value says so and exits 2", async () => {
  for (const [args, said] of [[["--bogus"], "'--bogus'"], [["--port"], "--port"]] as const) {
    const { code, stdout, stderr } = await serve(...args);
    assert.equal(code, 2, stderr);
    assert.equal(stdout, "");
    assert.match(stderr, /^uexec: /);
    assert.ok(stderr.includes(said), stderr);
  }
});
