/**
 * Which pathname unix sockets a domain may reach: the `/proc/net/unix` parser and policy filter
 * (a server that is not root refuses to run beside such a socket), the refresh of the listing,
 * the profile field that keeps sockets reachable, the root server's domain key that makes a
 * fresh worker when a listed socket is bound again, and the `/healthz` summary of what each
 * profile denies. The view itself (mount_view.ts) is tested in mount_view_test.ts and, on a real
 * server, in tests/e2e/sandbox_sockets_http_test.ts.
 *
 * @module
 */

import assert from "node:assert/strict";
import { deniedByProfile } from "../../../../src/sandbox/enforce/confinement.ts";
import { Reactor } from "../../../../src/io/reactor.ts";
import type { ResolvedPolicy } from "../../../../src/sandbox/policy/policy.ts";
import {
  loadProfiles,
  parseProfile,
  resolveProfile,
} from "../../../../src/sandbox/policy/profiles.ts";
import {
  type BoundSocket,
  boundUnixSockets,
  parseUnixSockets,
  SocketListing,
  socketsToHide,
} from "../../../../src/sandbox/enforce/unix_sockets.ts";
import { testDomains } from "../../../helpers/domains.ts";

const PROFILE_DIR = new URL("../../../../sandbox-profiles", import.meta.url).pathname;

const PROC_NET_UNIX = [
  "Num       RefCount Protocol Flags    Type St Inode Path",
  "000000007a160bf8: 00000002 00000000 00010000 0001 01 21007 /run/docker.sock",
  "00000000a597d81c: 00000003 00000000 00000000 0001 03 31337 /run/docker.sock",
  "0000000087d35627: 00000002 00000000 00000000 0002 01  1158 /run/systemd/journal/dev-log",
  "0000000059980306: 00000002 00000000 00010000 0001 01  8898 @/tmp/.X11-unix/X0",
  "0000000059980307: 00000002 00000000 00010000 0001 01  8899 relative.sock",
  "0000000059980308: 00000002 00000000 00010000 0001 01  8900 /tmp/with space.sock",
  "0000000059980309: 00000003 00000000 00000000 0001 03  8901",
  "",
].join("\n");

function policy(extra: Partial<ResolvedPolicy> = {}): ResolvedPolicy {
  return {
    profile: "workspace-write",
    enforce: true,
    readableRoots: ["/"],
    writableRoots: ["/srv/ws", "/tmp/uexec-s1"],
    readOnlySubpaths: [],
    denyRead: [],
    network: "none",
    limits: {},
    ...extra,
  };
}

Deno.test("parseUnixSockets keeps unconnected sockets bound to absolute paths", () => {
  assert.deepEqual(parseUnixSockets(PROC_NET_UNIX), [
    { path: "/run/docker.sock", inode: 21007 },
    { path: "/run/systemd/journal/dev-log", inode: 1158 },
    { path: "/tmp/with space.sock", inode: 8900 },
  ]);
});

