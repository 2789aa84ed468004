/**
 * The mount view of a root server's domain (mount_view.ts): the mountinfo parser and the order
 * mounts and live places are shown in, then the real thing in a private mount namespace of a
 * child process: host sockets out of reach whenever bound, live places reachable and writable as
 * the host has them, the host's per-mount flags kept, and the host's mount table untouched.
 *
 * @module
 */

import assert from "node:assert/strict";
import { liveOrder, mountEntries, viewMounts } from "../../../../src/sandbox/enforce/mount_view.ts";

const MOUNTINFO = [
  "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw",
  "22 27 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:5 - proc proc rw",
  "24 27 0:6 / /dev rw,nosuid,relatime - devtmpfs devtmpfs rw,mode=755",
  "25 24 0:23 / /dev/shm rw,nosuid,nodev shared:7 master:2 - tmpfs tmpfs rw",
  "40 27 0:40 / /srv/with\\040space rw,noexec - tmpfs tmpfs rw",
  "41 27 0:41 / /run rw - tmpfs tmpfs rw",
  "42 41 0:42 / /run rw,nosuid - tmpfs tmpfs rw",
  "43 27 0:43 / /var/stage rw - tmpfs tmpfs rw",
  "44 43 0:44 / /var/stage/inner rw - tmpfs tmpfs rw",
  "",
].join("\n");

Deno.test("mountEntries: mount points unescaped, types past the optional fields, flags", () => {
  const entries = mountEntries(MOUNTINFO);
  assert.deepEqual(entries.slice(0, 5), [
    { mountPoint: "/", fsType: "ext4", flags: 0 },
    { mountPoint: "/proc", fsType: "proc", flags: 0x2 | 0x4 | 0x8 },
    { mountPoint: "/dev", fsType: "devtmpfs", flags: 0x2 },
    { mountPoint: "/dev/shm", fsType: "tmpfs", flags: 0x2 | 0x4 },
    { mountPoint: "/srv/with space", fsType: "tmpfs", flags: 0x8 },
  ]);
  assert.equal(entries.length, 9);
});

Deno.test("viewMounts: the top of each stack, parents first, none at or beneath the staging", () => {
  assert.deepEqual(
    viewMounts(mountEntries(MOUNTINFO), "/var/stage").map((e) => [e.mountPoint, e.flags]),
    [
      ["/", 0],
      ["/proc", 0xe],
      ["/dev", 0x2],
      ["/run", 0x2],
      ["/dev/shm", 0x6],
      ["/srv/with space", 0x8],
    ],
  );
});

Deno.test("liveOrder: a place beneath another comes after it", () => {
  assert.deepEqual(
    liveOrder([
      { path: "/w/tmp/a", writable: true },
      { path: "/w", writable: false },
      { path: "/run/x.sock", writable: false },
    ]).map((l) => l.path),
    ["/w", "/run/x.sock", "/w/tmp/a"],
  );
});

/** The script a child runs in a private mount namespace: build the view, then probe it. */
function probeScript(dir: string): string {
  const module = new URL("../../../../src/sandbox/enforce/mount_view.ts", import.meta.url);
  return `
import { buildView } from ${JSON.stringify(module.href)};
const dir = ${JSON.stringify(dir)};
const connect = async (path) => {
  try {
    (await Deno.connect({ transport: "unix", path })).close();
    return "connected";
  } catch (e) {
    return e.name;
  }
};
const canWrite = (path) => {
  try {
    Deno.writeTextFileSync(path, "x");
    return "written";
  } catch (e) {
    return e.code ?? e.name;
  }
};
buildView({
  staging: dir + "/staging",
  live: [{ path: dir + "/live", writable: true }, { path: dir + "/shown", writable: false }],
});
console.log("ready");
// The host binds late.sock now, then says go.
await Deno.stdin.read(new Uint8Array(16));
const own = Deno.listen({ transport: "unix", path: dir + "/live/own.sock" });
console.log(JSON.stringify({
  early: await connect(dir + "/host/early.sock"),
  late: await connect(dir + "/host/late.sock"),
  liveService: await connect(dir + "/live/service.sock"),
  own: await connect(dir + "/live/own.sock"),
  readme: Deno.readTextFileSync(dir + "/host/readme"),
  writeHost: canWrite(dir + "/host/new"),
  writeLive: canWrite(dir + "/live/new"),
  writeShown: canWrite(dir + "/shown/new"),
  noexec: Deno.readTextFileSync("/proc/self/mountinfo").split("\\n")
    .find((l) => l.split(" ")[4] === dir + "/noexec")?.split(" ")[5] ?? "missing",
}));
own.close();
`;
}

Deno.test("buildView: host sockets out of reach whenever bound; live places as the host has them", async () => {
  assert.equal(Deno.uid(), 0, "needs root (a mount namespace)");
  const dir = await Deno.makeTempDir({ prefix: "uexec-view-" });
  const hostMounts = () => Deno.readTextFileSync("/proc/self/mountinfo");
  for (const sub of ["staging", "host", "live", "shown", "noexec"]) Deno.mkdirSync(`${dir}/${sub}`);
  Deno.writeTextFileSync(`${dir}/host/readme`, "host file\n");
  const noexec = new Deno.Command("mount", {
    args: ["-t", "tmpfs", "-o", "noexec,nosuid,size=64k", "uexec-view-test", `${dir}/noexec`],
  }).outputSync();
  assert.equal(noexec.code, 0, new TextDecoder().decode(noexec.stderr));
  const services: Deno.UnixListener[] = [];
  const accepted: string[] = [];
  const serve = (path: string) => {
    const listener = Deno.listen({ transport: "unix", path });
    services.push(listener);
    (async () => {
      for await (const conn of listener) {
        accepted.push(path);
        conn.close();
      }
    })();
  };
  try {
    serve(`${dir}/host/early.sock`);
    serve(`${dir}/live/service.sock`);
    const before = hostMounts();
    const child = new Deno.Command("unshare", {
      args: ["--mount", "--propagation", "private", Deno.execPath(), "eval", probeScript(dir)],
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const stderr = new Response(child.stderr).text();
    const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
    let text = "";
    while (!text.includes("ready\n")) {
      const { value, done } = await lines.read();
      if (done) break;
      text += value;
    }
    serve(`${dir}/host/late.sock`);
    const stdin = child.stdin.getWriter();
    await stdin.write(new TextEncoder().encode("go\n"));
    await stdin.close();
    for (let r = await lines.read(); !r.done; r = await lines.read()) text += r.value;
    const status = await child.status;
    assert.equal(status.code, 0, `${text}${await stderr}`);
    const seen = JSON.parse(text.slice(text.indexOf("ready\n") + 6));
    assert.deepEqual({ ...seen, noexec: seen.noexec.split(",").sort() }, {
      early: "ConnectionRefused",
      late: "ConnectionRefused",
      liveService: "connected",
      own: "connected",
      readme: "host file\n",
      writeHost: "EROFS",
      writeLive: "written",
      writeShown: "EROFS",
      noexec: ["noexec", "nosuid", "ro", "relatime"].sort(),
    });
    assert.deepEqual(accepted, [`${dir}/live/service.sock`], "the host service never accepted");
    assert.equal(Deno.readTextFileSync(`${dir}/live/new`), "x", "written through to the host");
    assert.equal(hostMounts(), before, "the host's mount table is untouched");
  } finally {
    for (const service of services) service.close();
    new Deno.Command("umount", { args: [`${dir}/noexec`] }).outputSync();
    await Deno.remove(dir, { recursive: true });
  }
});
