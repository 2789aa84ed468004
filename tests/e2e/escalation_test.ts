/**
 * Narrow escalation end to end: an agent asks for a wider profile, extra writable directories
 * or extra TCP ports; the operator is shown exactly that widening; the command then runs still
 * sandboxed with only that added, and `approved_for_session` remembers that widening alone. An
 * on-failure denial proposes the narrowest widening that names what was denied: the port a
 * message names, else the port of the command's URL, else the profile with network; the
 * directory of a denied write, or the whole .git it is in. Also the request checks that
 * go with escalation: the server's shell, workdirs inside the workspace, the state directory.
 *
 * @module
 */

import assert from "node:assert/strict";
import { widening } from "../../src/service/supervisor.ts";
import { sandboxAclEntries } from "../helpers/fs.ts";
import { connectSse, type SseClient } from "../helpers/sse.ts";
import { startServer, type TestServer } from "../helpers/server.ts";

/** A line holding a session uid (each server leases a block of the default pool). */
const SESSION_UID = "20\\d{8}\\r\\n";

// deno-lint-ignore no-explicit-any
type Body = any;

/** A TCP listener on 127.0.0.1 that greets and closes every connection. */
function greeter(): { port: number; close(): void } {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  (async () => {
    for await (const conn of listener) {
      await conn.write(new TextEncoder().encode("hello\n")).catch(() => {});
      conn.close();
    }
  })().catch(() => {});
  return { port: listener.addr.port, close: () => listener.close() };
}

/** A command that prints what a TCP connection to 127.0.0.1:`port` read, or why it failed. */
const connectTo = (port: number) =>
  `exec 3<>/dev/tcp/127.0.0.1/${port} && head -n1 <&3 || echo "no ${port}"`;

/** A server with the operator's event stream open. */
async function setUp(env: Record<string, string> = {}) {
  const server = await startServer({ UEXEC_APPROVAL_POLICY: "on-request", ...env });
  const events = await connectSse(`${server.url}/v1/events`, server.operator.auth);
  return { server, events };
}

/** Start `body` and wait for the approval it asks for (the `n`th of the stream). */
async function asked(
  server: TestServer,
  events: SseClient,
  body: Record<string, unknown>,
  n: number,
): Promise<{ pending: Promise<{ status: number; body: Body }>; approval: Body }> {
  const pending = server.post("/v1/exec_command", { login: false, ...body });
  // An answer before the question is a failure, not a wait that never ends.
  const early = pending.then((r) => {
    throw new Error(`answered without asking: ${JSON.stringify(r.body)}`);
  });
  early.catch(() => {});
  const all = await Promise.race([
    events.until((evs) => evs.filter((e) => e.event === "approval_requested").length >= n),
    early,
  ]);
  const approval = all.filter((e) => e.event === "approval_requested")[n - 1].data.approval;
  return { pending, approval };
}

