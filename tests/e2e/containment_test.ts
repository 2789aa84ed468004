/**
 * Containment (issue 11): every session in a cgroup of its own, so that nothing it starts
 * outlives it, whatever it did with sessions or process groups; limits and usage of its whole
 * tree; and what a killed server left is killed by the next one.
 *
 * @module
 */

import assert from "node:assert/strict";
import { KEPT } from "../../src/sandbox/containment/cgroups.ts";
import { removeDirs } from "../../src/sandbox/containment/cgroup_fs.ts";
import { cgroupRoot, v1Own } from "../../src/sandbox/containment/hierarchy.ts";
import { screenCpuDir } from "../../src/sandbox/containment/screen_cpu.ts";
import { instanceName } from "../../src/sandbox/instance.ts";
import { limitFiles, limitLeaving, openFiles } from "../helpers/descriptors.ts";
import { exists } from "../helpers/fs.ts";
import { type Client, startServer } from "../helpers/server.ts";
import { connectSse } from "../helpers/sse.ts";
import { alive } from "../helpers/procs.ts";

/** Whether process `pid` exits (or has exited) within `seconds`, watched through a pidfd. */
async function exitsWithin(pid: number, seconds: number): Promise<boolean> {
  const script = "import os, select, sys\n" +
    `print(bool(select.select([os.pidfd_open(${pid})], [], [], ${seconds})[0]))`;
  const out = await new Deno.Command("python3", { args: ["-c", script] }).output();
  return new TextDecoder().decode(out.stdout) === "True\n";
}

/** Start a command that leaves a `setsid` daemon behind; returns the session and the daemon. */
async function withDaemon(server: Client, extra: Record<string, unknown> = {}) {
  const r = await server.post("/v1/exec_command", {
    cmd: "setsid sleep 1003 </dev/null >/dev/null 2>&1 & echo daemon=$!; read x",
    login: false,
    tty: false,
    until: "daemon=\\d+\\n",
    ...extra,
  });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const daemon = Number(/daemon=(\d+)/.exec(r.body.output)![1]);
  assert.ok(alive(daemon));
  return { id: r.body.session_id as number, daemon };
}

Deno.test("a setsid daemon does not survive DELETE of its session", async () => {
  for (const profile of ["workspace-write", "full-access"]) {
    const server = await startServer({ UEXEC_PROFILE: profile });
    try {
      // bash runs behind a wrapper that waits at the gate; dash waits at it itself.
      for (const shell of ["/bin/bash", "/bin/sh"]) {
        const { id, daemon } = await withDaemon(server, { shell });
        const killed = await server.del(`/v1/sessions/${id}`);
        assert.equal(killed.status, 200);
        assert.equal(alive(daemon), false, `${profile}, ${shell}: daemon ${daemon} survived`);
      }
    } finally {
      await server.stop();
    }
  }
});

Deno.test("with no descriptor free, DELETE still kills the whole session: the reserve pays", async () => {
  const server = await startServer();
  try {
    const { id, daemon } = await withDaemon(server);
    // No number free below the limit: reading who is in the cgroup, and cgroup.kill, need one
    // each. (Without the reserve, neither happened and DELETE waited for the command to end.)
    await limitFiles(server.pid, limitLeaving(openFiles(server.pid), 0, () => true));
    let timer: ReturnType<typeof setTimeout> | undefined;
    const hung = new Promise<"hung">((r) => timer = setTimeout(() => r("hung"), 60_000));
    const killed = await Promise.race([server.del(`/v1/sessions/${id}`), hung]);
    clearTimeout(timer);
    assert.notEqual(killed, "hung", "DELETE did not answer within a minute");
    assert.equal(killed !== "hung" && killed.status, 200);
    assert.equal(alive(daemon), false, `daemon ${daemon} survived`);
  } finally {
    await server.stop();
  }
});

