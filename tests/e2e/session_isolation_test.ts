/**
 * Sessions are isolated from each other, end to end through the HTTP API of a real root
 * server: each session runs as a uid of its own, so no session can signal, trace, read the
 * environ, the private HOME and TMPDIR, the terminal or the keyring of another (of its own
 * domain or any other), nor use up its process budget; a uid is handed out again only once
 * every process left of its previous session is dead, and a range that holds existing users is
 * refused.
 *
 * Every refusal is paired with a control where the session does the same to itself.
 *
 * @module
 */

import assert from "node:assert/strict";
import { startServer, type TestServer } from "../helpers/server.ts";

const FIXTURES = new URL("../fixtures/http/", import.meta.url).pathname;

// deno-lint-ignore no-explicit-any
type Body = any;

/** `POST /v1/exec_command` without a login shell; asserts 200 and returns the body. */
async function exec(server: TestServer, cmd: string, extra: Record<string, unknown> = {}) {
  const r = await server.post("/v1/exec_command", { cmd, login: false, ...extra });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body as Body;
}

/** Start a session that prints `key=value` lines and then waits; returns them and its id. */
async function holder(server: TestServer, cmd: string, profile = "workspace-write") {
  const r = await exec(server, `${cmd}; echo ready; exec sleep 600`, {
    profile,
    until: "ready\\r\\n",
    yield_time_ms: 10000,
  });
  assert.equal(typeof r.session_id, "number", JSON.stringify(r));
  const fields = Object.fromEntries(
    [...r.output.matchAll(/^(\w+)=(.*)\r$/gm)].map((m) => [m[1], m[2]]),
  );
  return { id: r.session_id as number, fields };
}

/** Profiles: the shipped ones plus `tight` (workspace-write with at most 20 processes). */
async function profilesDir(): Promise<string> {
  const shipped = new URL("../../sandbox-profiles/", import.meta.url).pathname;
  const dir = await Deno.makeTempDir({ prefix: "uexec-profiles-" });
  for await (const entry of Deno.readDir(shipped)) {
    await Deno.copyFile(`${shipped}${entry.name}`, `${dir}/${entry.name}`);
  }
  const base = JSON.parse(await Deno.readTextFile(`${shipped}workspace-write.json`));
  const tight = { ...base, description: "test: few processes", limits: { max_processes: 20 } };
  await Deno.writeTextFile(`${dir}/tight.json`, JSON.stringify(tight));
  return dir;
}

const PTRACE = `import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
rc = libc.ptrace(16, int(sys.argv[1]), 0, 0)
print("attached" if rc == 0 else "ptrace: " + os.strerror(ctypes.get_errno()))`;

const ADD_KEY = `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
rc = libc.syscall(248, b"user", b"uexec-isolation", b"s3cret", 6, -4)
print("added" if rc >= 0 else "add_key: " + os.strerror(ctypes.get_errno()))`;

const FIND_KEY = `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
key = libc.syscall(250, 10, -4, b"user", b"uexec-isolation", 0)
if key < 0:
    print("search: " + os.strerror(ctypes.get_errno()))
else:
    buf = ctypes.create_string_buffer(64)
    n = libc.syscall(250, 11, key, buf, 64)
    print("found " + buf.raw[:n].decode())`;

/** Holds processes until stdin closes; prints how many it could fork. */
const HOLD_FORKS = `import os, sys
r, w = os.pipe()
n = 0
try:
    while n < 100:
        if os.fork() == 0:
            os.close(w)
            os.read(r, 1)
            os._exit(0)
        n += 1
except OSError as e:
    print("holding", n, e.strerror, flush=True)
sys.stdin.read()`;

