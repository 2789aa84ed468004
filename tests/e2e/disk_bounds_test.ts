/**
 * Disk bounds (issue 29, point 6): below the free-space floor (`UEXEC_DISK_FLOOR_BYTES`) on the
 * workspace's file system a start is refused with 507 while the history of earlier commands
 * stays readable, and a start after space was freed runs; a session's HOME and TMPDIR live on
 * the instance's own tmpfs, whose pages count against the session's memory. Real servers as
 * root, on small file systems the tests mount themselves (never the host's disk).
 *
 * @module
 */

import assert from "node:assert/strict";
import { startServer } from "../helpers/server.ts";

const MiB = 1 << 20;

/** Mount a tmpfs of `mib` MiB on a fresh directory; returns it and how to take it away. */
async function smallFs(
  mib: number,
): Promise<{ dir: string; [Symbol.asyncDispose](): Promise<void> }> {
  const dir = await Deno.makeTempDir({ prefix: "uexec-small-fs-" });
  const run = async (cmd: string, ...args: string[]) => {
    const out = await new Deno.Command(cmd, { args, stderr: "piped" }).output();
    assert.ok(out.success, `${cmd} ${args.join(" ")}: ${new TextDecoder().decode(out.stderr)}`);
  };
  await run("mount", "-t", "tmpfs", "-o", `size=${mib}m,mode=0755`, "tmpfs", dir);
  return {
    dir,
    async [Symbol.asyncDispose]() {
      await run("umount", dir);
      await Deno.remove(dir);
    },
  };
}

Deno.test("a disk filler gets 507 for the next start; the history stays, and freeing space helps", async () => {
  await using fs = await smallFs(8);
  const server = await startServer({
    UEXEC_WORKSPACE: fs.dir,
    UEXEC_DISK_FLOOR_BYTES: `${2 * MiB}`,
  });
  try {
    const earlier = await server.post("/v1/exec_command", { cmd: "echo earlier", login: false });
    assert.equal(earlier.body.output, "earlier\r\n", JSON.stringify(earlier.body));
    // Fills the workspace to within 1 MiB of full (past the floor).
    const filler = await server.post("/v1/exec_command", {
      cmd: "head -c 7M /dev/zero > fill; echo filled $?",
      login: false,
    });
    assert.equal(filler.body.output, "filled 0\r\n", JSON.stringify(filler.body));

    const refused = await server.post("/v1/exec_command", { cmd: "echo later", login: false });
    assert.equal(refused.status, 507, JSON.stringify(refused.body));
    assert.equal(refused.body.error.code, "insufficient_storage");
    assert.match(refused.body.error.message, /workspace.*UEXEC_DISK_FLOOR_BYTES/);

    const history = await server.get("/v1/history");
    assert.equal(history.status, 200, JSON.stringify(history.body));
    const commands = history.body.items.map((i: { command: string }) => i.command);
    assert.ok(commands.includes("echo earlier"), JSON.stringify(commands));
    assert.ok(commands.includes("head -c 7M /dev/zero > fill; echo filled $?"));
    assert.ok(!commands.includes("echo later"), JSON.stringify(commands));

    await Deno.remove(`${fs.dir}/fill`);
    const later = await server.post("/v1/exec_command", { cmd: "echo later", login: false });
    assert.equal(later.status, 200, JSON.stringify(later.body));
    assert.equal(later.body.output, "later\r\n");
  } finally {
    await server.stop();
  }
});

Deno.test("a session filling its TMPDIR stops at its memory limit; the tmpfs goes with the server", async () => {
  const server = await startServer({
    UEXEC_MEMORY_MAX: `${256 * MiB}`,
    UEXEC_SESSION_MEMORY_MAX: `${64 * MiB}`,
  });
  let mount = "";
  try {
    const filler = await server.post("/v1/exec_command", {
      cmd: "df --output=target,fstype $TMPDIR | tail -1; head -c 100M /dev/zero > $TMPDIR/big; " +
        "echo rc=$?",
      login: false,
      yield_time_ms: 30000,
    });
    const [target, fstype] = filler.body.output.trim().split(/\s+/);
    // The domain's directory in it: a writable root, which the domain's mount view binds.
    assert.match(target, /\/uexec-i\d+-\d+\/domain-[0-9a-f]+$/);
    mount = target.slice(0, target.lastIndexOf("/"));
    assert.equal(fstype, "tmpfs", JSON.stringify(filler.body));
    assert.equal(filler.body.exit_code, 128 + 9, JSON.stringify(filler.body));
    assert.doesNotMatch(filler.body.output, /rc=/);
    assert.equal(filler.body.usage.killed_by, "memory");
    const next = await server.post("/v1/exec_command", {
      cmd: "head -c 1M /dev/zero > $TMPDIR/small && echo fine",
      login: false,
    });
    assert.equal(next.body.output, "fine\r\n", JSON.stringify(next.body));
  } finally {
    await server.stop();
  }
  const mounts = await Deno.readTextFile("/proc/self/mountinfo");
  assert.ok(!mounts.includes(` ${mount} `), `${mount} is still mounted`);
  assert.equal(await Deno.stat(mount).then(() => true, () => false), false);
});