Deno.test("a dash command is in its cgroup and under its limits from its first line", async () => {
  for (const profile of ["workspace-write", "full-access"]) {
    const server = await startServer({ UEXEC_PROFILE: profile });
    try {
      const health = await server.get("/healthz");
      const r = await server.post("/v1/exec_command", {
        cmd: 'echo "$0 $#"; ulimit -p; grep "^0::" /proc/$$/cgroup; echo "fd3:$(ls /proc/$$/fd)"',
        shell: "/bin/sh",
        login: false,
        tty: false,
      });
      assert.equal(r.body.exit_code, 0, JSON.stringify(r.body));
      const [first, pids, v2, fds] = r.body.output.split("\n");
      // What the command sees is what it asked for: its shell's name, no arguments.
      assert.equal(first, "/bin/sh 0");
      if (profile === "workspace-write") assert.equal(pids, "1024");
      assert.ok(health.body.cgroup.endsWith(v2.slice(3, v2.lastIndexOf("/"))), v2);
      assert.doesNotMatch(fds, /\b3\b/, "the gate's descriptor is closed before the command");
    } finally {
      await server.stop();
    }
  }
});

Deno.test("the loader's variables act only on the command, after the gate and the limits", async () => {
  const server = await startServer({ UEXEC_PROFILE: "workspace-write" });
  try {
    for (const shell of ["/bin/bash", "/bin/sh"]) {
      const out = `${server.workspace}/ld-${shell.slice(shell.lastIndexOf("/") + 1)}`;
      const r = await server.post("/v1/exec_command", {
        cmd: 'echo "$LD_DEBUG $GCONV_PATH"',
        shell,
        login: false,
        tty: false,
        env: { LD_DEBUG: "files", LD_DEBUG_OUTPUT: out, GCONV_PATH: "/nowhere" },
      });
      assert.equal(r.body.output, "files /nowhere\n", JSON.stringify(r.body));
      // ld.so wrote one file per process it started: only the command's shell, never dash
      // as the wrapper that gates and limits it (it could have loaded LD_PRELOAD's code).
      const logs = [];
      for await (const e of Deno.readDir(server.workspace)) {
        if (e.name.startsWith(out.slice(out.lastIndexOf("/") + 1) + ".")) {
          logs.push(await Deno.readTextFile(`${server.workspace}/${e.name}`));
        }
      }
      assert.equal(logs.length, 1, `${shell}: ${logs.length} programs loaded under LD_DEBUG`);
      assert.match(logs[0], new RegExp(`needed by ${shell} `));
      assert.doesNotMatch(logs[0], /needed by \/bin\/dash /);
    }
  } finally {
    await server.stop();
  }
});

Deno.test("what a session leaves behind dies with it: exit, double fork, timeout", async () => {
  const server = await startServer();
  try {
    const exited = await server.post("/v1/exec_command", {
      cmd: "setsid sleep 1004 </dev/null >/dev/null 2>&1 & echo daemon=$!",
      login: false,
      tty: false,
    });
    assert.equal(exited.body.exit_code, 0);
    const daemon = Number(/daemon=(\d+)/.exec(exited.body.output)![1]);
    assert.equal(await exitsWithin(daemon, 20), true, "the daemon outlived its session's exit");

    const { id, daemon: orphan } = await withDaemon(server, {
      cmd: "(setsid sh -c 'sleep 1005 </dev/null >/dev/null 2>&1 & echo daemon=$!' &); read x",
    });
    assert.equal((await server.del(`/v1/sessions/${id}`)).status, 200);
    assert.equal(alive(orphan), false, "a double-forked daemon survived DELETE");

    const timed = await withDaemon(server, { timeout_ms: 300 });
    assert.equal(await exitsWithin(timed.daemon, 20), true, "the daemon outlived timeout_ms");
  } finally {
    await server.stop();
  }
});

Deno.test("shutdown kills every session's daemons", async () => {
  const server = await startServer();
  let daemon = 0;
  try {
    daemon = (await withDaemon(server)).daemon;
  } finally {
    await server.stop();
  }
  assert.equal(alive(daemon), false, "a daemon survived the server's shutdown");
});

Deno.test("a shutdown past its time limit still kills what every session runs", async () => {
  // A child that ignores the polite signals, so that only the last resort's SIGKILL ends it:
  // with cgroups even one that left its process session; with process groups (which a setsid
  // escapes by design) one in its session's group.
  for (
    const [containment, spawn] of [
      ["cgroup", "setsid sh -c \"trap '' HUP TERM; exec sleep 1009\""],
      ["process-group", "sh -c \"trap '' HUP TERM; exec sleep 1009\""],
    ]
  ) {
    const server = await startServer(
      { UEXEC_CONTAINMENT: containment },
      [],
      undefined,
      "tests/fixtures/short_shutdown/main.ts",
    );
    let stopped = false;
    try {
      const r = await server.post("/v1/exec_command", {
        cmd: `${spawn} </dev/null >/dev/null 2>&1 & echo daemon=$!; read x`,
        login: false,
        tty: false,
        until: "daemon=\\d+\\n",
      });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      const daemon = Number(/daemon=(\d+)/.exec(r.body.output)![1]);
      assert.ok(alive(daemon));
      const { code, stderr } = await server.stop();
      stopped = true;
      assert.equal(code, 1);
      assert.match(stderr, /shutdown took over 1 ms; killing what every session runs now/);
      assert.equal(await exitsWithin(daemon, 20), true, `${containment}: ${daemon} survived`);
    } finally {
      if (!stopped) await server.stop();
    }
  }
});