Deno.test("narrow escalation: a profile, writable directories, TCP ports", async (t) => {
  const { server, events } = await setUp();
  const out = await Deno.makeTempDir({ prefix: "uexec-widen-" });
  const other = await Deno.makeTempDir({ prefix: "uexec-widen-other-" });
  // Root's, as an operator's directories are: only the grant lets a session's uid write one.
  for (const dir of [out, other]) await Deno.chmod(dir, 0o755);
  await Deno.writeTextFile(`${out}/secret`, "root only\n", { mode: 0o600 });
  const open = greeter();
  const closed = greeter();
  let n = 0;
  try {
    await t.step("without escalation the sandbox holds (control)", async () => {
      const r = await server.post("/v1/exec_command", {
        cmd: `touch ${out}/x 2>&1; ${connectTo(open.port)}`,
        login: false,
      });
      assert.match(
        r.body.output,
        new RegExp(`touch: cannot touch '${out}/x': Read-only file system`),
      );
      assert.match(r.body.output, new RegExp(`no ${open.port}`));
    });

    await t.step("write: only the named directory becomes writable", async () => {
      const cmd = `id -u > ${out}/w && cat ${out}/w; touch ${other}/w; cat ${out}/secret`;
      const { pending, approval } = await asked(server, events, {
        cmd,
        escalate: { write: [out] },
        justification: "write the build output",
      }, ++n);
      assert.deepEqual(approval.escalation, { write: [out] });
      assert.equal(approval.runs, `sandboxed under workspace-write, plus write access to ${out}`);
      assert.equal(approval.justification, "write the build output");
      assert.equal(approval.can_choose_unsandboxed, false);
      await server.operator.post(`/v1/approvals/${approval.id}`, { decision: "approved" });
      const r = await pending;
      assert.match(
        r.body.output,
        new RegExp(
          `^${SESSION_UID}touch: cannot touch '${other}/w': Read-only file system\\r\\n` +
            `cat: ${out}/secret: Permission denied\\r\\n$`,
        ),
        "the grant never lets the session read what it could not",
      );
      assert.equal(r.body.sandbox.profile, "workspace-write");
      // Taken back by the time the exit is reported: what it made is the directory owner's.
      assert.equal((await Deno.stat(`${out}/w`)).uid, 0);
      assert.deepEqual(sandboxAclEntries(out), []);
    });

    await t.step("write: a session killed while it runs gives the grant back first", async () => {
      const { pending, approval } = await asked(server, events, {
        cmd: `touch ${out}/running && sleep 600`,
        escalate: { write: [out] },
        yield_time_ms: 1000,
      }, ++n);
      await server.operator.post(`/v1/approvals/${approval.id}`, { decision: "approved" });
      const running = await pending;
      assert.equal(typeof running.body.session_id, "number");
      assert.notDeepEqual(sandboxAclEntries(out), [], "granted while it runs");
      await server.del(`/v1/sessions/${running.body.session_id}`);
      assert.deepEqual(sandboxAclEntries(out), []);
      assert.equal((await Deno.stat(`${out}/running`)).uid, 0);
    });

    await t.step("tcp_ports: only the named port opens", async () => {
      const { pending, approval } = await asked(server, events, {
        cmd: `${connectTo(open.port)}; ${connectTo(closed.port)}`,
        escalate: { tcp_ports: [open.port] },
      }, ++n);
      assert.equal(
        approval.runs,
        `sandboxed under workspace-write, plus TCP to port ${open.port} on any host (connect and ` +
          "listen) and UDP to any host (name lookups)",
      );
      await server.operator.post(`/v1/approvals/${approval.id}`, { decision: "approved" });
      const r = await pending;
      assert.match(r.body.output, /^hello\r\n/);
      assert.match(r.body.output, new RegExp(`no ${closed.port}\\r\\n$`));
    });

    await t.step("profile: a wider profile, still sandboxed", async () => {
      const { pending, approval } = await asked(server, events, {
        cmd: `${connectTo(open.port)}; id -u`,
        escalate: { profile: "workspace-write-net" },
      }, ++n);
      assert.equal(
        approval.runs,
        "sandboxed under workspace-write-net instead of workspace-write",
      );
      await server.operator.post(`/v1/approvals/${approval.id}`, { decision: "approved" });
      const r = await pending;
      assert.match(r.body.output, new RegExp(`^hello\\r\\n${SESSION_UID}$`));
      assert.equal(r.body.sandbox.profile, "workspace-write-net");
    });

    await t.step("approved_for_session remembers that widening alone", async () => {
      // A file per run: each run is a session of its own uid, and touching another uid's file
      // would need write access to it.
      const body = { cmd: `touch ${out}/s$$ && echo ok`, escalate: { write: [out] } };
      const first = await asked(server, events, body, ++n);
      await server.operator.post(`/v1/approvals/${first.approval.id}`, {
        decision: "approved_for_session",
      });
      assert.equal((await first.pending).body.output, "ok\r\n");
      const again = await server.post("/v1/exec_command", { login: false, ...body });
      assert.equal(again.body.output, "ok\r\n", "the same request runs without asking");
      const wider = await asked(server, events, {
        ...body,
        escalate: { write: [out, other] },
      }, ++n);
      assert.deepEqual(wider.approval.escalation, { write: [out, other].sort() });
      await server.operator.post(`/v1/approvals/${wider.approval.id}`, { decision: "denied" });
      assert.equal((await wider.pending).status, 403);
    });

    await t.step(
      "on-failure: a denied connection proposes its port, its URL's, or the network",
      async () => {
        await events.close();
        await server.stop();
        const again = await setUp({ UEXEC_APPROVAL_POLICY: "on-failure" });
        try {
          const { pending, approval } = await asked(again.server, again.events, {
            cmd: `curl -sS --max-time 5 http://127.0.0.1:${open.port}/`,
          }, 1);
          assert.deepEqual(approval.escalation, { tcp_ports: [open.port] });
          assert.equal(approval.denial.kind, "network");
          assert.equal(approval.denial.port, open.port);
          assert.equal(approval.can_choose_unsandboxed, true);
          await again.server.operator.post(`/v1/approvals/${approval.id}`, { decision: "denied" });
          const r = await pending;
          assert.equal(r.body.sandbox.denied, true);
          // The test server's state directory is in /tmp: write access to /tmp cannot be granted.
          const held = await asked(again.server, again.events, {
            cmd: `touch /tmp/uexec-held-${crypto.randomUUID()}`,
          }, 2);
          assert.equal(held.approval.denial.kind, "fs-write");
          assert.deepEqual(held.approval.escalation, { unsandboxed: true });
          await again.server.operator.post(`/v1/approvals/${held.approval.id}`, {
            decision: "denied",
          });
          await held.pending;
          // A failed name lookup names the host but no port: the command's URL to it does.
          const lookup = await asked(again.server, again.events, {
            cmd: "curl -sS --max-time 5 https://uexec-test.invalid/x",
          }, 3);
          assert.equal(lookup.approval.denial.host, "uexec-test.invalid");
          assert.deepEqual(lookup.approval.escalation, { tcp_ports: [443] });
          await again.server.operator.post(`/v1/approvals/${lookup.approval.id}`, {
            decision: "denied",
          });
          await lookup.pending;
          // Nothing names a port: the profile with network, still sandboxed, not no sandbox.
          const unnamed = await asked(again.server, again.events, {
            cmd: `python3 -c "import socket; socket.getaddrinfo('uexec-test.invalid', 80)"`,
          }, 4);
          assert.equal(unnamed.approval.denial.kind, "network");
          assert.deepEqual(unnamed.approval.escalation, { profile: "workspace-write-net" });
          await again.server.operator.post(`/v1/approvals/${unnamed.approval.id}`, {
            decision: "approved",
          });
          const retried = (await unnamed.pending).body;
          assert.deepEqual(retried.sandbox, {
            profile: "workspace-write-net",
            denied: false,
            retried: true,
          });
        } finally {
          await again.events.close();
          await again.server.stop();
        }
      },
    );
  } finally {
    open.close();
    closed.close();
    await events.close().catch(() => {});
    await server.stop().catch(() => {});
    await Deno.remove(out, { recursive: true });
    await Deno.remove(other, { recursive: true });
  }
});

