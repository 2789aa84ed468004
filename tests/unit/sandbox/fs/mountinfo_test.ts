/**
 * The mountinfo parser (src/sandbox/fs/mountinfo.ts): fields read from the right side of the
 * optional fields, mount points unescaped, unreadable lines skipped; and this host's own table,
 * whose v1 cgroup mounts name their controllers in the super options.
 *
 * @module
 */

import assert from "node:assert/strict";
import { parseMountInfo } from "../../../../src/sandbox/fs/mountinfo.ts";
import { v1Mounts } from "../../../../src/sandbox/containment/hierarchy.ts";

Deno.test("parseMountInfo: optional fields, escapes, super options, and lines it cannot read", () => {
  const text = [
    "25 24 0:23 / /dev/shm rw,nosuid,nodev shared:7 master:2 - tmpfs tmpfs rw,size=64k",
    "33 26 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct",
    "40 27 0:40 / /srv/with\\040space\\134x rw,noexec - tmpfs none rw",
    "41 27 0:41 / /no/separator rw tmpfs tmpfs rw",
    "42 27 0:42 / /cut rw -",
    "43 27 0:43 / /no/super rw - tmpfs",
    "",
  ].join("\n");
  assert.deepEqual(parseMountInfo(text), [
    {
      mountPoint: "/dev/shm",
      fsType: "tmpfs",
      mountOptions: ["rw", "nosuid", "nodev"],
      superOptions: ["rw", "size=64k"],
    },
    {
      mountPoint: "/sys/fs/cgroup/cpu,cpuacct",
      fsType: "cgroup",
      mountOptions: ["rw", "nosuid"],
      superOptions: ["rw", "cpu", "cpuacct"],
    },
    {
      mountPoint: "/srv/with space\\x",
      fsType: "tmpfs",
      mountOptions: ["rw", "noexec"],
      superOptions: ["rw"],
    },
    { mountPoint: "/no/super", fsType: "tmpfs", mountOptions: ["rw"], superOptions: [] },
  ]);
});

Deno.test("v1Mounts: this host's v1 cgroup mounts, each with the controllers it holds", () => {
  const mounts = v1Mounts();
  const table = Deno.readTextFileSync("/proc/self/mountinfo");
  const cgroupLines = table.split("\n").filter((l) => / - cgroup /.test(l));
  assert.equal(mounts.length, cgroupLines.length);
  for (const m of mounts) {
    assert.ok(table.includes(` ${m.path} `), `${m.path} is a mount point of this host`);
    const line = cgroupLines.find((l) => l.split(" ")[4] === m.path)!;
    assert.deepEqual(m.controllers, line.split(" - ")[1].split(" ")[2].split(","));
  }
});