/**
 * A cgroup v2 directory and a temporary directory of the test's own, for servers whose dead
 * instance only the next of them may reap: every server reaps dead instances beneath its cgroup
 * root and its TMPDIR, so another server on the host starting meanwhile (a quick-start server,
 * another suite) could otherwise reap it first, and the log lines asserted would be its.
 */
async function privateRoots(): Promise<{ env: Record<string, string>; remove(): void }> {
  const hierarchy = cgroupRoot(undefined);
  assert.ok(hierarchy, "no writable cgroup v2 hierarchy");
  const cgroup = `${hierarchy}/uexec-test-${crypto.randomUUID()}`;
  Deno.mkdirSync(cgroup);
  // Sessions pass through TMPDIR to their HOME: searchable by their uids.
  const tmp = await Deno.makeTempDir({ prefix: "uexec-tmp-" });
  Deno.chmodSync(tmp, 0o755);
  return {
    env: { UEXEC_CGROUP_ROOT: cgroup, TMPDIR: tmp },
    remove() {
      removeDirs([cgroup]);
      Deno.removeSync(tmp, { recursive: true });
    },
  };
}

Deno.test("after kill -9 of the server, the next one kills what its sessions left and removes their files", async () => {
  const roots = await privateRoots();
  try {
    await killedServerIsReaped(roots.env);
  } finally {
    roots.remove();
  }
  assert.equal(exists(roots.env.UEXEC_CGROUP_ROOT), false);
});

async function killedServerIsReaped(env: Record<string, string>): Promise<void> {
  const first = await startServer({ ...env, UEXEC_PROFILE: "workspace-write" });
  let daemon = 0;
  let instanceDir = "";
  try {
    daemon = (await withDaemon(first)).daemon;
    // A session's HOME is in its domain's directory, in the instance's. (Asked of a shell: the
    // daemon's /proc environ reads empty while it is still being exec'd.)
    const home = await first.post("/v1/exec_command", {
      cmd: "echo HOME=$HOME",
      login: false,
      tty: false,
    });
    const found = /^HOME=(.*\/uexec-i\d+-\d+)\/domain-[^/]+\//.exec(home.body.output);
    assert.ok(found, JSON.stringify(home.body));
    instanceDir = found[1];
    Deno.kill(first.pid, "SIGKILL");
  } finally {
    await first.stop();
  }
  assert.equal(alive(daemon), true, "the daemon should still run after the crash");
  assert.ok(exists(instanceDir), `${instanceDir} should be left after the crash`);
  const second = await startServer(env);
  try {
    // The dead instance's cgroups are gone by the time the new server listens.
    assert.equal(alive(daemon), false, "the next server left the dead instance's daemon");
    const health = await second.get("/healthz");
    assert.equal(health.body.containment, "cgroup");
  } finally {
    const { stderr } = await second.stop();
    // Its one session's cgroup held something (the cgroups it had made ahead were empty).
    assert.match(stderr, /"msg":"dead_instance_reaped".*"cgroups":1\b/);
    // Its directories (sessions' HOMEs) go too, removed while the next server runs.
    assert.match(stderr, /"msg":"dead_instance_dirs_removed".*"directories":\d+/);
    assert.equal(exists(instanceDir), false, `${instanceDir} was left`);
  }
}