Deno.test("sessions of one domain and of different domains cannot reach each other", async (t) => {
  assert.equal(Deno.uid(), 0, "this test needs a root server");
  const profiles = await profilesDir();
  const server = await startServer({ UEXEC_PROFILES_DIR: profiles });
  const { first: FIRST_UID, last: LAST_UID, gid: GID } = server.uids;
  try {
    await t.step("a child runs as its session's uid with no capabilities at all", async () => {
      const r = await exec(
        server,
        "grep -E '^(Uid|Gid|Groups|Cap[A-Za-z]+):' /proc/self/status; " +
          `python3 -c 'import os; os.setresuid(${FIRST_UID - 1}, ${FIRST_UID - 1}, ${
            FIRST_UID - 1
          })' 2>&1 | tail -1; ` +
          "python3 -c 'import os; os.setuid(0)' 2>&1 | tail -1",
      );
      const uid = Number(/^Uid:\t(\d+)\t/.exec(r.output)?.[1]);
      assert.ok(uid >= FIRST_UID && uid <= LAST_UID, r.output);
      const denied = "PermissionError: [Errno 1] Operation not permitted";
      assert.equal(
        r.output,
        [
          `Uid:\t${uid}\t${uid}\t${uid}\t${uid}`,
          `Gid:\t${GID}\t${GID}\t${GID}\t${GID}`,
          "Groups:\t ",
          ...["Inh", "Prm", "Eff", "Bnd", "Amb"].map((set) => `Cap${set}:\t0000000000000000`),
          denied,
          denied,
          "",
        ].join("\r\n"),
      );
    });

    await t.step(
      "what one session creates in the workspace, the next session can edit",
      async () => {
        const first = await exec(
          server,
          "umask 077; echo one > shared.txt; mkdir d; echo x > d/f; id -u",
          { tty: false },
        );
        const second = await exec(
          server,
          "echo two >> shared.txt; echo y > d/g; rm d/f; ls d; cat shared.txt; id -u",
          { tty: false },
        );
        const [owner, editor] = [first, second].map((r) => Number(/(\d+)\n$/.exec(r.output)?.[1]));
        assert.notEqual(owner, editor);
        assert.equal(second.output, `g\none\ntwo\n${editor}\n`);
        const info = await Deno.stat(`${server.workspace}/shared.txt`);
        assert.equal(info.uid, owner);
        // The default ACL, not the umask, gives the new file's group class rw.
        assert.equal(info.mode! & 0o070, 0o060);
      },
    );

    const a = await holder(
      server,
      'echo secret > "$HOME/h" && echo secret > "$TMPDIR/t" && ' +
        "echo pid=$$ && echo home=$HOME && echo tmp=$TMPDIR && echo tty=$(tty)",
    );
    const pid = Number(a.fields.pid);
    const { home, tmp, tty } = a.fields;
    assert.match(tty, /^\/dev\/pts\/\d+$/);

    for (const profile of ["workspace-write", "read-only"]) {
      const where = profile === "workspace-write" ? "same domain" : "other domain";
      await t.step(`${where}: no kill, ptrace, environ, HOME, TMPDIR or terminal`, async () => {
        const r = await exec(
          server,
          [
            `echo x 2>&1 > ${tty}`,
            `kill -TERM ${pid} 2>&1`,
            `python3 -c '${PTRACE}' ${pid}`,
            `cat /proc/${pid}/environ 2>&1`,
            `ls ${home} 2>&1`,
            `cat ${home}/h ${tmp}/t 2>&1`,
            "true",
          ].join("; "),
          { profile, tty: false },
        );
        assert.equal(
          r.output,
          [
            `/bin/bash: line 1: ${tty}: Permission denied`,
            `/bin/bash: line 1: kill: (${pid}) - Operation not permitted`,
            "ptrace: Operation not permitted",
            `cat: /proc/${pid}/environ: No such file or directory`,
            `ls: cannot access '${home}': Permission denied`,
            `cat: ${home}/h: Permission denied`,
            `cat: ${tmp}/t: Permission denied`,
            "",
          ].join("\n"),
          where,
        );
      });
    }

    await t.step("control: a session reaches its own processes and files", async () => {
      const r = await exec(
        server,
        "{ sleep 600 & kill -0 $! && echo signalled; " +
          `python3 -c '${PTRACE}' $!; kill -9 $!; wait $!; } 2>/dev/null; ` +
          'grep -c "^HOME=" /proc/$$/environ; echo mine > "$HOME/h"; cat "$HOME/h"; ' +
          'echo x > "$(tty)" 2>&1 && echo terminal',
      );
      assert.equal(r.output, "signalled\r\nattached\r\n1\r\nmine\r\nx\r\nterminal\r\n");
    });

    await t.step("a key one session stores is not in another session's keyring", async () => {
      const added = (await exec(server, `python3 -c '${ADD_KEY}'`, { tty: false })).output;
      const found = (await exec(server, `python3 -c '${FIND_KEY}'`, { tty: false })).output;
      if (added === "added\n") {
        assert.equal(found, "search: Required key not available\n");
      } else {
        // A seccomp filter that refuses the keyring calls isolates them as well.
        assert.match(added, /^add_key: (Operation not permitted|Function not implemented)\n$/);
        assert.doesNotMatch(found, /^found/);
      }
    });

    await t.step("a fork bomb in one session leaves another session able to fork", async () => {
      const bomb = await exec(server, `python3 -c '${HOLD_FORKS}'`, {
        profile: "tight",
        tty: false,
        until: "holding",
        yield_time_ms: 10000,
      });
      const m = /^holding (\d+) Resource temporarily unavailable\n$/.exec(bomb.output);
      assert.ok(m && Number(m[1]) < 20, bomb.output);
      const other = await exec(server, `python3 ${FIXTURES}fork_many.py 15`, {
        profile: "tight",
        tty: false,
      });
      assert.equal(other.output, "forked 15\n");
      assert.equal((await server.del(`/v1/sessions/${bomb.session_id}`)).status, 200);
    });

    assert.equal((await server.del(`/v1/sessions/${a.id}`)).status, 200);
  } finally {
    await server.stop();
    await Deno.remove(profiles, { recursive: true });
  }
});

