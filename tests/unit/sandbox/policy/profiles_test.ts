/**
 * Sandbox profiles: the shipped ones load and resolve exactly; broken ones name the file and the
 * field.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  isWithin,
  loadProfiles,
  normalizeAbsolutePath,
  parseProfile,
  ProfileError,
  type ResolveContext,
  resolveProfile,
  withEgressDefaults,
} from "../../../../src/sandbox/policy/profiles.ts";
import { fitsWithin } from "../../../../src/sandbox/policy/widening.ts";

const PROFILE_DIR = new URL("../../../../sandbox-profiles", import.meta.url).pathname;
const SHIPPED = [
  "full-access",
  "read-only",
  "workspace-write",
  "workspace-write-egress",
  "workspace-write-net",
];

const CTX: ResolveContext = {
  workdir: "/srv/work//project/./src/..",
  tmp: "/tmp/uexec-s1/",
  home: "/root",
  serverPid: 4242,
  childIsRoot: false,
};

const DEFAULT_DENY = [
  "/root/.ssh",
  "/root/.aws",
  "/root/.config/gcloud",
  "/root/.netrc",
  "/root",
  "/etc/shadow",
  "/proc/4242",
];

const LIMITS = {
  maxProcesses: 1024,
  maxFileSizeBytes: 1073741824,
  cpuSeconds: 3600,
  addressSpaceBytes: 137438953472,
};

const VALID = {
  description: "test",
  enforce: true,
  readable_roots: ["/"],
  writable_roots: ["{workdir}"],
  read_only_subpaths: [".git"],
  deny_read: ["~/.ssh"],
  network: "none",
  limits: {},
};

function parseVariant(change: Record<string, unknown>): ProfileError {
  try {
    parseProfile("profiles/custom.json", JSON.stringify({ ...VALID, ...change }));
  } catch (err) {
    assert.ok(err instanceof ProfileError, String(err));
    return err;
  }
  assert.fail(`accepted ${JSON.stringify(change)}`);
}

Deno.test("every shipped profile loads", () => {
  const profiles = loadProfiles(PROFILE_DIR);
  assert.deepEqual([...profiles.keys()], SHIPPED);
  for (const [name, profile] of profiles) {
    assert.equal(profile.name, name);
    assert.ok(profile.description.length > 0);
  }
});

Deno.test("workspace-write-egress: loopback only, with the server's default egress lists", () => {
  const loaded = loadProfiles(PROFILE_DIR);
  const profiles = withEgressDefaults(loaded, { allow: ["*.npmjs.org"], deny: ["evil.org"] });
  const resolved = resolveProfile(profiles.get("workspace-write-egress")!, CTX);
  const plain = resolveProfile(loaded.get("workspace-write")!, CTX);
  assert.deepEqual(resolved, {
    ...plain,
    profile: "workspace-write-egress",
    network: "loopback",
    egress: { allow: ["*.npmjs.org"], deny: ["evil.org"], methods: "all" },
  });
  // Profiles without egress are left alone; lists a file names are its own.
  assert.equal(profiles.get("workspace-write-net"), loaded.get("workspace-write-net"));
  const own = parseProfile(
    "p/own.json",
    JSON.stringify({
      ...VALID,
      network: "loopback",
      egress: { allow: ["a.org"], methods: "read-only" },
    }),
  );
  const filled = withEgressDefaults(new Map([["own", own]]), { allow: ["b.org"], deny: ["c.org"] });
  assert.deepEqual(filled.get("own")!.egress, {
    allow: ["a.org"],
    deny: ["c.org"],
    methods: "read-only",
  });
});

Deno.test("egress rules are checked: loopback network, host patterns, methods", () => {
  const loopback = { network: "loopback" };
  assert.equal(
    parseVariant({ network: "all", egress: {} }).field,
    "egress",
  );
  assert.match(
    parseVariant({ network: "none", egress: {} }).message,
    /egress needs network "loopback"/,
  );
  assert.match(
    parseVariant({ ...loopback, egress: { allow: ["*.*.org"] } }).message,
    /egress\.allow\[0\]: "\*\.\*\.org" is not a host pattern/,
  );
  assert.match(
    parseVariant({ ...loopback, egress: { deny: ["Evil.org"] } }).message,
    /egress\.deny\[0\]/,
  );
  assert.match(
    parseVariant({ ...loopback, egress: { methods: "post" } }).message,
    /egress\.methods/,
  );
  assert.match(
    parseVariant({ ...loopback, egress: { allow: [], extra: 1 } }).message,
    /egress\.extra/,
  );
});

Deno.test("enforced shipped profiles deny the default secret paths", () => {
  for (const profile of loadProfiles(PROFILE_DIR).values()) {
    if (!profile.enforce) continue;
    const resolved = resolveProfile(profile, CTX);
    assert.deepEqual(resolved.denyRead, DEFAULT_DENY, profile.name);
    assert.deepEqual(resolved.limits, LIMITS, profile.name);
  }
});

Deno.test("read-only resolves exactly", () => {
  const profile = loadProfiles(PROFILE_DIR).get("read-only")!;
  assert.deepEqual(resolveProfile(profile, CTX), {
    profile: "read-only",
    enforce: true,
    readableRoots: ["/"],
    writableRoots: ["/tmp/uexec-s1"],
    readOnlySubpaths: ["/tmp/uexec-s1/.git", "/tmp/uexec-s1/.uexec"],
    denyRead: DEFAULT_DENY,
    network: "none",
    limits: LIMITS,
  });
});

Deno.test("workspace-write resolves exactly", () => {
  const profile = loadProfiles(PROFILE_DIR).get("workspace-write")!;
  assert.deepEqual(resolveProfile(profile, CTX), {
    profile: "workspace-write",
    enforce: true,
    readableRoots: ["/"],
    writableRoots: ["/srv/work/project", "/tmp/uexec-s1"],
    readOnlySubpaths: [
      "/srv/work/project/.git",
      "/srv/work/project/.uexec",
      "/tmp/uexec-s1/.git",
      "/tmp/uexec-s1/.uexec",
    ],
    denyRead: DEFAULT_DENY,
    network: "none",
    limits: LIMITS,
  });
});

Deno.test("workspace-write-net differs from workspace-write only in network", () => {
  const profiles = loadProfiles(PROFILE_DIR);
  const net = resolveProfile(profiles.get("workspace-write-net")!, CTX);
  const plain = resolveProfile(profiles.get("workspace-write")!, CTX);
  assert.deepEqual(net, { ...plain, profile: "workspace-write-net", network: "all" });
});

Deno.test("full-access resolves to an unenforced, unrestricted policy", () => {
  const profile = loadProfiles(PROFILE_DIR).get("full-access")!;
  assert.deepEqual(resolveProfile(profile, CTX), {
    profile: "full-access",
    enforce: false,
    readableRoots: ["/"],
    writableRoots: ["/"],
    readOnlySubpaths: [],
    denyRead: [],
    network: "all",
    limits: {},
  });
});

Deno.test("/root is denied only when the child is not root", () => {
  const profile = loadProfiles(PROFILE_DIR).get("workspace-write")!;
  const asRoot = resolveProfile(profile, { ...CTX, childIsRoot: true });
  assert.deepEqual(asRoot.denyRead, DEFAULT_DENY.filter((p) => p !== "/root"));
});

Deno.test("~ and {home} expand to the server user's home", () => {
  const profile = parseProfile(
    "p/home.json",
    JSON.stringify({
      ...VALID,
      writable_roots: ["{home}/cache", "{tmp}"],
      deny_read: ["~", "~/.netrc", "/proc/{server_pid}/environ"],
      network: "loopback",
      tcp_ports: [8080, 5432],
    }),
  );
  const resolved = resolveProfile(profile, { ...CTX, home: "/home/svc" });
  assert.deepEqual(resolved.writableRoots, ["/home/svc/cache", "/tmp/uexec-s1"]);
  assert.deepEqual(resolved.denyRead, ["/home/svc", "/home/svc/.netrc", "/proc/4242/environ"]);
  assert.deepEqual(resolved.tcpPorts, [8080, 5432]);
  assert.equal(resolved.network, "loopback");
});

Deno.test("duplicates are dropped, nested entries kept", () => {
  const profile = parseProfile(
    "p/dup.json",
    JSON.stringify({ ...VALID, writable_roots: ["{workdir}", "{workdir}/", "{tmp}"] }),
  );
  const resolved = resolveProfile(profile, { ...CTX, tmp: "/srv/work/project/tmp" });
  assert.deepEqual(resolved.writableRoots, ["/srv/work/project", "/srv/work/project/tmp"]);
  assert.deepEqual(resolved.readOnlySubpaths, [
    "/srv/work/project/.git",
    "/srv/work/project/tmp/.git",
  ]);
});

Deno.test("a writable root named exactly (an approved .git) is not read-only itself", () => {
  const profile = loadProfiles(PROFILE_DIR).get("workspace-write")!;
  const widened = {
    ...profile,
    writableRoots: [...profile.writableRoots, "/srv/work/project/.git"],
  };
  const resolved = resolveProfile(widened, CTX);
  assert.deepEqual(resolved.readOnlySubpaths, [
    "/srv/work/project/.uexec",
    "/tmp/uexec-s1/.git",
    "/tmp/uexec-s1/.uexec",
    "/srv/work/project/.git/.git",
    "/srv/work/project/.git/.uexec",
  ]);
});

Deno.test("resolution rejects a relative context path", () => {
  const profile = parseProfile("p/x.json", JSON.stringify(VALID));
  assert.throws(() => resolveProfile(profile, { ...CTX, workdir: "project" }), /workdir/);
  assert.throws(() => resolveProfile(profile, { ...CTX, serverPid: 0 }), /serverPid/);
});

Deno.test("broken profiles name the file and the field", async (t) => {
  const cases: [string, Record<string, unknown>, string, RegExp][] = [
    ["unknown top-level field", { extra: 1 }, "extra", /Unrecognized key/],
    ["unknown limits field", { limits: { max_procs: 3 } }, "limits.max_procs", /Unrecognized/],
    ["wrong type", { enforce: "yes" }, "enforce", /expected boolean/],
    ["wrong limit type", { limits: { cpu_seconds: "10" } }, "limits.cpu_seconds", /number/],
    ["negative limit", { limits: { max_processes: -1 } }, "limits.max_processes", />0|positive/],
    ["bad network", { network: "internet" }, "network", /none|loopback|all/],
    ["missing field", { description: undefined }, "description", /expected string/],
    ["unknown placeholder", { writable_roots: ["{workspace}/x"] }, "writable_roots[0]", /must/],
    ["placeholder mid-path", { deny_read: ["/x/{home}"] }, "deny_read[0]", /placeholder/],
    ["bad pid placeholder", { deny_read: ["/proc/{pid}"] }, "deny_read[0]", /placeholder/],
    ["relative root", { readable_roots: ["usr"] }, "readable_roots[0]", /absolute/],
    ["dot-dot", { writable_roots: ["{workdir}/../etc"] }, "writable_roots[0]", /".."/],
    ["absolute subpath", { read_only_subpaths: ["/.git"] }, "read_only_subpaths[0]", /relative/],
    ["placeholder subpath", { read_only_subpaths: ["{tmp}"] }, "read_only_subpaths[0]", /plac/],
    ["bad condition", { deny_read: [{ path: "/x", when: "always" }] }, "deny_read[0]", /./],
    ["ports without network", { tcp_ports: [80] }, "tcp_ports", /port list/],
    [
      "port out of range",
      {
        network: "all",
        tcp_ports: [70000],
      },
      "tcp_ports[0]",
      /65535/,
    ],
  ];
  for (const [label, change, field, detail] of cases) {
    await t.step(label, () => {
      const err = parseVariant(change);
      assert.equal(err.file, "profiles/custom.json");
      assert.equal(err.field, field);
      assert.match(err.message, /^invalid sandbox profile profiles\/custom\.json: field "/);
      assert.match(err.message, detail);
    });
  }
});

Deno.test("loadProfiles stops on a broken file and names it", async (t) => {
  const dir = Deno.makeTempDirSync();
  try {
    Deno.writeTextFileSync(`${dir}/good.json`, JSON.stringify(VALID));
    Deno.writeTextFileSync(`${dir}/README.md`, "not a profile");
    await t.step("valid directory loads, other files ignored", () => {
      assert.deepEqual([...loadProfiles(dir).keys()], ["good"]);
    });
    await t.step("bad JSON", () => {
      Deno.writeTextFileSync(`${dir}/broken.json`, '{"description": ');
      assert.throws(() => loadProfiles(dir), (err: unknown) => {
        assert.ok(err instanceof ProfileError);
        assert.equal(err.file, `${dir}/broken.json`);
        assert.match(err.message, /not valid JSON/);
        return true;
      });
    });
    await t.step("wrong type in a second file", () => {
      Deno.writeTextFileSync(
        `${dir}/broken.json`,
        JSON.stringify({ ...VALID, network: 3 }),
      );
      assert.throws(() => loadProfiles(dir), (err: unknown) => {
        assert.ok(err instanceof ProfileError);
        assert.equal(err.file, `${dir}/broken.json`);
        assert.equal(err.field, "network");
        return true;
      });
    });
    await t.step("bad file name", () => {
      Deno.removeSync(`${dir}/broken.json`);
      Deno.writeTextFileSync(`${dir}/Bad Name.json`, JSON.stringify(VALID));
      assert.throws(() => loadProfiles(dir), /profile name "Bad Name"/);
    });
    await t.step("empty or missing directory", () => {
      const empty = Deno.makeTempDirSync();
      assert.throws(() => loadProfiles(empty), /no \*\.json profile/);
      Deno.removeSync(empty);
      assert.throws(() => loadProfiles(empty), /cannot read the profile directory/);
    });
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("path helpers", () => {
  assert.equal(normalizeAbsolutePath("/a//b/./c/../d/"), "/a/b/d");
  assert.equal(normalizeAbsolutePath("/../.."), "/");
  assert.throws(() => normalizeAbsolutePath("a/b"), /absolute/);
  assert.ok(isWithin("/a/b", "/a"));
  assert.ok(isWithin("/a", "/a"));
  assert.ok(isWithin("/a", "/"));
  assert.ok(!isWithin("/ab", "/a"));
  assert.ok(!isWithin("/a", "/a/b"));
});

Deno.test("a cap admits no profile reaching more unix sockets or with looser limits", () => {
  const cap = loadProfiles(PROFILE_DIR).get("workspace-write")!;
  assert.equal(fitsWithin(cap, cap), true);
  // The same walls plus the Docker socket (root on the host): not within the cap.
  assert.equal(fitsWithin({ ...cap, unixSockets: ["/var/run/docker.sock"] }, cap), false);
  assert.equal(
    fitsWithin(cap, { ...cap, unixSockets: ["/var/run/docker.sock"] }),
    true,
    "fewer sockets than the cap",
  );
  // Looser limits, or none where the cap has one: not within it; tighter ones are.
  const { maxProcesses, ...noProcessLimit } = cap.limits;
  assert.equal(fitsWithin({ ...cap, limits: noProcessLimit }, cap), false);
  assert.equal(
    fitsWithin({ ...cap, limits: { ...cap.limits, maxProcesses: maxProcesses! * 2 } }, cap),
    false,
  );
  assert.equal(fitsWithin({ ...cap, limits: { ...cap.limits, cpuSeconds: 1 } }, cap), true);
});