Deno.test({
  name:
    "the screen worker's cpu cgroup: its thread alone, at the lowest weight, gone with the server",
  ignore: v1Own("cpu") === undefined,
  async fn() {
    const dirOf = async (server: Client) => {
      const health = await server.get("/healthz");
      const instance = /\/(i\d+-\d+)$/.exec(health.body.cgroup)![1];
      return screenCpuDir(v1Own("cpu")!, instance);
    };
    const first = await startServer();
    let dir = "";
    try {
      dir = await dirOf(first);
      assert.equal(Deno.readTextFileSync(`${dir}/cpu.shares`).trim(), "2");
      // The worker said its thread before this snapshot's answer.
      const r = await first.post("/v1/exec_command", {
        cmd: "echo hi",
        login: false,
        output_mode: "screen",
      });
      assert.equal(r.body.exit_code, 0, JSON.stringify(r.body));
      // The worker's thread, and what it started since (its runtime's threads) beside it.
      const tasks = Deno.readTextFileSync(`${dir}/tasks`).trim().split("\n").map(Number);
      const comm = (tid: number) => Deno.readTextFileSync(`/proc/${first.pid}/task/${tid}/comm`);
      assert.ok(!tasks.includes(first.pid), "not the main thread");
      assert.equal(tasks.map(comm).filter((c) => c.startsWith("worker-")).length, 1);
      assert.equal(Deno.readTextFileSync(`${dir}/cpu.shares`).trim(), "2", "no call waits now");
      Deno.kill(first.pid, "SIGKILL");
    } finally {
      await first.stop();
    }
    assert.ok(exists(dir), "left by the crash");
    const second = await startServer();
    let next = "";
    try {
      assert.equal(exists(dir), false, "the next server removed the dead instance's");
      next = await dirOf(second);
      assert.ok(exists(next));
    } finally {
      await second.stop();
    }
    assert.equal(exists(next), false, "removed at shutdown");
  },
});

Deno.test("usage of the whole tree and the limits in force are reported", async () => {
  const server = await startServer();
  try {
    const health = await server.get("/healthz");
    assert.equal(health.body.containment, "cgroup");
    assert.match(health.body.cgroup, /\/uexec\/i\d+-\d+$/);
    assert.deepEqual(Object.keys(health.body.limits).sort(), ["cpu", "memory", "pids"]);

    const events = await connectSse(`${server.url}/v1/events`, server.auth);
    const cmd = "python3 -c 'import time\nb = bytearray(64 << 20)\nt = time.process_time()\n" +
      "while time.process_time() - t < 0.3: pass'";
    const r = await server.post("/v1/exec_command", { cmd, login: false, tty: false });
    assert.equal(r.body.exit_code, 0, JSON.stringify(r.body));
    assert.ok(r.body.usage.cpu_seconds > 0.1, JSON.stringify(r.body.usage));
    if (health.body.limits.memory !== "rlimit") {
      assert.ok(r.body.usage.peak_memory_bytes > 64 << 20, JSON.stringify(r.body.usage));
    }
    const got = await events.until((evs) => evs.some((e) => e.event === "end"));
    await events.close();
    assert.deepEqual(got.find((e) => e.event === "end")!.data.usage, r.body.usage);
    const [row] = (await server.get("/v1/history")).body.items;
    assert.equal(row.command, cmd);
    // The history keeps milliseconds: equal up to floating-point rounding.
    assert.ok(Math.abs(row.usage.cpu_seconds - r.body.usage.cpu_seconds) < 1e-9, row.usage);
    assert.equal(row.usage.peak_memory_bytes, r.body.usage.peak_memory_bytes);

    // The session's leader is in its own cgroup, with the profile's process limit.
    const live = await withDaemon(server);
    const leader = (await server.get(`/v1/sessions/${live.id}`)).body.pid;
    const cgroups = await Deno.readTextFile(`/proc/${leader}/cgroup`);
    const v2 = /^0::(.*)$/m.exec(cgroups)![1];
    assert.ok(health.body.cgroup.endsWith(v2.slice(0, v2.lastIndexOf("/"))), cgroups);
    const daemonCgroups = await Deno.readTextFile(`/proc/${live.daemon}/cgroup`);
    assert.equal(daemonCgroups, cgroups);
    if (health.body.limits.pids === "cgroup-v1") {
      const path = /^\d+:pids:(.*)$/m.exec(cgroups)![1];
      assert.equal((await Deno.readTextFile(`/sys/fs/cgroup/pids${path}/pids.max`)).trim(), "1024");
    }
    await server.del(`/v1/sessions/${live.id}`);

    // A sandboxed command cannot move itself out of its cgroup (root-owned files, no caps).
    const parent = health.body.cgroup.slice(0, health.body.cgroup.lastIndexOf("/"));
    const escape = await server.post("/v1/exec_command", {
      cmd: `echo $$ > ${parent}/cgroup.procs && echo moved`,
      login: false,
      tty: false,
    });
    assert.notEqual(escape.body.exit_code, 0, JSON.stringify(escape.body));
    assert.doesNotMatch(escape.body.output, /moved/);

    // Nor raise its own process limit or make a cgroup beneath its own.
    const root = health.body.cgroup.slice(0, health.body.cgroup.indexOf("/uexec/"));
    // It stays alive (cat) while its limit is read: an ended session's cgroups go at once.
    const tamper = await server.post("/v1/exec_command", {
      cmd: `own=${root}$(${PRINT_CGROUP} | cut -c4-); ` +
        "pids=/sys/fs/cgroup/pids$(grep ':pids:' /proc/$$/cgroup | cut -d: -f3); " +
        "echo $own $pids; echo max > $pids/pids.max && echo raised; mkdir $own/sub && echo made; " +
        "echo tried; exec cat",
      login: false,
      tty: false,
      until: "tried",
    });
    assert.equal(typeof tamper.body.session_id, "number", JSON.stringify(tamper.body));
    const [own, pids] = tamper.body.output.split("\n")[0].split(" ");
    assert.match(own, /\/uexec\/i\d+-\d+\/s\d+$/, tamper.body.output);
    assert.doesNotMatch(tamper.body.output, /raised|made/);
    assert.equal(exists(`${own}/sub`), false);
    if (health.body.limits.pids === "cgroup-v1") {
      assert.equal((await Deno.readTextFile(`${pids}/pids.max`)).trim(), "1024");
    }
    await server.del(`/v1/sessions/${tamper.body.session_id}`);
  } finally {
    await server.stop();
  }
});