Deno.test("ten sessions started together get ten private directories, each kept until it ends", async () => {
  const server = await startServer();
  try {
    // A first session sets the domain up, so the ten below start in a domain that exists.
    assert.equal((await exec(server, "true", { tty: false })).exit_code, 0);
    const started = await Promise.all(
      Array.from(
        { length: 10 },
        () =>
          exec(
            server,
            'echo "home=$HOME uid=$(id -u)"; read x; ls -d "$HOME" "$TMPDIR" >/dev/null && echo ok',
            {
              tty: false,
              until: "uid=\\d+\\n",
              yield_time_ms: 10000,
            },
          ),
      ),
    );
    const homes = new Set(started.map((r) => /^home=(\S+) /.exec(r.output)?.[1]));
    const uids = new Set(started.map((r) => /uid=(\d+)\n$/.exec(r.output)?.[1]));
    assert.equal(homes.size, 10, [...homes].join(" "));
    assert.equal(uids.size, 10, [...uids].join(" "));
    // One at a time, so each ending session could only take others' directories with it.
    for (const r of started) {
      const w = await server.post("/v1/write_stdin", {
        session_id: r.session_id,
        chars: "\n",
        yield_time_ms: 10000,
      });
      assert.equal(w.status, 200);
      assert.equal(w.body.output, "ok\n");
      assert.equal(w.body.exit_code, 0);
    }
  } finally {
    await server.stop();
  }
});

const WHO_AM_I = [
  "echo uid=$(id -u)",
  "echo name=$(id -un)",
  "echo group=$(id -gn)",
  "echo whoami=$(whoami)",
  "echo user=$USER/$LOGNAME",
  "echo home=$HOME",
  "echo pwhome=$(getent passwd $(id -u) | cut -d: -f6)",
  `echo python=$(python3 -c 'import os, pwd; print(pwd.getpwuid(os.getuid()).pw_name)')`,
  `echo node=$(node -e 'console.log(require("os").userInfo().username)')`,
  'touch "$HOME/f" && echo owner=$(stat -c %U:%G "$HOME/f")',
  "(echo intruder::0:0::/:/bin/sh >> /etc/passwd) 2>/dev/null; echo append=$?",
].join("; ");

