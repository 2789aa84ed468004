/**
 * Starting a child straight into its cgroups (`clone3(CLONE_INTO_CGROUP)` and the spawning
 * thread's own move into the v1 cgroups), on real cgroups of this host: the child's very first
 * look at `/proc/self/cgroup` shows all of its session's cgroups, the thread is back in its own
 * afterwards, and a start that fails (no such program, no such directory) reports the errno
 * and leaves no child.
 *
 * @module
 */

import assert from "node:assert/strict";
import { closeAll, E, libc, O, OsError } from "../../../src/ffi/libc.ts";
import { cloneIntoCgroup, cloneIntoCgroupWorks } from "../../../src/pty/clone_into_cgroup.ts";
import { openPipe } from "../../../src/pty/open.ts";
import { cgroupRoot } from "../../../src/sandbox/containment/hierarchy.ts";

const V2 = cgroupRoot(undefined)!;
const V1 = { pids: "/sys/fs/cgroup/pids", memory: "/sys/fs/cgroup/memory" };
const decoder = new TextDecoder();

/** This thread's cgroup in the v1 `controller` hierarchy (its line of /proc/thread-self/cgroup). */
function ownCgroup(controller: string): string {
  const line = Deno.readTextFileSync("/proc/thread-self/cgroup").split("\n")
    .find((l) => l.split(":")[1]?.split(",").includes(controller));
  return line!.split(":")[2];
}

function open(path: string, flags: number): number {
  const fd = libc().open(new TextEncoder().encode(`${path}\0`), flags);
  assert.ok(fd >= 0, `open ${path}`);
  return fd;
}

/** Fresh cgroups for one test in v2, v1 pids and v1 memory; removed after `body`. */
async function scratch(body: (name: string, fds: number[]) => Promise<void>): Promise<void> {
  const name = `uexec-test-${crypto.randomUUID().slice(0, 8)}`;
  const dirs = [`${V2}/${name}`, `${V1.pids}/${name}`, `${V1.memory}/${name}`];
  for (const d of dirs) Deno.mkdirSync(d);
  const fds = [
    open(dirs[0], O.PATH | O.DIRECTORY | O.CLOEXEC),
    open(`${dirs[1]}/tasks`, O.WRONLY | O.CLOEXEC),
    open(`${dirs[2]}/tasks`, O.WRONLY | O.CLOEXEC),
    open(`${V1.pids}${ownCgroup("pids")}/tasks`, O.WRONLY | O.CLOEXEC),
    open(`${V1.memory}${ownCgroup("memory")}/tasks`, O.WRONLY | O.CLOEXEC),
  ];
  try {
    await body(name, fds);
  } finally {
    closeAll(fds);
    for (const d of dirs) Deno.removeSync(d);
  }
}

/** Runs `argv` in `cwd` placed by `fds`; returns its output and exit status. */
function run(fds: number[], argv: string[], cwd = "/"): { output: string; status: number } {
  const [stdin, stdinWrite] = openPipe();
  const [outRead, output] = openPipe();
  let pid;
  try {
    pid = cloneIntoCgroup(
      { file: argv[0], argv, env: ["PATH=/usr/bin:/bin"], cwd },
      { stdin, output },
      { cgroup: fds[0], tasks: [fds[1], fds[2]], home: [fds[3], fds[4]] },
    );
  } finally {
    closeAll([stdin, output, stdinWrite]);
  }
  const chunks: string[] = [];
  const buf = new Uint8Array(4096);
  for (let i = 0; i < 1000; i++) {
    const n = libc().read(outRead, buf, BigInt(buf.length));
    if (n <= 0) break;
    chunks.push(decoder.decode(buf.subarray(0, n)));
  }
  closeAll([outRead]);
  const status = new Int32Array(1);
  assert.equal(libc().waitpid(pid, new Uint8Array(status.buffer), 0), pid);
  return { output: chunks.join(""), status: status[0] };
}

Deno.test("clone into cgroup: this host can (x86-64, clone3, CLONE_INTO_CGROUP)", () => {
  assert.equal(cloneIntoCgroupWorks(), true);
});

Deno.test("clone into cgroup: the child is in every cgroup of its session from its start", async () => {
  const home = Deno.readTextFileSync("/proc/thread-self/cgroup");
  await scratch((name, fds) => {
    const { output, status } = run(fds, ["/bin/sh", "-c", "cat /proc/self/cgroup; pwd"], "/tmp");
    assert.equal(status, 0);
    const lines = output.trim().split("\n");
    assert.ok(lines.includes(`0::/${name}`), output);
    assert.ok(lines.some((l) => l.endsWith(`:pids:/${name}`)), output);
    assert.ok(lines.some((l) => l.endsWith(`:memory:/${name}`)), output);
    assert.equal(lines.at(-1), "/tmp");
    return Promise.resolve();
  });
  assert.equal(Deno.readTextFileSync("/proc/thread-self/cgroup"), home, "the thread is home");
});

Deno.test("clone into cgroup: a start that fails reports its errno and leaves no child", async () => {
  const home = Deno.readTextFileSync("/proc/thread-self/cgroup");
  await scratch((_, fds) => {
    for (
      const [argv, cwd] of [[["/nonexistent/program"], "/"], [["/bin/true"], "/nonexistent"]] as [
        string[],
        string,
      ][]
    ) {
      assert.throws(
        () => run(fds, argv, cwd),
        (err) => err instanceof OsError && err.errno === E.ENOENT,
      );
    }
    return Promise.resolve();
  });
  assert.equal(libc().waitpid(-1, new Uint8Array(4), 1 /* WNOHANG */), -1, "no child left");
  assert.equal(Deno.readTextFileSync("/proc/thread-self/cgroup"), home, "the thread is home");
});