/** A profiles directory whose unsandboxed profile has `limits` (only a cgroup can apply them). */
async function limitedProfiles(limits: Record<string, number>): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "uexec-profiles-" });
  const shipped = new URL("../../sandbox-profiles/", import.meta.url).pathname;
  for await (const entry of Deno.readDir(shipped)) {
    const profile = JSON.parse(await Deno.readTextFile(shipped + entry.name));
    if (entry.name === "full-access.json") profile.limits = limits;
    await Deno.writeTextFile(`${dir}/${entry.name}`, JSON.stringify(profile));
  }
  return dir;
}

Deno.test("a fork bomb and a memory hog hit their session's limits; the rest answers", async () => {
  const profiles = await limitedProfiles({
    max_processes: 32,
    address_space_bytes: 256 << 20,
  });
  const server = await startServer({ UEXEC_PROFILES_DIR: profiles, UEXEC_PROFILE: "full-access" });
  try {
    // Root ignores RLIMIT_NPROC: only the session's pids limit stops it (bounded at 200).
    const bomb = await server.post("/v1/exec_command", {
      cmd: "python3 -c 'import os, time\nn = 0\ntry:\n  for i in range(200):\n" +
        "    if os.fork() == 0:\n      time.sleep(1000)\n    n += 1\n" +
        'except OSError as e:\n  print("forked", n, e.errno, flush=True)\ntime.sleep(1000)\'',
      login: false,
      tty: false,
      until: "forked \\d+ \\d+",
    });
    assert.equal(bomb.status, 200, JSON.stringify(bomb.body));
    const [forked, code] = /forked (\d+) (\d+)/.exec(bomb.body.output)!.slice(1).map(Number);
    assert.equal(code, 11, "fork failed with EAGAIN");
    assert.ok(forked < 32, `forked ${forked}`);
    const other = await server.post("/v1/exec_command", { cmd: "echo fine", login: false });
    assert.equal(other.body.output, "fine\r\n");
    assert.equal((await server.get("/healthz")).status, 200);
    assert.equal((await server.del(`/v1/sessions/${bomb.body.session_id}`)).status, 200);

    // A tree that allocates more than the limit in all is killed inside its own cgroup.
    const hog = await server.post("/v1/exec_command", {
      cmd: "python3 -c 'b = bytearray(512 << 20); print(\"allocated\")'",
      login: false,
      tty: false,
    });
    assert.equal(hog.body.exit_code, 128 + 9, JSON.stringify(hog.body));
    assert.doesNotMatch(hog.body.output, /allocated/);
    const after = await server.post("/v1/exec_command", { cmd: "echo alive", login: false });
    assert.equal(after.body.output, "alive\r\n");
  } finally {
    await server.stop();
    await Deno.remove(profiles, { recursive: true });
  }
});