Deno.test("a server killed while it holds a write grant: the next start takes it back", async () => {
  const state = await Deno.makeTempDir({ prefix: "uexec-state-" });
  const workspace = await Deno.makeTempDir({ prefix: "uexec-ws-" });
  const out = await Deno.makeTempDir({ prefix: "uexec-grant-crash-" });
  await Deno.chmod(out, 0o755);
  const shared = { UEXEC_STATE_DIR: state, UEXEC_WORKSPACE: workspace };
  const { server, events } = await setUp(shared);
  try {
    const { pending, approval } = await asked(server, events, {
      cmd: `printf '#!/bin/sh\\n' > ${out}/hook && chmod 755 ${out}/hook && echo made && sleep 600`,
      escalate: { write: [out] },
      until: "made",
      yield_time_ms: 10_000,
    }, 1);
    await server.operator.post(`/v1/approvals/${approval.id}`, { decision: "approved" });
    const running = await pending;
    assert.equal(typeof running.body.session_id, "number", JSON.stringify(running.body));
    assert.notDeepEqual(sandboxAclEntries(out), [], "granted while it runs");
    assert.deepEqual([...Deno.readDirSync(`${state}/grants`)].map((e) => e.name).length, 1);
    Deno.kill(server.pid, "SIGKILL");
  } finally {
    await events.close();
    await server.stop();
  }
  // Left behind by the crash: the uid's entries, and a runnable file it owns.
  assert.notDeepEqual(sandboxAclEntries(out), []);
  assert.notEqual((await Deno.stat(`${out}/hook`)).uid, 0);
  const next = await startServer(shared);
  let code, stderr = "";
  try {
    // Taken back before the next server listens, as a session's exit would have.
    assert.deepEqual(sandboxAclEntries(out), []);
    const hook = await Deno.stat(`${out}/hook`);
    assert.equal(hook.uid, 0);
    assert.deepEqual([...Deno.readDirSync(`${state}/grants`)], []);
  } finally {
    ({ code, stderr } = await next.stop());
    for (const dir of [state, workspace, out]) await Deno.remove(dir, { recursive: true });
  }
  // Stopped as soon as it listened: shut down, not ended by the signal, its log all written.
  assert.equal(code, 0);
  assert.match(stderr, /"msg":"dead_grants_taken_back".*"grants":1\b/);
});

