/**
 * A spawner worker that dies (issue 11's last fault), over a real server.
 *
 * How the worker is killed: no signal reaches one thread of a process, and the service must not
 * gain a way to kill its workers from a request. So the server under test is the real one
 * started from `tests/fixtures/spawner_death/main.ts`, which passes its spawner pool a worker
 * module of the test's (`spawner.ts` there): the real spawner, which on a spawn whose argv
 * holds the marker `DIE` starts the child (placed in its cgroup and running) and then throws an
 * uncaught error instead of answering. That is the worst moment for a worker to die: a spawn
 * in flight whose child runs but was never reported. The product's only change for this is
 * that the pool takes its workers' module as a parameter, which only code can pass.
 *
 * What must hold: sessions the dead worker started live on (children belong to the process,
 * not the thread); the spawn in flight answers 503 `spawner_failed` naming the spawner and
 * leaves no process, cgroup or session directory (so no uid) behind; the next command of the
 * same domain runs on a fresh worker, and other domains are untouched; the server stays
 * healthy, and its shutdown leaves nothing behind.
 *
 * @module
 */

import assert from "node:assert/strict";
import { KEPT } from "../../src/sandbox/containment/cgroups.ts";
import { cgroupRoot } from "../../src/sandbox/containment/hierarchy.ts";
import { DIE } from "../fixtures/spawner_death/marker.ts";
import { exists } from "../helpers/fs.ts";
import { type Reply, startServer, type TestServer } from "../helpers/server.ts";

const ENTRY = "tests/fixtures/spawner_death/main.ts";

/** The fields of /proc/<pid>/stat after the command name, or undefined once it is reaped. */
function stat(pid: number): string[] | undefined {
  try {
    const text = Deno.readTextFileSync(`/proc/${pid}/stat`);
    return text.slice(text.lastIndexOf(")") + 2).split(" ");
  } catch {
    return undefined;
  }
}

/** Every process whose parent is `parent` (zombies too: a child nobody reaped is a leak). */
function childrenOf(parent: number): number[] {
  const found: number[] = [];
  for (const entry of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    if (stat(Number(entry.name))?.[1] === String(parent)) found.push(Number(entry.name));
  }
  return found.sort((a, b) => a - b);
}

/** The cgroup v2 directory of process `pid`. */
function cgroupDir(pid: number): string {
  const line = Deno.readTextFileSync(`/proc/${pid}/cgroup`).split("\n")
    .find((l) => l.startsWith("0::"))!;
  return `${cgroupRoot(undefined)}${line.slice(3)}`;
}

/** The session directory of process `pid` (its HOME is `<dir>/home`). */
function sessionDir(pid: number): string {
  const env = Deno.readTextFileSync(`/proc/${pid}/environ`).split("\0");
  return env.find((e) => e.startsWith("HOME="))!.slice("HOME=".length).replace(/\/home$/, "");
}

/** How many terminal masters process `pid` holds open. */
function masters(pid: number): number {
  let n = 0;
  for (const fd of Deno.readDirSync(`/proc/${pid}/fd`)) {
    try {
      if (/\/ptmx$/.test(Deno.readLinkSync(`/proc/${pid}/fd/${fd.name}`))) n++;
    } catch { /* closed meanwhile */ }
  }
  return n;
}

/** Live sessions' pids, by id. */
async function livePids(server: TestServer): Promise<Map<number, number>> {
  const r = await server.get("/v1/sessions");
  assert.equal(r.status, 200);
  return new Map(r.body.sessions.map((s: { session_id: number; pid: number }) => [
    s.session_id,
    s.pid,
  ]));
}

/** POST `body` as the agent; a call not answered within 30 s kills the server and fails. */
async function answered(server: TestServer, path: string, body: unknown): Promise<Reply> {
  const res = await fetch(server.url + path, {
    method: "POST",
    headers: { "content-type": "application/json", ...server.auth },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  }).catch((err) => {
    Deno.kill(server.pid, "SIGKILL");
    throw new Error(`${path} was never answered: ${err}`);
  });
  return { status: res.status, body: await res.json() };
}

