/**
 * Git in sandboxed sessions: a repository the operator made can be cloned by path (git's local
 * transport drops the environment's configuration, so only the private HOME's `.gitconfig`
 * keeps git's ownership check from refusing it), and a commit carries the operator's identity
 * as the server's own git reports it, quoted as git's configuration syntax needs.
 *
 * @module
 */

import assert from "node:assert/strict";
import { gitConfigText } from "../../src/sandbox/identity/git_config.ts";
import { startServer } from "../helpers/server.ts";

Deno.test("a session's .gitconfig: git's ownership check off, the operator's identity quoted", () => {
  assert.equal(
    gitConfigText({ name: 'Ada "A" Lovelace\\', email: "ada@example.com" }),
    "# Written by uexec for this session; yours to change. Every session runs as its own user,\n" +
      "# so repositories others made would look foreign to git without the next line.\n" +
      "[safe]\n\tdirectory = *\n" +
      '[user]\n\tname = "Ada \\"A\\" Lovelace\\\\"\n\temail = "ada@example.com"\n',
  );
  assert.equal(
    gitConfigText({ name: "two\nlines", email: "e@x" }),
    gitConfigText({ email: "e@x" }),
    "a value with a control character is left out",
  );
  assert.doesNotMatch(gitConfigText({}), /\[user\]/);
});

Deno.test("sandboxed git clones the operator's repository by path and commits under the operator's name", async () => {
  const global = await Deno.makeTempFile({ prefix: "uexec-gitconfig-" });
  await Deno.writeTextFile(
    global,
    '[user]\n\tname = Op \\"Q\\" Erator\n\temail = op@example.com\n',
  );
  // The server's git reads its identity here (a child never sees this variable).
  const server = await startServer({ GIT_CONFIG_GLOBAL: global });
  try {
    const ws = await Deno.realPath(server.workspace);
    const git = (...args: string[]) => {
      const out = new Deno.Command("git", {
        args: ["-c", "user.name=Root", "-c", "user.email=root@example.com", ...args],
        cwd: `${ws}/origin`,
      }).outputSync();
      assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
    };
    await Deno.mkdir(`${ws}/origin`);
    await Deno.writeTextFile(`${ws}/origin/a`, "a\n");
    git("init", "-q");
    git("add", "a");
    git("commit", "-qm", "a");
    const r = await server.post("/v1/exec_command", {
      cmd: "git clone -q origin copy && cd copy && echo b > b && git add b && " +
        "git commit -qm b && git log --format='%an <%ae>' && env | grep -c GIT_CONFIG_GLOBAL",
      login: false,
    });
    assert.equal(
      r.body.output,
      'Op "Q" Erator <op@example.com>\r\nRoot <root@example.com>\r\n0\r\n',
    );
  } finally {
    await server.stop();
    await Deno.remove(global);
  }
});