Deno.test("pruning and revoking an agent kill their sessions' daemons", async () => {
  const server = await startServer({ UEXEC_MAX_SESSIONS: "9" });
  try {
    // Nine live sessions; the tenth prunes the least recently used (never one of the last 8).
    const first = await withDaemon(server);
    for (let i = 0; i < 8; i++) await withDaemon(server);
    const tenth = await withDaemon(server);
    assert.equal((await server.get(`/v1/sessions/${first.id}`)).status, 404);
    assert.equal(alive(first.daemon), false, "the pruned session's daemon survived");
    assert.equal(alive(tenth.daemon), true);

    const minted = await server.operator.post("/v1/agents", { name: "agent-b" });
    assert.equal(minted.status, 201);
    const b = await withDaemon(server.as(minted.body.token));
    assert.equal((await server.operator.del("/v1/agents/agent-b")).status, 200);
    assert.equal(alive(b.daemon), false, "a revoked agent's daemon survived");
  } finally {
    await server.stop();
  }
});

/** The v2 cgroup of the command's shell, as the command prints it first. */
const PRINT_CGROUP = "grep '^0::' /proc/$$/cgroup";

Deno.test("a session cgroup used again reports only its new session's usage", async () => {
  const server = await startServer();
  try {
    const { limits } = (await server.get("/healthz")).body;
    // Much CPU and memory (64 MiB of string in mawk), little page cache left behind.
    const heavy = await server.post("/v1/exec_command", {
      cmd: `${PRINT_CGROUP}; awk 'BEGIN { s = "x"; for (i = 0; i < 26; i++) s = s s; ` +
        "for (i = 0; i < 6000000; i++) t += i }'",
      login: false,
      tty: false,
    });
    assert.equal(heavy.body.exit_code, 0, JSON.stringify(heavy.body));
    assert.ok(heavy.body.usage.cpu_seconds > 0.1, JSON.stringify(heavy.body.usage));
    if (limits.memory !== "rlimit") {
      assert.ok(heavy.body.usage.peak_memory_bytes > 64 << 20, JSON.stringify(heavy.body.usage));
    }
    // Spares are taken oldest first: the heavy one's cgroup comes round within KEPT starts.
    let reused: Record<string, { cpu_seconds: number; peak_memory_bytes: number }> | undefined;
    for (let i = 0; i < 2 * KEPT && !reused; i++) {
      const light = await server.post("/v1/exec_command", {
        cmd: PRINT_CGROUP,
        login: false,
        tty: false,
      });
      assert.equal(light.body.exit_code, 0, JSON.stringify(light.body));
      if (light.body.output === heavy.body.output.split("\n")[0] + "\n") reused = light.body;
    }
    assert.ok(reused, `no later session was given ${heavy.body.output.split("\n")[0]}`);
    assert.ok(reused.usage.cpu_seconds < 0.05, JSON.stringify(reused.usage));
    if (limits.memory !== "rlimit") {
      assert.ok(reused.usage.peak_memory_bytes < 16 << 20, JSON.stringify(reused.usage));
    }
  } finally {
    await server.stop();
  }
});

Deno.test("an agent's emptied cgroup goes only to a later session of the same agent", async () => {
  const server = await startServer();
  try {
    const cgroupOf = async (client: Client) => {
      const r = await client.post("/v1/exec_command", {
        cmd: PRINT_CGROUP,
        login: false,
        tty: false,
      });
      assert.equal(r.body.exit_code, 0, JSON.stringify(r.body));
      return r.body.output as string;
    };
    const minted = await server.operator.post("/v1/agents", { name: "agent-b" });
    assert.equal(minted.status, 201);
    const b = server.as(minted.body.token);
    // What the default agent's command read stays charged to its cgroup (page cache): another
    // agent must never start in it. Spares are taken oldest first, so on a shared pool B would
    // be given it within KEPT starts.
    const mine = await cgroupOf(server);
    const bs = new Set<string>();
    for (let i = 0; i < 2 * KEPT; i++) bs.add(await cgroupOf(b));
    assert.equal(bs.has(mine), false, `agent-b was given ${mine}`);
    let again = false;
    for (let i = 0; i < 2 * KEPT && !again; i++) again = await cgroupOf(server) === mine;
    assert.ok(again, `the default agent was never given ${mine} again`);
    // Revoked and minted again under the same name, it is another party: none of the old one's.
    assert.equal((await server.operator.del("/v1/agents/agent-b")).status, 200);
    const again2 = await server.operator.post("/v1/agents", { name: "agent-b" });
    assert.equal(again2.status, 201);
    for (let i = 0; i < 2 * KEPT; i++) {
      const got = await cgroupOf(server.as(again2.body.token));
      assert.equal(bs.has(got), false, `the new agent-b was given the old one's ${got}`);
    }
  } finally {
    await server.stop();
  }
});