Deno.test("without cgroups too, a grant is taken back before the exit or the kill is reported", async () => {
  const { server, events } = await setUp({ UEXEC_CONTAINMENT: "process-group" });
  const out = await Deno.makeTempDir({ prefix: "uexec-grant-pg-" });
  await Deno.chmod(out, 0o755);
  // Enough entries that taking the grant back takes a while (on its own thread).
  for (let i = 0; i < 5000; i++) Deno.writeTextFileSync(`${out}/f${i}`, "");
  try {
    const ran = await asked(server, events, {
      cmd: `touch ${out}/made`,
      escalate: { write: [out] },
    }, 1);
    await server.operator.post(`/v1/approvals/${ran.approval.id}`, { decision: "approved" });
    assert.equal((await ran.pending).body.exit_code, 0);
    assert.deepEqual(sandboxAclEntries(out), []);
    assert.equal((await Deno.stat(`${out}/made`)).uid, 0);
    const running = await asked(server, events, {
      cmd: `touch ${out}/running && sleep 600`,
      escalate: { write: [out] },
      yield_time_ms: 1000,
    }, 2);
    await server.operator.post(`/v1/approvals/${running.approval.id}`, { decision: "approved" });
    const id = (await running.pending).body.session_id;
    assert.notDeepEqual(sandboxAclEntries(out), [], "granted while it runs");
    await server.del(`/v1/sessions/${id}`);
    assert.deepEqual(sandboxAclEntries(out), []);
    assert.equal((await Deno.stat(`${out}/running`)).uid, 0);
  } finally {
    await events.close();
    await server.stop();
    await Deno.remove(out, { recursive: true });
  }
});