Deno.test("each session's uid has a name and its HOME in the account database its commands see", async () => {
  const hostPasswd = await Deno.readFile("/etc/passwd");
  const server = await startServer();
  try {
    const a = await holder(server, WHO_AM_I);
    const b = await holder(server, WHO_AM_I);
    for (const { fields } of [a, b]) {
      const name = `uexec-${fields.uid}`;
      assert.deepEqual(fields, {
        uid: fields.uid,
        name,
        group: "uexec",
        whoami: name,
        user: `${name}/${name}`,
        home: fields.home,
        pwhome: fields.home,
        python: name,
        node: name,
        owner: `${name}:uexec`,
        append: "1",
      });
    }
    assert.notEqual(a.fields.uid, b.fields.uid);
    assert.notEqual(a.fields.home, b.fields.home);
    // A's entry goes with it; B's stays where it was, for B and for later sessions.
    assert.equal((await server.del(`/v1/sessions/${a.id}`)).status, 200);
    const after = await exec(
      server,
      `getent passwd ${a.fields.uid}; echo a=$?; getent passwd ${b.fields.uid} | cut -d: -f1,6`,
    );
    assert.equal(after.output, `a=2\r\nuexec-${b.fields.uid}:${b.fields.home}\r\n`);
  } finally {
    await server.stop();
  }
  assert.deepEqual(await Deno.readFile("/etc/passwd"), hostPasswd, "the host's file is untouched");
});

Deno.test("a login shell keeps the PATH its session started with, though /etc/profile resets it", async () => {
  const bin = await Deno.makeTempDir({ prefix: "uexec-bin-" });
  const agentBin = await Deno.makeTempDir({ prefix: "uexec-agent-bin-" });
  for (const [dir, tool] of [[bin, "server-tool"], [agentBin, "agent-tool"]]) {
    await Deno.chmod(dir, 0o755);
    await Deno.writeTextFile(`${dir}/${tool}`, `#!/bin/sh\necho ${tool} ran\n`, { mode: 0o755 });
  }
  const path = `${bin}:/usr/local/bin:/usr/bin:/bin`;
  const server = await startServer({ PATH: path });
  try {
    for (const shell of ["/bin/bash", "/bin/sh"]) {
      const r = await exec(server, 'server-tool; echo "$PATH"; echo "${UEXEC_LOGIN_PATH-unset}"', {
        shell,
        login: true,
      });
      // The PATH it started with comes first; what /etc/profile set follows, once each.
      const [ran, after, leftover] = r.output.split("\r\n");
      assert.equal(ran, "server-tool ran", `${shell}: ${r.output}`);
      assert.ok(after.startsWith(`${path}:`), after);
      const dirs = after.split(":");
      assert.equal(new Set(dirs).size, dirs.length, after);
      assert.equal(leftover, "unset");
    }
    const agent = await exec(server, "agent-tool", {
      login: true,
      env: { PATH: `${agentBin}:/usr/bin:/bin` },
    });
    assert.equal(agent.output, "agent-tool ran\r\n");
  } finally {
    await server.stop();
    await Deno.remove(bin, { recursive: true });
    await Deno.remove(agentBin, { recursive: true });
  }
});

/** Whether process `pid` exits (or has exited) within `seconds`, watched through a pidfd. */
async function exitsWithin(pid: number, seconds: number): Promise<boolean> {
  const script = "import os, select, sys\n" +
    `print(bool(select.select([os.pidfd_open(${pid})], [], [], ${seconds})[0]))`;
  const out = await new Deno.Command("python3", { args: ["-c", script] }).output();
  return new TextDecoder().decode(out.stdout) === "True\n";
}