Deno.test("a cgroup a command makes in its session's is killed and removed with it", async () => {
  const server = await startServer({ UEXEC_PROFILE: "full-access" });
  const instance = (await server.get("/healthz")).body.cgroup as string;
  const root = instance.slice(0, instance.indexOf("/uexec/"));
  let stopped = false;
  try {
    // As root (unsandboxed), it may: a daemon moved into a cgroup beneath its session's.
    const r = await server.post("/v1/exec_command", {
      cmd: `own=${root}$(${PRINT_CGROUP} | cut -c4-); mkdir $own/sub; echo $own; ` +
        'mkfifo f$$; setsid sh -c "echo \\$\\$ > $own/sub/cgroup.procs; echo \\$\\$ > f$$; ' +
        'exec sleep 1006" </dev/null >/dev/null 2>&1 & read d < f$$; rm f$$; echo daemon=$d',
      login: false,
      tty: false,
    });
    assert.equal(r.body.exit_code, 0, JSON.stringify(r.body));
    const [own, daemonLine] = r.body.output.trim().split("\n");
    const daemon = Number(daemonLine.slice("daemon=".length));
    assert.equal(await exitsWithin(daemon, 20), true, "the daemon in the sub-cgroup survived");
    // Its cgroup, with a cgroup in it, is never given to another session.
    for (let i = 0; i < 2 * KEPT; i++) {
      const next = await server.post("/v1/exec_command", {
        cmd: PRINT_CGROUP,
        login: false,
        tty: false,
      });
      assert.notEqual(`${root}${next.body.output.trim().slice(3)}`, own);
    }
    const { code } = await server.stop();
    stopped = true;
    assert.equal(code, 0);
    assert.equal(exists(own), false, `${own} is left`);
    assert.equal(exists(instance), false, `${instance} is left`);
  } finally {
    if (!stopped) await server.stop();
  }
});

Deno.test({
  name:
    "a killed server's v1 cgroups are removed by the next one even when it ran in another cgroup",
  ignore: v1Own("memory") === undefined || Deno.uid() !== 0,
  fn: async () => {
    // The first server runs in a v1 memory (and pids) cgroup of this test's own, beneath ours, as
    // a server started from another login session or service would: its instance directories
    // are beneath that cgroup, where the next server, started from ours, does not look.
    const own = (["memory", "pids"] as const).map((c) => v1Own(c)).filter((d) => d !== undefined);
    const name = `uexec-test-${crypto.randomUUID().slice(0, 8)}`;
    const homes = own.map((d) => `${d}/${name}`);
    for (const h of homes) Deno.mkdirSync(h);
    const enter = homes.map((h) => `echo $$ > ${h}/cgroup.procs`).join(" && ");
    try {
      const first = await startServer({}, [], undefined, "main.ts", [
        "sh",
        "-c",
        `${enter} && exec "$@"`,
        "sh",
      ]);
      let left: string[] = [];
      try {
        const r = await first.post("/v1/exec_command", {
          cmd: "sleep 1000",
          login: false,
          tty: false,
          yield_time_ms: 100,
        });
        assert.ok(r.body.session_id, JSON.stringify(r.body));
        left = homes.map((h) => `${h}/uexec/${instanceName(first.pid)}`);
        for (const d of left) assert.ok(exists(d), `${d} should hold the first server's sessions`);
        Deno.kill(first.pid, "SIGKILL");
      } finally {
        await first.stop();
      }
      const second = await startServer();
      try {
        // Reaped before the next server listens: nothing of the first is left in any hierarchy.
        for (const d of left) assert.equal(exists(d), false, `${d} was left`);
      } finally {
        await second.stop();
      }
    } finally {
      // Depth first, whatever a failure left (cgroup directories go with rmdir only).
      removeDirs(homes);
      for (const h of homes) assert.equal(exists(h), false, `${h} was left`);
    }
  },
});