Deno.test("a grant record that cannot be read keeps its uid out of use", async () => {
  const state = await Deno.makeTempDir({ prefix: "uexec-state-" });
  await Deno.mkdir(`${state}/grants`, { mode: 0o700 });
  // The first session uid of an explicit range, as a power cut may leave its record (a range
  // outside the default pool, so no other server on the host holds it).
  const base = 2_100_000_000 + (Deno.pid % 100_000) * 100;
  await Deno.writeTextFile(`${state}/grants/${base + 1}.json`, "", { mode: 0o600 });
  const server = await startServer({
    UEXEC_STATE_DIR: state,
    UEXEC_UID_RANGE: `${base}-${base + 99}`,
  });
  let stderr = "";
  try {
    const r = await server.post("/v1/exec_command", { cmd: "id -u", login: false });
    assert.equal(r.body.output, `${base + 2}\r\n`);
  } finally {
    stderr = (await server.stop()).stderr;
    await Deno.remove(state, { recursive: true });
  }
  assert.match(
    stderr,
    new RegExp(`"msg":"dead_grant_failed".*${base + 1}\\.json: not a grant record; uid retired`),
  );
});

/** Runs git as the operator (root) in `cwd`; returns its stdout. */
function git(cwd: string, ...args: string[]): string {
  const out = new Deno.Command("git", {
    args: ["-c", "user.name=Operator", "-c", "user.email=op@example.com", ...args],
    cwd,
  }).outputSync();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  return new TextDecoder().decode(out.stdout);
}

/** Entries beneath `path` a session uid owns, or that are files with an execute bit. */
function sessionMadeOrRunnable(path: string): string[] {
  const found: string[] = [];
  for (const entry of Deno.readDirSync(path)) {
    const child = `${path}/${entry.name}`;
    const info = Deno.lstatSync(child);
    if (info.uid !== 0) found.push(`${child} uid ${info.uid}`);
    if (info.isFile && (info.mode! & 0o111) !== 0 && !entry.name.endsWith(".sample")) {
      found.push(`${child} mode ${(info.mode! & 0o7777).toString(8)}`);
    }
    if (info.isDirectory) found.push(...sessionMadeOrRunnable(child));
  }
  return found;
}

/** The operator's script in a working tree: the sandbox may change it, as any file there. */
async function script(dir: string): Promise<void> {
  await Deno.writeTextFile(`${dir}/build.sh`, "#!/bin/sh\necho build\n");
  await Deno.chmod(`${dir}/build.sh`, 0o775);
}

/** The hook a session made of that script in `git` (.git): moved aside, runnable by nobody. */
function scriptAside(git: string): void {
  assert.throws(() => Deno.statSync(`${git}/hooks/pre-push`), Deno.errors.NotFound);
  const [aside] = [...Deno.readDirSync(`${git}/hooks`)].filter((e) =>
    e.name.startsWith("pre-push.untrusted-")
  );
  assert.equal(Deno.statSync(`${git}/hooks/${aside.name}`).mode! & 0o111, 0);
}