/** Start `cat` on a terminal in `profile`'s domain; returns its session id and pid. */
async function startCat(server: TestServer, profile: string) {
  const r = await server.post("/v1/exec_command", {
    cmd: "exec cat",
    login: false,
    profile,
    yield_time_ms: 250,
  });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const id = r.body.session_id as number;
  return { id, pid: (await livePids(server)).get(id)! };
}

/** Type a line into a `cat` session and read back its echo and cat's copy. */
async function echo(server: TestServer, id: number, line: string): Promise<void> {
  const r = await server.post("/v1/write_stdin", {
    session_id: id,
    chars: `${line}\n`,
    until: `${line}\\r\\n${line}\\r\\n`,
    yield_time_ms: 10_000,
  });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.output, `${line}\r\n${line}\r\n`);
}

/**
 * Resolves once `root` (a domain's directory) holds the directories of the `live` sessions and
 * one more, the spare made ahead for its next session: every other session directory, and so
 * its uid, was given back (its files, the domain's account files, do not count). Waits on the
 * directory's events; fails with what is left after 20 s.
 */
async function holdsOnly(root: string, live: string[]): Promise<void> {
  const watcher = Deno.watchFs(root, { recursive: false });
  const others = () =>
    [...Deno.readDirSync(root)].filter((e) => e.isDirectory).map((e) => `${root}/${e.name}`)
      .filter((d) => !live.includes(d));
  const limit = setTimeout(() => watcher.close(), 20_000);
  try {
    if (others().length === 1) return;
    for await (const _ of watcher) if (others().length === 1) return;
    assert.fail(`${root} still holds ${others().join(", ")} besides ${live.join(", ")}`);
  } finally {
    clearTimeout(limit);
    try {
      watcher.close();
    } catch { /* closed by the limit */ }
  }
}

/** Session cgroups of `instance` that are no live session's: at most the (empty) spares kept. */
function assertNoStrayCgroup(instance: string, live: number[]): void {
  const own = new Set(live.map(cgroupDir));
  const stray = [...Deno.readDirSync(instance)].filter((e) => /^s\d+$/.test(e.name))
    .map((e) => `${instance}/${e.name}`).filter((d) => !own.has(d));
  assert.ok(stray.length <= KEPT, `cgroups left: ${stray.join(", ")}`);
  for (const d of stray) assert.equal(Deno.readTextFileSync(`${d}/cgroup.procs`), "", d);
}