Deno.test("a uid is handed out again only after what its last session left is killed", async () => {
  // One session uid: the next session must reuse it.
  const spawner = 1900000000 + (Deno.pid % 100000) * 2;
  const server = await startServer({ UEXEC_UID_RANGE: `${spawner}-${spawner + 1}` });
  try {
    const first = await exec(
      server,
      "setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $! $(id -u)",
      {
        tty: false,
      },
    );
    assert.equal(first.exit_code, 0);
    const [pid, uid] = first.output.trim().split(" ").map(Number);
    assert.equal(uid, spawner + 1);
    // $! is the daemon the session left behind, running as the session's uid.
    const status = await Deno.readTextFile(`/proc/${pid}/status`);
    assert.match(status, new RegExp(`^Uid:\\t${uid}\\t`, "m"));
    const second = await exec(server, "id -u", { tty: false });
    assert.equal(second.output, `${uid}\n`);
    assert.equal(await exitsWithin(pid, 10), true, "the daemon survived the uid's reuse");
  } finally {
    await server.stop();
  }
});

Deno.test("a uid range that holds existing users is refused before anything runs", async () => {
  const users = (await Deno.readTextFile("/etc/passwd")).split("\n")
    .map((line) => line.split(":"))
    .filter((f) => Number(f[2]) >= 1 && Number(f[2]) <= 100)
    .slice(0, 3)
    .map((f) => `${f[0]} (${f[2]})`);
  assert.ok(users.length > 0, "needs a user with a uid in 1..100 in /etc/passwd");
  const server = await startServer({ UEXEC_UID_RANGE: "1-100" });
  try {
    const marker = `${server.workspace}/ran`;
    const r = await server.post("/v1/exec_command", { cmd: `touch ${marker}`, login: false });
    assert.equal(r.status, 500);
    assert.deepEqual(r.body.error, {
      code: "sandbox_unavailable",
      message: `UEXEC_UID_RANGE=1-100 overlaps existing users: ${users.join(", ")}`,
    });
    await assert.rejects(Deno.stat(marker), Deno.errors.NotFound);
  } finally {
    await server.stop();
  }
});

Deno.test("two servers never share session uids: an overlapping range is refused", async () => {
  // Explicit ranges outside the default pool, apart from any other test run's on this host.
  const base = 2_200_000_000 + (Deno.pid % 100_000) * 300;
  const first = await startServer({ UEXEC_UID_RANGE: `${base}-${base + 100}` });
  const second = await startServer({ UEXEC_UID_RANGE: `${base + 50}-${base + 200}` });
  try {
    const live = await first.post("/v1/exec_command", {
      cmd: "cat",
      login: false,
      yield_time_ms: 250,
    });
    assert.equal(typeof live.body.session_id, "number", JSON.stringify(live.body));
    const refused = await second.post("/v1/exec_command", { cmd: "id -u", login: false });
    assert.equal(refused.status, 500);
    assert.deepEqual(refused.body.error, {
      code: "sandbox_unavailable",
      message: `sandbox uids ${base + 50}-${base + 200} overlap ${base}-${base + 100}, which ` +
        "another uexec server on this host uses; give each server its own UEXEC_UID_RANGE",
    });
    const echo = await first.post("/v1/write_stdin", {
      session_id: live.body.session_id,
      chars: "still here\n",
      until: "still here\\r\\n.*still here",
    });
    assert.equal(echo.body.output, "still here\r\nstill here\r\n");
  } finally {
    await second.stop();
    await first.stop();
  }
});

Deno.test("servers without a range lease distinct blocks of the default pool and run side by side", async () => {
  const first = await startServer();
  const second = await startServer();
  try {
    assert.notEqual(first.uids.first, second.uids.first);
    for (const server of [first, second]) {
      const { first: low, last: high, gid } = server.uids;
      // A block of 65,536 ids: the first rests the spawners and is the group, the rest are sessions'.
      assert.equal(high - low, 65_534);
      assert.equal(gid, low - 1);
      assert.equal((low - 1 - 2_000_000_000) % 65_536, 0);
    }
    const [a, b] = await Promise.all([first, second].map((s) => exec(s, "id -u", { tty: false })));
    const uidA = Number(a.output);
    const uidB = Number(b.output);
    assert.ok(uidA >= first.uids.first && uidA <= first.uids.last, a.output);
    assert.ok(uidB >= second.uids.first && uidB <= second.uids.last, b.output);
  } finally {
    await second.stop();
    await first.stop();
  }
});