Deno.test("a commit: the denied .git is asked for whole, granted for the run, taken back", async (t) => {
  const { server, events } = await setUp({ UEXEC_APPROVAL_POLICY: "on-failure" });
  const ws = await Deno.realPath(server.workspace);
  const repo = `${ws}/sub/repo`;
  await Deno.mkdir(repo, { recursive: true });
  await Deno.writeTextFile(`${repo}/a`, "one\n");
  git(repo, "init", "-q");
  git(repo, "add", "a");
  git(repo, "commit", "-qm", "one");
  await script(repo);
  const commit = (dir: string, msg: string) =>
    `cd ${dir} && echo ${msg} >> a && ` +
    `git -c user.name=Agent -c user.email=agent@example.com commit -qam ${msg} && ` +
    `printf '#!/bin/sh\\necho planted\\n' > .git/hooks/post-commit && ` +
    // Made in the working tree, so it carries the workspace grant into .git; and the operator's
    // script there, which the sandbox may change, made a hook.
    "chmod +x .git/hooks/post-commit && echo x > moved && mv moved .git/info/ && " +
    "echo 'echo forged' >> build.sh && mv build.sh .git/hooks/pre-push && git log --format=%s";
  let n = 0;
  try {
    await t.step("a nested repository: the retry asks for its .git and commits", async () => {
      const { pending, approval } = await asked(server, events, { cmd: commit(repo, "two") }, ++n);
      assert.deepEqual(approval.escalation, { write: [`${repo}/.git`] });
      assert.equal(approval.denial.kind, "fs-write");
      assert.equal(approval.denial.path, `${repo}/.git/index.lock`);
      assert.equal(
        approval.runs,
        `sandboxed under workspace-write, plus write access to ${repo}/.git (a git directory: ` +
          "its config and hooks can make git run commands for whoever uses that repository " +
          "next, outside any sandbox)",
      );
      await server.operator.post(`/v1/approvals/${approval.id}`, { decision: "approved" });
      const r = await pending;
      assert.equal(r.body.output, "two\r\none\r\n");
      assert.equal(r.body.sandbox.retried, true);
      assert.equal(git(repo, "log", "--format=%s %an"), "two Agent\none Operator\n");
    });

    await t.step("taken back: no grant left, what the run made is root's and runs nothing", () => {
      assert.deepEqual(sandboxAclEntries(`${repo}/.git`), []);
      assert.deepEqual(sessionMadeOrRunnable(`${repo}/.git`), []);
      assert.ok(Deno.statSync(`${repo}/.git/hooks/post-commit`).isFile);
      scriptAside(`${repo}/.git`);
    });

    await t.step("without an approval the .git stays read-only (control)", async () => {
      const { pending, approval } = await asked(server, events, {
        cmd: `touch ${repo}/.git/x`,
      }, ++n);
      await server.operator.post(`/v1/approvals/${approval.id}`, { decision: "denied" });
      const r = await pending;
      assert.match(r.body.output, /Permission denied/);
      assert.equal(r.body.sandbox.denied, true);
      assert.throws(() => Deno.statSync(`${repo}/.git/x`), Deno.errors.NotFound);
    });

    await t.step("the workspace's own .git, which the profile lists read-only", async () => {
      await Deno.writeTextFile(`${ws}/a`, "one\n");
      git(ws, "init", "-q");
      git(ws, "add", "a");
      git(ws, "commit", "-qm", "one");
      await script(ws);
      // Readable by others, as a repository usually is (the test workspace's default ACL gives
      // them nothing, and the guard takes the sandbox group's entry off a .git).
      assert.equal(
        (await new Deno.Command("chmod", { args: ["-R", "go+rX", `${ws}/.git`] }).output()).code,
        0,
      );
      const { pending, approval } = await asked(server, events, { cmd: commit(ws, "top") }, ++n);
      assert.deepEqual(approval.escalation, { write: [`${ws}/.git`] });
      assert.equal(approval.denial.path, `${ws}/.git/index.lock`);
      await server.operator.post(`/v1/approvals/${approval.id}`, { decision: "approved" });
      const r = await pending;
      assert.equal(r.body.output, "top\r\none\r\n");
      assert.deepEqual(sandboxAclEntries(`${ws}/.git`), []);
      assert.deepEqual(sessionMadeOrRunnable(`${ws}/.git`), []);
      scriptAside(`${ws}/.git`);
    });
  } finally {
    await events.close();
    await server.stop();
  }
});