for (const containment of ["cgroup", "process-group"]) {
  Deno.test(`a spawner worker that dies mid-spawn (${containment} containment)`, async () => {
    const server = await startServer({ UEXEC_CONTAINMENT: containment }, [], undefined, ENTRY);
    const cgroups = containment === "cgroup";
    let stopped = false;
    try {
      // Sessions started before the death: one in the domain whose worker dies, one elsewhere.
      const doomed = await startCat(server, "workspace-write");
      const other = await startCat(server, "read-only");
      await echo(server, doomed.id, "before");
      const doomedCgroup = cgroups ? cgroupDir(doomed.pid) : undefined;
      const instance = doomedCgroup?.replace(/\/[^/]+$/, "");
      const doomedDir = sessionDir(doomed.pid);
      const domainDir = doomedDir.slice(0, doomedDir.lastIndexOf("/"));

      // Its worker dies with this spawn in flight (the child started, the answer never sent).
      const died = await answered(server, "/v1/exec_command", {
        cmd: `exec cat # ${DIE}`,
        login: false,
        profile: "workspace-write",
        yield_time_ms: 250,
      });
      assert.equal(died.status, 503, JSON.stringify(died.body));
      assert.equal(died.body.error.code, "spawner_failed");
      assert.match(died.body.error.message, /^the spawner worker of this command's sandbox died/);
      // Nothing of it is left: no process (not even a zombie), terminal, cgroup or directory.
      const live = await livePids(server);
      assert.deepEqual([...live.keys()].sort(), [doomed.id, other.id].sort());
      assert.deepEqual(childrenOf(server.pid), [doomed.pid, other.pid].sort((a, b) => a - b));
      assert.equal(masters(server.pid), 2, "the terminal of the spawn in flight is left open");
      if (instance) assertNoStrayCgroup(instance, [doomed.pid, other.pid]);
      await holdsOnly(domainDir, [doomedDir]);

      // The dead worker's session still echoes, and its output is all kept.
      await echo(server, doomed.id, "after");
      const kept = await server.get(`/v1/sessions/${doomed.id}/output?since=0`);
      assert.equal(kept.body.output, "before\r\nbefore\r\nafter\r\nafter\r\n");

      // The same domain (profile, workdir, agent) runs on a fresh worker; the other one as before.
      for (const profile of ["workspace-write", "read-only"]) {
        const r = await server.post("/v1/exec_command", {
          cmd: `echo fresh ${profile}`,
          login: false,
          profile,
        });
        assert.equal(r.status, 200, JSON.stringify(r.body));
        assert.equal(r.body.output, `fresh ${profile}\r\n`);
        assert.equal(r.body.exit_code, 0);
      }
      await echo(server, other.id, "elsewhere");

      // DELETE still kills the dead worker's session, cgroup and all, and gives its uid back.
      const killed = await server.del(`/v1/sessions/${doomed.id}`);
      assert.equal(killed.status, 200, JSON.stringify(killed.body));
      assert.equal(stat(doomed.pid), undefined, "the killed session's process is not reaped");
      // Its cgroup is empty: removed, or kept (empty) for a later session.
      if (instance) assertNoStrayCgroup(instance, [other.pid]);
      await holdsOnly(domainDir, []);

      const health = await server.get("/healthz");
      assert.equal(health.status, 200);
      assert.equal(health.body.ok, true);
      assert.equal(health.body.sessions, 1);

      // Shutdown: the server exits cleanly, having logged the one death, and leaves nothing.
      const { code, stderr } = await server.stop();
      stopped = true;
      assert.equal(code, 0, stderr);
      assert.equal(stderr.match(/uexec: a spawner worker died/g)?.length, 1, stderr);
      assert.equal(stat(other.pid), undefined);
      assert.equal(exists(domainDir), false);
      if (instance) assert.equal(exists(instance), false, "the server's cgroups outlived it");
    } finally {
      if (!stopped) await server.stop();
    }
  });
}

Deno.test("a spawner worker that dies while binding to its domain: 503, and the rest runs", async () => {
  const server = await startServer({}, [], undefined, ENTRY);
  let stopped = false;
  try {
    // A workdir whose policy names DIE: the worker restricts itself to it, then dies.
    const workdir = `${server.workspace}/${DIE}`;
    await Deno.mkdir(workdir);
    const died = await answered(server, "/v1/exec_command", { cmd: "echo never", workdir });
    assert.equal(died.status, 503, JSON.stringify(died.body));
    assert.equal(died.body.error.code, "spawner_failed");
    assert.match(died.body.error.message, /^the spawner worker of this command's sandbox died/);
    assert.deepEqual(childrenOf(server.pid), []);

    const r = await server.post("/v1/exec_command", { cmd: "echo fine", login: false });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.output, "fine\r\n");
    assert.equal((await server.get("/healthz")).body.ok, true);

    const { code, stderr } = await server.stop();
    stopped = true;
    assert.equal(code, 0, stderr);
    assert.equal(stderr.match(/uexec: a spawner worker died/g)?.length, 1, stderr);
  } finally {
    if (!stopped) await server.stop();
  }
});
