/**
 * The `.git` guard on a shared host: it acts only on what this server's own sandbox did, and
 * nothing a sandboxed command writes makes the operator's git run code as root. Real root
 * servers side by side, real sandboxed children, the host's real git run as root by the test
 * with a clean environment (as the operator would run it).
 *
 * The guard reads the kernel's queue whenever it wakes and before every command starts; each
 * check below first runs a command on every server, so every event before it was judged.
 *
 * Each test works on a tmpfs of its own (see privateFs).
 *
 * @module
 */

import assert from "node:assert/strict";
import { exists, privateFs } from "../helpers/fs.ts";
import { startServer, type TestServer } from "../helpers/server.ts";
import { findHostGit } from "../../src/sandbox/identity/host_git.ts";

// deno-lint-ignore no-explicit-any
type Body = any;

async function run(server: TestServer, cmd: string): Promise<Body> {
  const r = await server.post("/v1/exec_command", { cmd, login: false, tty: false });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body;
}

/** What `dir` holds, sorted (moved-aside entries show as `.git.untrusted-*`). */
function names(dir: string): string[] {
  return [...Deno.readDirSync(dir)].map((e) => e.name).sort();
}

/** Runs the host's git as root in `cwd` with a clean environment and an empty HOME. */
async function operatorGit(cwd: string, home: string, args: string[]): Promise<void> {
  await new Deno.Command("/usr/bin/git", {
    args,
    cwd,
    clearEnv: true,
    env: { HOME: home, PATH: "/usr/bin:/bin" },
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).output();
}

Deno.test("two servers side by side touch nothing the operator or the other one made", async () => {
  const fs = await privateFs();
  const [wsA, wsB, outside] = ["a", "b", "outside"].map((name) => `${fs.path}/${name}`);
  for (const dir of [wsA, wsB, outside]) await Deno.mkdir(dir);
  const a = await startServer({ UEXEC_WORKSPACE: wsA });
  const b = await startServer({ UEXEC_WORKSPACE: wsB });
  const stale = "gitdir: /nonexistent/uexec-test/.git/worktrees/gone\n";
  try {
    // Each server walks its workspace at its first command; from then on it watches.
    await Promise.all([run(a, "true"), run(b, "true")]);
    for (const dir of [outside, wsA, wsB]) {
      await Deno.mkdir(`${dir}/linked`);
      await Deno.writeTextFile(`${dir}/linked/.git`, stale);
    }
    // Each sandbox makes a repository-looking thing of its own in its own workspace.
    await Promise.all([
      run(a, "mkdir mine && echo 'gitdir: /nowhere' > mine/.git"),
      run(b, "mkdir mine && echo 'gitdir: /nowhere' > mine/.git"),
    ]);
    await Promise.all([run(a, "true"), run(b, "true")]);
    for (const dir of [outside, wsA, wsB]) {
      assert.deepEqual(names(`${dir}/linked`), [".git"], dir);
      assert.equal(await Deno.readTextFile(`${dir}/linked/.git`), stale);
    }
    // What a sandbox made is its own: git refuses it as root; no other server moved it.
    for (const dir of [wsA, wsB]) assert.deepEqual(names(`${dir}/mine`), [".git"], dir);
  } finally {
    await Promise.all([a.stop(), b.stop()]);
    await fs.close();
  }
});

/** A bare repository's shape whose fsmonitor hook writes `marker`, written by a sandbox. */
function plant(dir: string, marker: string): string {
  return [
    `cd ${dir}`,
    "mkdir -p objects refs/heads",
    "echo 'ref: refs/heads/main' > HEAD",
    `printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\\tworktree = .\\n\\tfsmonitor = "touch ${marker}"\\n' > config`,
    "echo planted",
  ].join(" && ");
}

Deno.test("a bare-repository plant never runs as the operator's git", async (t) => {
  const fs = await privateFs();
  const ws = `${fs.path}/ws`;
  const [home, markers] = [`${fs.path}/home`, `${fs.path}/markers`];
  for (const dir of [ws, home, markers]) await Deno.mkdir(dir);
  await Deno.chmod(markers, 0o777);
  const server = await startServer({ UEXEC_WORKSPACE: ws });
  try {
    await run(server, "true");
    // The operator's directories, made after the workspace was granted: the sandbox may write
    // files in them (the grant's default ACL), so a plant is possible.
    await Deno.mkdir(`${ws}/plain`);
    await Deno.mkdir(`${ws}/repo/sub`, { recursive: true });
    await operatorGit(`${ws}/repo`, home, ["init", "-q"]);
    for (const [name, dir] of [["plain", "plain"], ["in-repo", "repo/sub"]]) {
      await t.step(`${name}: git status and git diff there run nothing planted`, async () => {
        const marker = `${markers}/${name}`;
        const r = await run(server, plant(dir, marker));
        assert.equal(r.output, "planted\n");
        await run(server, "true");
        for (const args of [["status"], ["diff"]]) {
          await operatorGit(`${ws}/${dir}`, home, args);
          assert.equal(exists(marker), false, `git ${args[0]} ran the plant`);
        }
        // The plant's files stay where the sandbox put them (its own); only its HEAD went aside.
        assert.deepEqual(
          names(`${ws}/${dir}`).filter((n) => !n.startsWith("HEAD.untrusted-")),
          ["config", "objects", "refs"],
        );
      });
    }
    await t.step("assembled from the operator's own files and directories, too", async () => {
      // Root owns every part (made after the grant, so the sandbox may write and move them):
      // git's ownership check would pass, and no part is the sandbox's to judge by.
      const dir = `${ws}/assembled`;
      for (const sub of ["", "/a", "/b"]) await Deno.mkdir(`${dir}${sub}`);
      for (const file of ["h", "c"]) await Deno.writeTextFile(`${dir}/${file}`, "");
      const marker = `${markers}/assembled`;
      const r = await run(
        server,
        `cd assembled && echo 'ref: refs/heads/main' > h && ` +
          `printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n` +
          `\\tworktree = .\\n\\tfsmonitor = "touch ${marker}"\\n' > c && ` +
          "mv a objects && mv b refs && mv c config && mv h HEAD && echo planted",
      );
      assert.equal(r.output, "planted\n");
      await run(server, "true");
      for (const args of [["status"], ["diff"]]) {
        await operatorGit(dir, home, args);
        assert.equal(exists(marker), false, `git ${args[0]} ran the plant`);
      }
    });
  } finally {
    await server.stop();
    await fs.close();
  }
});

Deno.test("the operator's nested .git renamed by a sandboxed command is put back", async () => {
  const fs = await privateFs();
  const ws = `${fs.path}/ws`;
  const home = `${fs.path}/home`;
  for (const dir of [ws, home]) await Deno.mkdir(dir);
  const server = await startServer({ UEXEC_WORKSPACE: ws });
  try {
    await run(server, "true");
    for (const repo of ["repo", "own"]) {
      await Deno.mkdir(`${ws}/${repo}`);
      await operatorGit(`${ws}/${repo}`, home, ["init", "-q"]);
    }
    await run(server, "true");
    const r = await run(server, "mv repo/.git repo/gone && echo moved");
    assert.equal(r.output, "moved\n");
    // Control: the operator's own rename stays.
    await Deno.rename(`${ws}/own/.git`, `${ws}/own/.git-old`);
    await run(server, "true");
    assert.deepEqual(names(`${ws}/repo`), [".git"]);
    assert.deepEqual(names(`${ws}/own`), [".git-old"]);
    const status = await new Deno.Command("/usr/bin/git", {
      args: ["rev-parse", "--absolute-git-dir"],
      cwd: `${ws}/repo`,
      clearEnv: true,
      env: { HOME: home, PATH: "/usr/bin:/bin" },
    }).output();
    assert.equal(new TextDecoder().decode(status.stdout), `${ws}/repo/.git\n`);
  } finally {
    await server.stop();
    await fs.close();
  }
});

Deno.test("the server's own git runs come from a path no other user can write", async () => {
  const fs = await privateFs();
  // A PATH directory any local user could plant a `git` in, first (as npx puts a checkout's
  // node_modules/.bin first, under a world-writable directory).
  const planted = `${fs.path}/bin`;
  const marker = `${fs.path}/ran`;
  await Deno.mkdir(planted);
  await Deno.chmod(fs.path, 0o1777);
  await Deno.chmod(planted, 0o777);
  await Deno.writeTextFile(`${planted}/git`, `#!/bin/sh\necho "$@" >> ${marker}\n`);
  await Deno.chmod(`${planted}/git`, 0o755);
  assert.equal(findHostGit(`${planted}:/usr/bin:/bin`, 0), Deno.realPathSync("/usr/bin/git"));
  assert.equal(findHostGit(`${planted}`, 0), Deno.realPathSync("/usr/bin/git"));
  const server = await startServer({ PATH: `${planted}:/usr/bin:/bin` });
  try {
    await run(server, "true");
  } finally {
    const { stderr } = await server.stop();
    await Deno.chmod(fs.path, 0o755);
    const ran = exists(marker);
    await fs.close();
    assert.equal(ran, false, "the server ran the planted git");
    // It found the real one, and asked it about bare repositories.
    assert.match(stderr, /safe\.bareRepository/);
  }
});