Deno.test("the retry a denial proposes: the narrowest widening that names what was denied", async (t) => {
  const dir = await Deno.realPath(await Deno.makeTempDir({ prefix: "uexec-propose-" }));
  await Deno.mkdir(`${dir}/repo/.git/refs/heads`, { recursive: true });
  const protectedNames = new Set([".git", ".uexec"]);
  const at = { command: "git commit", workdir: dir, protectedNames };
  const denied = (path: string) => ({ kind: "fs-write" as const, path, evidence: "denied" });
  try {
    await t.step("a write: its directory, or the whole .git it is in", () => {
      const lock = `${dir}/repo/.git/refs/heads/main.lock`;
      assert.deepEqual(widening(denied(lock), at), { write: [`${dir}/repo/.git`] });
      assert.deepEqual(widening(denied("repo/.git/index.lock"), at), {
        write: [`${dir}/repo/.git`],
      });
      assert.deepEqual(widening(denied(lock), { ...at, protectedNames: undefined }), {
        write: [`${dir}/repo/.git/refs/heads`],
      });
      assert.deepEqual(widening(denied(`${dir}/repo/out/x`), at), { write: [`${dir}/repo`] });
      assert.deepEqual(widening(denied("/nowhere/x"), at), { unsandboxed: true });
    });

    await t.step("a connection: its port, else the command's URLs, else the network", () => {
      const network = (extra: { host?: string; port?: number }) => ({
        kind: "network" as const,
        evidence: "curl: (6) Could not resolve host: example.com",
        ...extra,
      });
      const net = { ...at, withNetwork: "workspace-write-net" };
      const curl = (command: string) => ({ ...net, command });
      // The message's own port comes first.
      assert.deepEqual(widening(network({ port: 8080 }), curl("curl https://x.example")), {
        tcp_ports: [8080],
      });
      // A lookup failure names the host: the ports of the command's URLs to that host.
      assert.deepEqual(
        widening(
          network({ host: "Example.com" }),
          curl("curl -O https://example.com/a http://other.example:8080/ http://example.com:8000/"),
        ),
        { tcp_ports: [443, 8000] },
      );
      assert.deepEqual(
        widening(
          network({ host: "git.example.com" }),
          curl("git clone ssh://git@git.example.com/r"),
        ),
        { tcp_ports: [22] },
      );
      // Any case of scheme; what follows the host in the shell line is not part of it.
      assert.deepEqual(
        widening(network({ host: "example.com" }), curl("curl -s HTTPS://Example.com.|jq .")),
        { tcp_ports: [443] },
      );
      // Naming no host: every URL of the command.
      assert.deepEqual(
        widening(network({}), curl("python3 get.py https://a.example wss://b:9443")),
        {
          tcp_ports: [443, 9443],
        },
      );
      // No URL to that host, or none at all: the profile with network, still sandboxed.
      assert.deepEqual(widening(network({ host: "example.com" }), curl("curl https://other/")), {
        profile: "workspace-write-net",
      });
      assert.deepEqual(widening(network({}), curl("ssh example.com")), {
        profile: "workspace-write-net",
      });
      // No such profile: only no sandbox opens the network.
      assert.deepEqual(widening(network({}), { ...at, command: "ssh example.com" }), {
        unsandboxed: true,
      });
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("what an escalation may name: the server's shell, never the state directory", async () => {
  const { server, events } = await setUp();
  try {
    const shell = await server.post("/v1/exec_command", {
      cmd: "id -u",
      shell: `${server.workspace}/planted-shell`,
      sandbox_permissions: "require_escalated",
    });
    assert.equal(shell.status, 400);
    assert.match(shell.body.error.message, /^shell: cannot start/);
    await Deno.writeTextFile(`${server.workspace}/planted-shell`, '#!/bin/sh\nexec /bin/sh "$@"\n');
    await Deno.chmod(`${server.workspace}/planted-shell`, 0o755);
    const planted = await server.post("/v1/exec_command", {
      cmd: "id -u",
      shell: `${server.workspace}/planted-shell`,
      sandbox_permissions: "require_escalated",
    });
    assert.equal(planted.status, 400);
    assert.equal(
      planted.body.error.message,
      `shell: an escalated command runs with the server's shell /bin/bash; leave shell out or ` +
        `pass that one (got ${server.workspace}/planted-shell)`,
    );
    // The test server's state directory lies in /tmp: granting it, or anything above it, is
    // refused.
    for (const write of [server.stateDir, "/tmp", "/"]) {
      const r = await server.post("/v1/exec_command", {
        cmd: "true",
        escalate: { write: [write] },
      });
      assert.equal(r.status, 403, write);
      assert.equal(
        r.body.error.message,
        `escalate.write.0: ${await Deno.realPath(
          write,
        )} holds the server's state; it cannot be granted`,
      );
    }
    const empty = await server.post("/v1/exec_command", { cmd: "true", escalate: {} });
    assert.equal(empty.status, 400);
    assert.equal(
      empty.body.error.message,
      "escalate: name at least one of profile, write, tcp_ports, hosts",
    );
    assert.deepEqual((await server.operator.get("/v1/approvals")).body, { approvals: [] });
  } finally {
    await events.close();
    await server.stop();
  }
});

Deno.test("workdirs stay inside the workspace or an allowed root", async () => {
  const { server, events } = await setUp();
  const ws = await Deno.realPath(server.workspace);
  await Deno.mkdir(`${ws}/sub`);
  await Deno.symlink("/tmp", `${ws}/out-link`);
  await Deno.symlink(`${ws}/sub`, `${ws}/in-link`);
  try {
    for (const workdir of ["/", "/tmp", "..", "../..", "out-link", `${ws}/sub/../..`]) {
      const r = await server.post("/v1/exec_command", { cmd: "pwd", workdir });
      assert.equal(r.status, 403, workdir);
      assert.equal(r.body.error.code, "forbidden_workdir");
      assert.match(
        r.body.error.message,
        new RegExp(`^workdir: \\S+ is outside the workspace ${ws}; add it to UEXEC_ALLOWED_ROOTS`),
      );
    }
    for (const [workdir, real] of [["sub", `${ws}/sub`], ["in-link", `${ws}/sub`], [ws, ws]]) {
      const r = await server.post("/v1/exec_command", { cmd: "pwd -P", workdir, login: false });
      assert.equal(r.body.output, `${real}\r\n`, workdir);
    }
    const { pending, approval } = await asked(server, events, {
      cmd: "pwd",
      workdir: "/tmp",
      sandbox_permissions: "require_escalated",
    }, 1);
    assert.equal(approval.workdir, "/tmp", "an escalation may ask for it: the approver sees it");
    await server.operator.post(`/v1/approvals/${approval.id}`, { decision: "denied" });
    assert.equal((await pending).status, 403);
  } finally {
    await events.close();
    await server.stop();
  }
});

Deno.test("a bare repository the operator keeps in the workspace: read-only, opened by an approved write", async () => {
  const { server, events } = await setUp();
  const ws = await Deno.realPath(server.workspace);
  const bare = `${ws}/shared.git`;
  try {
    // Made after the workspace was granted: it inherited the grant, and the guard took it back.
    assert.equal((await server.post("/v1/exec_command", { cmd: "true" })).status, 200);
    git(ws, "init", "-q", "--bare", bare);
    // The guard has secured it once the next command starts; only then is it made readable by
    // others, as a shared repository is (see the workspace's .git above).
    assert.equal((await server.post("/v1/exec_command", { cmd: "true" })).status, 200);
    const chmod = new Deno.Command("chmod", { args: ["-R", "go+rX", bare] });
    assert.equal((await chmod.output()).code, 0);
    const cmd = `git config --file ${bare}/config core.fsmonitor 'touch /tmp/x' && echo set`;
    const denied = await server.post("/v1/exec_command", { cmd, login: false });
    assert.match(denied.body.output, /could not lock config file .*: Permission denied/);
    assert.doesNotMatch(await Deno.readTextFile(`${bare}/config`), /fsmonitor/);
    const { pending, approval } = await asked(server, events, {
      cmd: `git config --file ${bare}/config uexec.test yes && echo set`,
      escalate: { write: [bare] },
    }, 1);
    await server.operator.post(`/v1/approvals/${approval.id}`, { decision: "approved" });
    const done = await pending;
    assert.equal(done.body.output, "set\r\n", JSON.stringify(done.body));
    assert.equal(git(bare, "config", "--get", "uexec.test"), "yes\n");
    assert.deepEqual(sandboxAclEntries(bare), []);
  } finally {
    await events.close();
    await server.stop();
  }
});
