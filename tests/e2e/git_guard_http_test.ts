/**
 * `.git` stays out of the sandbox's reach wherever it is and whenever it appeared, end to end:
 * a real root server, real sandboxed children as uid 65534, real repositories made by the test
 * (the operator, root) before the server starts, between commands and while a session runs.
 *
 * Every refusal has a control that the same child can write next to it, and the workspace grant
 * would let it through (a default ACL entry for 65534 on every directory made after the first
 * command), so none of these could pass with the guard off.
 *
 * @module
 */

import assert from "node:assert/strict";
import { privateFs, sandboxAclEntries, watchAttributes } from "../helpers/fs.ts";
import { startServer, type TestServer } from "../helpers/server.ts";
import { TAG } from "../../src/sandbox/fs/acl.ts";
import { withoutSandbox } from "../../src/sandbox/git_guard/protected.ts";

// deno-lint-ignore no-explicit-any
type Body = any;

async function run(server: TestServer, cmd: string, extra: Record<string, unknown> = {}) {
  const r = await server.post("/v1/exec_command", { cmd, login: false, ...extra });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body as Body;
}

const denied = (path: string) => `/bin/bash: line 1: ${path}: Permission denied`;

/** Starts a session that runs `setup`, then each line written to it; resolves to its id. */
async function lineRunner(server: TestServer, setup = ""): Promise<number> {
  const session = await run(
    server,
    `${setup}echo ready; while read -r line; do eval "$line"; done`,
    { tty: false, until: "ready\\n", yield_time_ms: 10000 },
  );
  assert.equal(session.output, "ready\n");
  return session.session_id;
}

/** Has the session `id` (a {@link lineRunner}) write `text` to its descriptor 3. */
async function writeToFd3(server: TestServer, id: number, text: string): Promise<void> {
  const r = await server.post("/v1/write_stdin", {
    session_id: id,
    chars: `echo '${text}' >&3; echo written\n`,
    until: "written\\n",
    yield_time_ms: 10000,
  });
  assert.equal(r.body.output, "written\n");
}

/** Makes `path` (and parents) as the test, root: what an operator's `git init` leaves. */
async function operatorRepo(path: string): Promise<void> {
  await Deno.mkdir(`${path}/.git/hooks`, { recursive: true });
  await Deno.writeTextFile(`${path}/.git/config`, "[core]\n");
}

/** How long the guard may take to react before the test gives up (a failure, not a measure). */
const GUARD_DEADLINE_MS = 20_000;

/**
 * Resolves on the first attribute change of `path` (the guard stripping its ACL); rejects when
 * none came within {@link GUARD_DEADLINE_MS}.
 */
function attributeChange(dir: string, path: string): { changed: Promise<void>; close(): void } {
  const watcher = Deno.watchFs(dir, { recursive: false });
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`nothing changed ${path}`)), GUARD_DEADLINE_MS);
  });
  const seen = (async () => {
    for await (const event of watcher) {
      if (event.kind === "modify" && event.paths.includes(path)) return;
    }
  })();
  return {
    changed: Promise.race([seen, deadline]),
    close: () => {
      clearTimeout(timer);
      watcher.close();
    },
  };
}