Deno.test("boundUnixSockets sees a socket this process binds", () => {
  const dir = Deno.makeTempDirSync({ prefix: "uexec-bound-" });
  const listener = Deno.listen({ transport: "unix", path: `${dir}/probe.sock` });
  try {
    const found = boundUnixSockets().filter((s) => s.path === `${dir}/probe.sock`);
    assert.equal(found.length, 1);
    assert.ok(found[0].inode > 0);
  } finally {
    listener.close();
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("socketsToHide: outside the writable roots and the listed sockets, one per path", () => {
  const sockets: BoundSocket[] = [
    { path: "/run/docker.sock", inode: 5 },
    { path: "/srv/ws/app.sock", inode: 6 },
    { path: "/tmp/uexec-s1/agent/ssh.sock", inode: 7 },
    { path: "/tmp/uexec-s2/agent/ssh.sock", inode: 8 },
    { path: "/run/dbus/system_bus_socket", inode: 9 },
    { path: "/run/docker.sock", inode: 11 },
    { path: "/srv/wsx.sock", inode: 12 },
  ];
  assert.deepEqual(socketsToHide(policy(), sockets), [
    { path: "/run/dbus/system_bus_socket", inode: 9 },
    { path: "/run/docker.sock", inode: 11 },
    { path: "/srv/wsx.sock", inode: 12 },
    { path: "/tmp/uexec-s2/agent/ssh.sock", inode: 8 },
  ]);
  assert.deepEqual(
    socketsToHide(policy({ unixSockets: ["/run/docker.sock", "/run/dbus"] }), sockets),
    [{ path: "/srv/wsx.sock", inode: 12 }, { path: "/tmp/uexec-s2/agent/ssh.sock", inode: 8 }],
  );
});

Deno.test("SocketListing reads again only when its copy is older than maxAgeMs", () => {
  let reads = 0;
  const listing = new SocketListing(1000, () => [{ path: "/run/x.sock", inode: ++reads }]);
  assert.deepEqual(listing.current(5000), [{ path: "/run/x.sock", inode: 1 }]);
  assert.deepEqual(listing.current(5999), [{ path: "/run/x.sock", inode: 1 }]);
  assert.deepEqual(listing.current(6000), [{ path: "/run/x.sock", inode: 2 }]);
  assert.equal(reads, 2);
});

Deno.test("profiles: unix_sockets lists reachable sockets, as path templates", () => {
  const base = JSON.parse(Deno.readTextFileSync(`${PROFILE_DIR}/workspace-write.json`));
  const profile = parseProfile(
    "p/docker.json",
    JSON.stringify({ ...base, unix_sockets: ["/run/docker.sock", "{home}/.docker/run/"] }),
  );
  assert.deepEqual(profile.unixSockets, ["/run/docker.sock", "{home}/.docker/run/"]);
  const resolved = resolveProfile(profile, {
    workdir: "/srv/ws",
    tmp: "/tmp/t",
    home: "/home/svc",
    serverPid: 7,
    childIsRoot: false,
  });
  assert.deepEqual(resolved.unixSockets, ["/run/docker.sock", "/home/svc/.docker/run"]);
  assert.throws(
    () => parseProfile("p/bad.json", JSON.stringify({ ...base, unix_sockets: ["docker.sock"] })),
    /field "unix_sockets\[0\]".*absolute/,
  );
  assert.throws(
    () => parseProfile("p/empty.json", JSON.stringify({ ...base, unix_sockets: [] })),
    /field "unix_sockets"/,
  );
});

Deno.test("deniedByProfile: what each shipped profile denies, for /healthz", () => {
  const profiles = loadProfiles(PROFILE_DIR);
  assert.equal(deniedByProfile(profiles.get("full-access")!), null);
  const none = deniedByProfile(profiles.get("workspace-write")!)!;
  const net = deniedByProfile(profiles.get("workspace-write-net")!)!;
  assert.deepEqual(none.socket_families_allowed, ["AF_UNIX"]);
  assert.deepEqual(net.socket_families_allowed, ["AF_UNIX", "AF_INET", "AF_INET6"]);
  for (const name of ["keyctl", "add_key", "bpf", "userfaultfd", "perf_event_open"]) {
    assert.ok(none.syscalls.includes(name), name);
    assert.ok(net.syscalls.includes(name), name);
  }
  assert.match(none.conditional.setns, /but into a mount namespace/);
  assert.equal(none.conditional.clone, "with any CLONE_NEW* flag");
  assert.deepEqual(none.enosys, ["clone3", "pidfd_open"]);
  assert.deepEqual(none.unix_sockets, {
    hidden: "every pathname socket outside the writable roots and the workdir, whenever bound",
    reachable: [],
  });
  assert.deepEqual(
    deniedByProfile({ enforce: true, network: "all", unixSockets: ["/run/docker.sock"] })!
      .unix_sockets.reachable,
    ["/run/docker.sock"],
  );
});

Deno.test("a root server's domain key changes when a listed socket is bound again, or the view ages", async () => {
  assert.equal(Deno.uid(), 0, "needs root (the domain's private directory)");
  const workspace = Deno.makeTempDirSync({ prefix: "uexec-key-" });
  Deno.chmodSync(workspace, 0o777);
  const listed = `/run/uexec-key-test-${Deno.pid}.sock`;
  const other = `/run/uexec-key-other-${Deno.pid}.sock`;
  const base = JSON.parse(Deno.readTextFileSync(`${PROFILE_DIR}/workspace-write.json`));
  const profiles = loadProfiles(PROFILE_DIR);
  profiles.set(
    "listed",
    parseProfile("p/listed.json", JSON.stringify({ ...base, unix_sockets: [listed] })),
  );
  const reactor = new Reactor();
  let now = 0;
  const domains = testDomains(workspace, reactor, {
    profiles,
    views: { maxAgeMs: 60_000, now: () => now },
  });
  const key = () => domains.choose("listed", workspace).domain;
  try {
    const before = key();
    assert.equal(key(), before, "stable while nothing changes");
    const unlisted = Deno.listen({ transport: "unix", path: other });
    try {
      assert.equal(
        key(),
        before,
        "a socket the profile does not list changes nothing: it is out of reach",
      );
    } finally {
      unlisted.close();
    }
    let service = Deno.listen({ transport: "unix", path: listed });
    const withSocket = key();
    assert.notEqual(withSocket, before, "the listed socket appeared");
    service.close();
    service = Deno.listen({ transport: "unix", path: listed });
    let rebound: string;
    try {
      rebound = key();
      assert.notEqual(rebound, withSocket, "a service that binds again gets a fresh worker");
      now = 59_999;
      assert.equal(key(), rebound, "a view younger than viewMaxAgeMs is kept");
      now = 60_000;
      const aged = key();
      assert.notEqual(aged, rebound, "past viewMaxAgeMs new commands get a fresh view");
      now = 119_999;
      assert.equal(key(), aged, "and keep it for as long again");
    } finally {
      service.close();
    }
  } finally {
    await domains.close();
    await reactor.close();
    Deno.removeSync(workspace, { recursive: true });
  }
});
