/**
 * What an idle session costs the server in descriptors (issue 34): its PTY master and nothing
 * else (its exit is learned from SIGCHLD, not from a pidfd). Counted in the real server's
 * /proc/<pid>/fd before and after opening idle `cat` sessions, and their exit codes still exact.
 *
 * @module
 */

import assert from "node:assert/strict";
import { SPARES } from "../../src/sandbox/containment/cgroups.ts";
import { startServer, type TestServer } from "../helpers/server.ts";

const SH = { shell: "/bin/sh", login: false };

/**
 * The server's open descriptors by what they are, with digits folded (`/dev/pts/N`,
 * `/proc/N/fd`): a kind → count map.
 */
function descriptorKinds(pid: number): Map<string, number> {
  const kinds = new Map<string, number>();
  for (const e of Deno.readDirSync(`/proc/${pid}/fd`)) {
    let target: string;
    try {
      target = Deno.readLinkSync(`/proc/${pid}/fd/${e.name}`);
    } catch {
      continue; // closed meanwhile
    }
    const kind = target.replace(/\d+/g, "N");
    kinds.set(kind, (kinds.get(kind) ?? 0) + 1);
  }
  return kinds;
}

/**
 * Two caches of the whole server, bounded whatever the number of sessions, counted apart: the
 * terminal probe's (src/pty/terminal_input.ts: the `/proc/<pid>/syscall` and `/proc/<pid>/fd`
 * files of at most 256 recently asked foreground leaders) and the spare cgroups' `cgroup.procs`
 * files (src/sandbox/cgroups.ts: at most SPARES made ahead per set of limits).
 */
function cached(kind: string): boolean {
  return kind === "/proc/N/syscall" || kind === "/proc/N/fd" || kind.endsWith("/cgroup.procs");
}

/** How each kind's count changed from `before` to `after` (kinds that did not change left out). */
function growth(before: Map<string, number>, after: Map<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const kind of new Set([...before.keys(), ...after.keys()])) {
    const d = (after.get(kind) ?? 0) - (before.get(kind) ?? 0);
    if (d !== 0) out[kind] = d;
  }
  return out;
}

async function openCat(server: TestServer): Promise<number> {
  const res = await server.post("/v1/exec_command", {
    ...SH,
    cmd: "echo cat-ready; exec cat",
    until: "cat-ready",
    yield_time_ms: 10_000,
  });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.equal(typeof res.body.session_id, "number", JSON.stringify(res.body));
  return res.body.session_id;
}

Deno.test("an idle PTY session holds exactly one descriptor of the server: its terminal", async () => {
  const server = await startServer();
  try {
    // One first, so that whatever the first session makes once (its spawner's, the reaper's) is
    // there before the count.
    const first = await openCat(server);
    const before = descriptorKinds(server.pid);
    const n = 24;
    // One after another, over the one keep-alive connection the first one opened.
    const ids: number[] = [];
    for (let i = 0; i < n; i++) ids.push(await openCat(server));
    const after = descriptorKinds(server.pid);
    const grown = growth(before, after);
    const sessions = Object.fromEntries(Object.entries(grown).filter(([kind]) => !cached(kind)));
    assert.deepEqual(sessions, { "/dev/ptmx": n }, `descriptors grew by ${JSON.stringify(grown)}`);
    assert.equal(after.get("anon_inode:[pidfd]") ?? 0, 0, "no pidfd is held for a live session");
    assert.ok((after.get("/proc/N/syscall") ?? 0) <= n + 1, JSON.stringify(grown));
    const spares = [...after].filter(([kind]) => kind.endsWith("/cgroup.procs"));
    assert.ok(spares.every(([, count]) => count <= SPARES), JSON.stringify(spares));
    for (const id of [first, ...ids]) {
      const res = await server.del(`/v1/sessions/${id}`);
      assert.equal(res.status, 200);
    }
    // Their descriptors are gone with them (the probe's cache closes a leader's files with it).
    const closed = growth(before, descriptorKinds(server.pid));
    assert.equal(closed["/dev/ptmx"], -1, JSON.stringify(closed));
  } finally {
    await server.stop();
  }
});

Deno.test("exit codes and signal deaths of sessions ending together stay exact", async () => {
  const server = await startServer();
  try {
    // Terminals and pipes; each ends on the line it reads, all sent at once.
    const codes = Array.from({ length: 12 }, (_, i) => i * 7);
    const script = (code: number, i: number) =>
      "read x; " + (i % 4 === 3 ? "kill -9 $$" : `exit ${code}`);
    const started = await Promise.all(codes.map(async (code, i) => {
      const res = await server.post("/v1/exec_command", {
        ...SH,
        tty: i % 2 === 0,
        cmd: script(code, i),
        yield_time_ms: 0,
      });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      assert.equal(typeof res.body.session_id, "number", JSON.stringify(res.body));
      return res.body.session_id as number;
    }));
    const got = await Promise.all(started.map(async (id) => {
      const res = await server.post("/v1/write_stdin", {
        session_id: id,
        chars: "go\n",
        yield_time_ms: 30_000,
      });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      return res.body.exit_code;
    }));
    assert.deepEqual(got, codes.map((code, i) => i % 4 === 3 ? 137 : code));
  } finally {
    await server.stop();
  }
});