Deno.test("withoutSandbox drops the sandbox's entries and never widens anyone else", () => {
  const owners = { isUid: (id: number) => id === 65534, isGid: (id: number) => id === 65534 };
  const U = 0xffffffff;
  const granted = [
    { tag: TAG.USER_OBJ, perm: 7, id: U },
    { tag: TAG.USER, perm: 7, id: 65534 },
    { tag: TAG.GROUP_OBJ, perm: 7, id: U },
    { tag: TAG.MASK, perm: 5, id: U },
    { tag: TAG.OTHER, perm: 5, id: U },
  ];
  // The owning group kept only what the mask let it have (r-x), not its rwx.
  assert.deepEqual(withoutSandbox(granted, owners), [
    { tag: TAG.USER_OBJ, perm: 7, id: U },
    { tag: TAG.GROUP_OBJ, perm: 5, id: U },
    { tag: TAG.OTHER, perm: 5, id: U },
  ]);
  const shared = [...granted, { tag: TAG.USER, perm: 6, id: 1000 }, {
    tag: TAG.GROUP,
    perm: 7,
    id: 65534,
  }];
  assert.deepEqual(withoutSandbox(shared, owners), [
    { tag: TAG.USER_OBJ, perm: 7, id: U },
    { tag: TAG.GROUP_OBJ, perm: 7, id: U },
    { tag: TAG.MASK, perm: 5, id: U },
    { tag: TAG.OTHER, perm: 5, id: U },
    { tag: TAG.USER, perm: 6, id: 1000 },
  ]);
  assert.equal(withoutSandbox([granted[0], granted[2], granted[4]], owners), null);
});

Deno.test(".git is read-only for the sandbox at any depth and whenever it appeared", async (t) => {
  // A file system of its own, see privateFs.
  const fs = await privateFs();
  const workspace = `${fs.path}/ws`;
  await Deno.mkdir(workspace);
  // Before the server starts: a nested repository, and one holding a hook a sandboxed command
  // wrote before this guard existed (owned by the sandbox uid, executable).
  await operatorRepo(`${workspace}/nested/sub`);
  await operatorRepo(`${workspace}/legacy`);
  const legacyHook = `${workspace}/legacy/.git/hooks/pre-commit`;
  await Deno.writeTextFile(legacyHook, "#!/bin/sh\necho planted\n");
  await Deno.chmod(legacyHook, 0o755);
  const server = await startServer({ UEXEC_WORKSPACE: workspace });
  // The server's uids are its own block's; its guard first walks at the first command.
  const { first: FIRST_UID, last: LAST_UID, gid: SANDBOX_GID } = server.uids;
  await Deno.chown(legacyHook, FIRST_UID + 7, SANDBOX_GID);
  const ws = await Deno.realPath(workspace);

  try {
    await t.step("a nested repository is not writable; the files around it are", async () => {
      const r = await run(
        server,
        "echo x > nested/sub/.git/hooks/pre-commit; echo y >> nested/sub/.git/config; " +
          "echo ok > nested/sub/file && cat nested/sub/file",
      );
      assert.equal(
        r.output,
        `${denied("nested/sub/.git/hooks/pre-commit")}\r\n${
          denied("nested/sub/.git/config")
        }\r\nok\r\n`,
      );
      await assert.rejects(
        Deno.stat(`${ws}/nested/sub/.git/hooks/pre-commit`),
        Deno.errors.NotFound,
      );
      assert.equal(await Deno.readTextFile(`${ws}/nested/sub/.git/config`), "[core]\n");
    });

    await t.step("what the sandbox made inside one earlier is no longer its own", async () => {
      const info = await Deno.stat(`${ws}/legacy/.git/hooks/pre-commit`);
      assert.equal(info.uid, 0);
      assert.equal(info.mode! & 0o7777, 0o644);
      const r = await run(server, "echo more >> legacy/.git/hooks/pre-commit");
      assert.equal(r.output, `${denied("legacy/.git/hooks/pre-commit")}\r\n`);
      assert.equal(
        await Deno.readTextFile(`${ws}/legacy/.git/hooks/pre-commit`),
        "#!/bin/sh\necho planted\n",
      );
    });

    await t.step(
      "a repository the operator makes after the first command is not writable",
      async () => {
        await operatorRepo(`${ws}/later`);
        await Deno.mkdir(`${ws}/later/src`);
        const r = await run(
          server,
          "echo x > later/.git/hooks/pre-commit; echo y >> later/.git/config; touch later/.git/new; " +
            "echo ok > later/src/f && cat later/src/f",
        );
        assert.equal(
          r.output,
          [
            denied("later/.git/hooks/pre-commit"),
            denied("later/.git/config"),
            "touch: cannot touch 'later/.git/new': Permission denied",
            "ok",
            "",
          ].join("\r\n"),
        );
        assert.equal(await Deno.readTextFile(`${ws}/later/.git/config`), "[core]\n");
        await assert.rejects(Deno.stat(`${ws}/later/.git/new`), Deno.errors.NotFound);
      },
    );

    await t.step("a workdir inside a .git is refused before anything runs", async () => {
      await operatorRepo(ws);
      for (const workdir of [".git", ".git/hooks", "later/.git/hooks"]) {
        const r = await server.post("/v1/exec_command", {
          cmd: "echo x > pre-commit",
          login: false,
          workdir,
        });
        const [dir] = /^.*?\.git/.exec(`${ws}/${workdir}`)!;
        assert.equal(r.status, 403, workdir);
        assert.deepEqual(r.body, {
          error: {
            code: "protected_workdir",
            message: `workdir: ${ws}/${workdir} is inside ${dir}, which stays read-only for ` +
              "sandboxed commands; run from the repository's working tree instead",
          },
        });
      }
      await assert.rejects(Deno.stat(`${ws}/.git/pre-commit`), Deno.errors.NotFound);
      await assert.rejects(Deno.stat(`${ws}/.git/hooks/pre-commit`), Deno.errors.NotFound);
    });

    await t.step("a repository the sandbox makes itself stays its own", async () => {
      const git = "git -c init.defaultBranch=main -c user.name=u -c user.email=u@example.com";
      const init = await run(server, `mkdir own && ${git} -C own init -q && echo made`);
      assert.equal(init.output, "made\r\n");
      const owner = (await Deno.stat(`${ws}/own/.git`)).uid!;
      assert.ok(owner >= FIRST_UID && owner <= LAST_UID, `owned by session uid ${owner}`);
      // A later command, in it: {workdir}/.git is the sandbox's, so it is not mounted read-only.
      const commit = await run(
        server,
        `${git} commit -q --allow-empty -m one && ${git} rev-list --count HEAD`,
        { workdir: "own" },
      );
      assert.equal(commit.output, "1\r\n");
      const inside = await run(server, "touch x && echo inside", { workdir: "own/.git" });
      assert.equal(inside.output, "inside\r\n");
    });

    await t.step(
      "a repository the operator makes in the workspace is not writable by the sandbox",
      async () => {
        // A bare repository's shape, made by root (git's ownership check passes for root).
        await Deno.mkdir(`${ws}/bare/objects`, { recursive: true });
        await Deno.mkdir(`${ws}/bare/refs`);
        await Deno.writeTextFile(`${ws}/bare/config`, "[core]\n");
        await Deno.writeTextFile(`${ws}/bare/HEAD`, "ref: refs/heads/main\n");
        const r = await run(
          server,
          "printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' > bare/config; mkdir bare/hooks",
        );
        assert.equal(
          r.output,
          `${denied("bare/config")}\r\nmkdir: cannot create directory ‘bare/hooks’: ` +
            "Permission denied\r\n",
        );
        assert.equal(await Deno.readTextFile(`${ws}/bare/config`), "[core]\n");
        assert.deepEqual(sandboxAclEntries(`${ws}/bare`), []);
      },
    );

    await t.step(
      "a directory the sandbox could write is moved aside when renamed to .git",
      async () => {
        // Root owns every file in it, so git's ownership check would pass; the content is forged.
        await Deno.mkdir(`${ws}/proj/docs`, { recursive: true });
        await Deno.writeTextFile(`${ws}/proj/docs/config`, "[core]\n");
        const plant = await run(
          server,
          "printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' > proj/docs/config && " +
            "mkdir proj/docs/hooks && printf '#!/bin/sh\\necho pwned\\n' > proj/docs/hooks/pre-commit && " +
            "chmod +x proj/docs/hooks/pre-commit && mv proj/docs proj/.git && echo moved",
        );
        assert.equal(plant.output, "moved\r\n");
        // The next command is the barrier: the guard has seen the rename before it runs.
        const r = await run(server, 'touch proj/.git/x "$(echo proj/.git.untrusted-*)/x"');
        const [aside] = [...Deno.readDirSync(`${ws}/proj`)].map((e) => e.name);
        assert.match(aside, /^\.git\.untrusted-[0-9a-f]+$/);
        assert.equal(
          r.output,
          `touch: cannot touch 'proj/.git/x': No such file or directory\r\n` +
            `touch: cannot touch 'proj/${aside}/x': Permission denied\r\n`,
        );
        const names = [...Deno.readDirSync(`${ws}/proj/${aside}`)].map((e) => e.name).sort();
        assert.deepEqual(names, ["config"]);
      },
    );

    await t.step(
      "a .git file that does not lead into a protected directory is moved aside",
      async () => {
        await Deno.mkdir(`${ws}/wt`);
        await Deno.writeTextFile(`${ws}/wt/notes`, "notes\n");
        const link = await run(
          server,
          `printf 'gitdir: ${ws}/proj\\n' > wt/notes && ln wt/notes wt/.git && echo linked`,
        );
        assert.equal(link.output, "linked\r\n");
        // Control: the operator's own .git file, leading into a protected repository, stays.
        await Deno.mkdir(`${ws}/wt2`);
        await Deno.writeTextFile(`${ws}/wt2/.git`, `gitdir: ${ws}/later/.git\n`);
        const r = await run(server, "ls -A1 wt wt2");
        assert.match(
          r.output,
          /^wt:\r\n\.git\.untrusted-[0-9a-f]+\r\nnotes\r\n\r\nwt2:\r\n\.git\r\n$/,
        );
        assert.equal(await Deno.readTextFile(`${ws}/wt2/.git`), `gitdir: ${ws}/later/.git\n`);
        await assert.rejects(Deno.lstat(`${ws}/wt/.git`), Deno.errors.NotFound);
      },
    );

    await t.step(
      "a .git file the sandbox holds open is replaced by a copy it cannot reach",
      async () => {
        await Deno.mkdir(`${ws}/wt3`);
        await Deno.writeTextFile(`${ws}/wt3/notes`, "");
        const valid = `gitdir: ${ws}/later/.git\n`;
        const holder = await lineRunner(
          server,
          `exec 3<>wt3/notes; printf '${valid.trimEnd()}\\n' >&3; ln wt3/notes wt3/.git; `,
        );
        // The next command is the barrier: the guard has seen the link before it runs.
        assert.equal((await run(server, "echo barrier")).output, "barrier\r\n");
        await writeToFd3(server, holder, "gitdir: /forged");
        assert.equal(await Deno.readTextFile(`${ws}/wt3/.git`), valid);
        assert.equal(await Deno.readTextFile(`${ws}/wt3/notes`), `${valid}gitdir: /forged\n`);
        assert.equal((await server.del(`/v1/sessions/${holder}`)).status, 200);
      },
    );

    await t.step("the operator's .git file is left as the operator writes it", async () => {
      await Deno.mkdir(`${ws}/wt4`);
      await Deno.writeTextFile(`${ws}/wt4/.git`, "");
      const { ino } = await Deno.lstat(`${ws}/wt4/.git`);
      assert.equal((await run(server, "echo barrier")).output, "barrier\r\n");
      await Deno.writeTextFile(`${ws}/wt4/.git`, `gitdir: ${ws}/later/.git\n`);
      assert.equal((await run(server, "ls -A1 wt4")).output, ".git\r\n");
      assert.equal(await Deno.readTextFile(`${ws}/wt4/.git`), `gitdir: ${ws}/later/.git\n`);
      assert.equal((await Deno.lstat(`${ws}/wt4/.git`)).ino, ino);
    });

    await t.step("a repository made while a session runs is not writable by it", async () => {
      await Deno.mkdir(`${ws}/live`);
      const id = await lineRunner(server);
      const guarded = attributeChange(`${ws}/live`, `${ws}/live/.git`);
      try {
        await Deno.mkdir(`${ws}/live/.git`);
        await guarded.changed;
      } finally {
        guarded.close();
      }
      await operatorRepo(`${ws}/live`);
      const r = await server.post("/v1/write_stdin", {
        session_id: id,
        chars: "echo x > live/.git/hooks/pre-commit; echo y >> live/.git/config; " +
          "mkdir live/.git/x; echo ok > live/f && cat live/f\n",
        until: "ok\\n",
        yield_time_ms: 10000,
      });
      assert.equal(
        r.body.output,
        [
          "/bin/bash: line 1: live/.git/hooks/pre-commit: Permission denied",
          "/bin/bash: line 1: live/.git/config: Permission denied",
          "mkdir: cannot create directory ‘live/.git/x’: Permission denied",
          "ok",
          "",
        ].join("\n"),
      );
      assert.equal(await Deno.readTextFile(`${ws}/live/.git/config`), "[core]\n");
      assert.equal((await server.del(`/v1/sessions/${id}`)).status, 200);
    });

    await t.step(
      "what is renamed into a repository while the guard walks it loses its grant too",
      async () => {
        // Made before it is named .git, so all of it inherited the workspace grant. Once the
        // guard has stripped `big`, it has listed .git and `big` and walks `big`'s 20,000
        // entries; `late` then moves from `big`, before the walk reaches it, into .git, listed
        // without it (git init does the like with config.lock -> config).
        const stage = `${ws}/moved/stage`;
        await Deno.mkdir(`${stage}/big`, { recursive: true });
        for (let i = 0; i < 20_000; i++) Deno.writeFileSync(`${stage}/big/${i}`, new Uint8Array());
        Deno.writeTextFileSync(`${stage}/big/late`, "[core]\n");
        assert.match(
          sandboxAclEntries(`${stage}/big/late`).join(),
          new RegExp(`group:${SANDBOX_GID}`),
        );
        const big = watchAttributes(`${stage}/big`);
        try {
          await Deno.rename(stage, `${ws}/moved/.git`);
          big.changed(GUARD_DEADLINE_MS);
        } finally {
          big.close();
        }
        await Deno.rename(`${ws}/moved/.git/big/late`, `${ws}/moved/.git/config`);
        assert.equal((await run(server, "echo barrier")).output, "barrier\r\n");
        // Writable by the sandbox when renamed into place, so moved aside; `config` stripped.
        const [aside] = [...Deno.readDirSync(`${ws}/moved`)].map((e) => e.name);
        assert.match(aside, /^\.git\.untrusted-/);
        assert.equal(Deno.readTextFileSync(`${ws}/moved/${aside}/config`), "[core]\n");
        assert.deepEqual(sandboxAclEntries(`${ws}/moved/${aside}/config`), []);
      },
    );

    const hooks = `${ws}/nested/sub/.git/hooks`;
    const asideOf = (dir: string, name: string) =>
      [...Deno.readDirSync(dir)].map((e) => e.name).filter((n) =>
        n.startsWith(`${name}.untrusted-`)
      );

    await t.step(
      "a file the sandbox could write, moved into a repository later, is moved aside",
      async () => {
        // Written where the sandbox may write it (it inherits the workspace grant), and held
        // open for writing by a session: stripping its ACL alone would not stop that descriptor.
        await Deno.writeTextFile(`${ws}/hook`, "#!/bin/sh\necho reviewed\n");
        assert.match(sandboxAclEntries(`${ws}/hook`).join(), new RegExp(`group:${SANDBOX_GID}`));
        const held = await lineRunner(server, "exec 3>>hook; ");
        await Deno.rename(`${ws}/hook`, `${hooks}/pre-commit`);
        // The guard has judged it before the next command is spawned.
        const r = await run(server, "echo x >> nested/sub/.git/hooks/pre-commit");
        assert.equal(r.output, `${denied("nested/sub/.git/hooks/pre-commit")}\r\n`);
        await assert.rejects(Deno.stat(`${hooks}/pre-commit`), Deno.errors.NotFound);
        const [aside] = asideOf(hooks, "pre-commit");
        assert.deepEqual(sandboxAclEntries(`${hooks}/${aside}`), []);
        // What the held descriptor writes lands in the file moved aside, which git never runs.
        await writeToFd3(server, held, "forged");
        assert.equal(
          await Deno.readTextFile(`${hooks}/${aside}`),
          "#!/bin/sh\necho reviewed\nforged\n",
        );
        assert.equal((await server.del(`/v1/sessions/${held}`)).status, 200);
      },
    );

    await t.step(
      "so is one moved into a directory just made there, in the same moment",
      async () => {
        await Deno.writeTextFile(`${ws}/hook2`, "#!/bin/sh\n");
        const made = `${ws}/nested/sub/.git/hooks.d`;
        // Both land before the guard looks: it may see the directory with the file already in it.
        await Deno.mkdir(made);
        await Deno.rename(`${ws}/hook2`, `${made}/pre-push`);
        const r = await run(server, "echo x >> nested/sub/.git/hooks.d/pre-push");
        assert.equal(r.output, `${denied("nested/sub/.git/hooks.d/pre-push")}\r\n`);
        await assert.rejects(Deno.stat(`${made}/pre-push`), Deno.errors.NotFound);
        const [aside] = asideOf(made, "pre-push");
        assert.deepEqual(sandboxAclEntries(`${made}/${aside}`), []);
      },
    );

    await t.step(
      "a file of one given to the sandbox group in place is taken back there",
      async () => {
        const config = `${ws}/nested/sub/.git/config`;
        const chgrp = await new Deno.Command("chgrp", { args: [`${SANDBOX_GID}`, config] })
          .output();
        assert.equal(chgrp.code, 0);
        await Deno.chmod(config, 0o664);
        const r = await run(server, "echo y >> nested/sub/.git/config");
        assert.equal(r.output, `${denied("nested/sub/.git/config")}\r\n`);
        assert.equal((await Deno.stat(config)).gid, 0);
        assert.equal(await Deno.readTextFile(config), "[core]\n");
        assert.deepEqual(asideOf(`${ws}/nested/sub/.git`, "config"), []);
      },
    );

    await t.step(
      "a directory of a repository given to the sandbox group is taken back",
      async () => {
        const chgrp = await new Deno.Command("chgrp", { args: [`${SANDBOX_GID}`, hooks] }).output();
        assert.equal(chgrp.code, 0);
        await Deno.chmod(hooks, 0o775);
        const r = await run(server, "touch nested/sub/.git/hooks/x");
        assert.equal(
          r.output,
          "touch: cannot touch 'nested/sub/.git/hooks/x': Permission denied\r\n",
        );
        const info = await Deno.stat(hooks);
        assert.equal(info.gid, 0);
        assert.equal(info.mode! & 0o7777, 0o775);
      },
    );

    await t.step(
      "a file the sandbox never could write stays where the operator moved it",
      async () => {
        const clean = await Deno.makeTempFile({ dir: fs.path, prefix: "uexec-clean-" });
        await Deno.writeTextFile(clean, "ref: refs/heads/main\n");
        await Deno.rename(clean, `${ws}/nested/sub/.git/ORIG_HEAD`);
        assert.equal((await run(server, "echo barrier")).output, "barrier\r\n");
        assert.equal(
          await Deno.readTextFile(`${ws}/nested/sub/.git/ORIG_HEAD`),
          "ref: refs/heads/main\n",
        );
        assert.deepEqual(asideOf(`${ws}/nested/sub/.git`, "ORIG_HEAD"), []);
      },
    );
  } finally {
    await server.stop();
    await fs.close();
  }
});
