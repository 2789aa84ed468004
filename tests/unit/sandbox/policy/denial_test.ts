/**
 * Denial detection, table-driven: every message shape seen on these machines, partial networks,
 * signals and SIGSYS, and Codex's known false positives, which must be negatives here.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  type CanAccess,
  type DenialResult,
  detectDenial,
  policyAllows,
  supervisorCanAccess,
} from "../../../../src/sandbox/policy/denial.ts";
import type { ResolvedPolicy } from "../../../../src/sandbox/policy/policy.ts";
import { loadProfiles, resolveProfile } from "../../../../src/sandbox/policy/profiles.ts";

const profiles = loadProfiles(new URL("../../../../sandbox-profiles", import.meta.url).pathname);
const CTX = {
  workdir: "/work/proj",
  tmp: "/tmp/uexec-s1",
  home: "/root",
  serverPid: 4242,
  childIsRoot: false,
};
const resolve = (name: string) => resolveProfile(profiles.get(name)!, CTX);

const ws = resolve("workspace-write");
const ro = resolve("read-only");
const net = resolve("workspace-write-net");
const full = resolve("full-access");
const loop: ResolvedPolicy = { ...ws, network: "loopback" };
const loopPorts: ResolvedPolicy = { ...ws, network: "loopback", tcpPorts: [5432] };
const allPorts: ResolvedPolicy = { ...ws, network: "all", tcpPorts: [443] };

const CWD = "/work/proj";
const always: CanAccess = () => true;
const never: CanAccess = () => false;

type Case = {
  name: string;
  policy: ResolvedPolicy;
  exit: number | null;
  output: string;
  expect: DenialResult;
  canAccess?: CanAccess;
  cwd?: string | null;
};

const no: DenialResult = { denied: false };
const fsWrite = (path: string, evidence: string): DenialResult => ({
  denied: true,
  denial: { kind: "fs-write", path, evidence },
});
const fsRead = (path: string, evidence: string): DenialResult => ({
  denied: true,
  denial: { kind: "fs-read", path, evidence },
});
const network = (evidence: string): DenialResult => ({
  denied: true,
  denial: { kind: "network", evidence },
});
/** A network denial naming only the port (a listening port, or a connection class's). */
const networkOn = (port: number) => (evidence: string): DenialResult => ({
  denied: true,
  denial: { kind: "network", port, evidence },
});
/** A network denial naming the host (and, where known, the port) the command aimed at. */
const networkTo = (host: string, port?: number) => (evidence: string): DenialResult => ({
  denied: true,
  denial: { kind: "network", host, ...(port === undefined ? {} : { port }), evidence },
});
const signal = (evidence: string): DenialResult => ({
  denied: true,
  denial: { kind: "signal", evidence },
});

/** A case whose evidence is its whole (single-line) output. */
function same(
  name: string,
  policy: ResolvedPolicy,
  exit: number,
  output: string,
  verdict: (evidence: string) => DenialResult,
): Case {
  return { name, policy, exit, output, expect: verdict(output) };
}

const PY_SOCKET = [
  "Traceback (most recent call last):",
  '  File "<string>", line 1, in <module>',
  '  File "/usr/lib/python3.11/socket.py", line 232, in __init__',
  "    _socket.socket.__init__(self, family, type, proto, fileno)",
  "PermissionError: [Errno 1] Operation not permitted",
].join("\n");

const CASES: Case[] = [
  {
    name: "python socket() refused by seccomp: the errno line follows the source line",
    policy: ws,
    exit: 1,
    output: PY_SOCKET,
    expect: network(
      "_socket.socket.__init__(self, family, type, proto, fileno) / PermissionError: [Errno 1] Operation not permitted",
    ),
  },
  {
    name: "python socket() EPERM with the network allowed is not a denial",
    policy: net,
    exit: 1,
    output: PY_SOCKET,
    expect: no,
  },
  {
    name: "python EPERM from something other than a socket is not a network denial",
    policy: ws,
    exit: 1,
    output: "    os.setuid(0)\nPermissionError: [Errno 1] Operation not permitted",
    expect: no,
  },
  // --- filesystem writes, message shapes from the facts note (Landlock EACCES, bwrap EROFS)
  same(
    "sh redirect",
    ws,
    2,
    "sh: 1: cannot create /etc/x: Permission denied",
    (e) => fsWrite("/etc/x", e),
  ),
  same(
    "bash redirect",
    ws,
    1,
    "bash: line 1: /etc/hosts.new: Permission denied",
    (e) => fsWrite("/etc/hosts.new", e),
  ),
  same(
    "touch",
    ws,
    1,
    "touch: cannot touch '/usr/local/x': Permission denied",
    (e) => fsWrite("/usr/local/x", e),
  ),
  same(
    "mkdir curly quotes",
    ws,
    1,
    "mkdir: cannot create directory ‘/opt/new’: Permission denied",
    (
      e,
    ) => fsWrite("/opt/new", e),
  ),
  same(
    "rm in .git",
    ws,
    1,
    "rm: cannot remove '/work/proj/.git/HEAD': Permission denied",
    (e) => fsWrite("/work/proj/.git/HEAD", e),
  ),
  same(
    "git lock in a nested repository (.git is read-only at any depth)",
    ws,
    128,
    "fatal: Unable to create '/work/proj/sub/repo/.git/index.lock': Permission denied",
    (e) => fsWrite("/work/proj/sub/repo/.git/index.lock", e),
  ),
  same(
    "nested .git granted as a writable root: its own permission errors are not denials",
    { ...ws, writableRoots: [...ws.writableRoots, "/work/proj/sub/repo/.git"] },
    128,
    "fatal: Unable to create '/work/proj/sub/repo/.git/index.lock': Permission denied",
    () => no,
  ),
  same(
    "a file named like a protected directory is not one",
    ws,
    1,
    "touch: cannot touch '/work/proj/notes.git': Permission denied",
    () => no,
  ),
  same(
    "cp EROFS",
    ws,
    1,
    "cp: cannot create regular file '/srv/x': Read-only file system",
    (e) => fsWrite("/srv/x", e),
  ),
  same(
    "ln",
    ws,
    1,
    "ln: failed to create symbolic link '/usr/bin/evil': Permission denied",
    (e) => fsWrite("/usr/bin/evil", e),
  ),
  same("truncate", ws, 1, "truncate: cannot open '/var/log/x' for writing: Permission denied", (
    e,
  ) => fsWrite("/var/log/x", e)),
  same(
    "mv: allowed source, denied target",
    ws,
    1,
    "mv: cannot move 'a.txt' to '/etc/a.txt': Permission denied",
    (
      e,
    ) => fsWrite("/etc/a.txt", e),
  ),
  same("python open for write", ws, 1, "PermissionError: [Errno 13] Permission denied: '/etc/x'", (
    e,
  ) => fsWrite("/etc/x", e)),
  same(
    "python EROFS",
    ws,
    1,
    "OSError: [Errno 30] Read-only file system: '/usr/x'",
    (e) => fsWrite("/usr/x", e),
  ),
  same(
    "git EROFS",
    ws,
    128,
    "fatal: cannot mkdir /opt/repo: Read-only file system",
    (e) => fsWrite("/opt/repo", e),
  ),
  same(
    "git lock, relative",
    ws,
    255,
    "error: could not lock config file .git/config: Permission denied",
    (
      e,
    ) => fsWrite("/work/proj/.git/config", e),
  ),
  same(
    "mkdir .uexec, relative",
    ws,
    1,
    "mkdir: cannot create directory '.uexec/x': Permission denied",
    (
      e,
    ) => fsWrite("/work/proj/.uexec/x", e),
  ),
  same(
    "read-only: relative touch in workdir",
    ro,
    1,
    "touch: cannot touch 'out.txt': Permission denied",
    (
      e,
    ) => fsWrite("/work/proj/out.txt", e),
  ),
  same(
    "sh with ../",
    ws,
    2,
    "sh: 1: cannot create ../other/x: Permission denied",
    (e) => fsWrite("/work/other/x", e),
  ),
  same(
    "backquote quoting",
    ws,
    1,
    "touch: cannot touch `/etc/y': Permission denied",
    (e) => fsWrite("/etc/y", e),
  ),
  same(
    "double quotes",
    ws,
    1,
    'error: unable to create file "/etc/z": Permission denied',
    (e) => fsWrite("/etc/z", e),
  ),
  // --- filesystem reads
  same(
    "git reads /root/.gitconfig",
    ws,
    128,
    "warning: unable to access '/root/.gitconfig': Permission denied",
    (
      e,
    ) => fsRead("/root/.gitconfig", e),
  ),
  same(
    "cat ssh key",
    ws,
    1,
    "cat: /root/.ssh/id_ed25519: Permission denied",
    (e) => fsRead("/root/.ssh/id_ed25519", e),
  ),
  same(
    "ls /root",
    ws,
    2,
    "ls: cannot open directory '/root': Permission denied",
    (e) => fsRead("/root", e),
  ),
  same(
    "server environ",
    ws,
    1,
    "cat: /proc/4242/environ: Permission denied",
    (e) => fsRead("/proc/4242/environ", e),
  ),
  same("cd into /root", ws, 1, "bash: cd: /root: Permission denied", (e) => fsRead("/root", e)),
  same(
    "/etc/shadow",
    ro,
    1,
    "cat: /etc/shadow: Permission denied",
    (e) => fsRead("/etc/shadow", e),
  ),
  {
    name: "evidence found among other lines, CRLF and ANSI colour",
    policy: ws,
    exit: 1,
    output: "building...\r\n\u001b[31mtouch: cannot touch '/etc/q': Permission denied\u001b[0m\r\n",
    expect: fsWrite("/etc/q", "touch: cannot touch '/etc/q': Permission denied"),
  },
  // --- network (policy none): every shape from the facts note
  same("bash connect", ws, 1, "bash: connect: Permission denied", network),
  same("bash socket", ws, 1, "bash: socket: Operation not permitted", network),
  same(
    "bash /dev/tcp line",
    ws,
    1,
    "bash: /dev/tcp/127.0.0.1/8080: Permission denied",
    networkTo("127.0.0.1", 8080),
  ),
  same(
    "curl 7",
    ws,
    7,
    "curl: (7) Failed to connect to 127.0.0.1 port 8080 after 0 ms: Couldn't connect to server",
    networkTo("127.0.0.1", 8080),
  ),
  same(
    "curl 6",
    ws,
    6,
    "curl: (6) Could not resolve host: deb.debian.org",
    networkTo("deb.debian.org"),
  ),
  same(
    "wget EACCES",
    ws,
    4,
    "Connecting to 127.0.0.1:8080... failed: Permission denied.",
    networkTo("127.0.0.1", 8080),
  ),
  same(
    "wget EPERM",
    ws,
    4,
    "Connecting to deb.debian.org (deb.debian.org)|151.101.2.132|:443... failed: Operation not permitted.",
    networkTo("151.101.2.132", 443),
  ),
  same(
    "python EACCES",
    ws,
    1,
    "urllib.error.URLError: <urlopen error [Errno 13] Permission denied>",
    network,
  ),
  same(
    "python EPERM",
    ws,
    1,
    "urllib.error.URLError: <urlopen error [Errno 1] Operation not permitted>",
    network,
  ),
  same(
    "ssh EACCES",
    ws,
    255,
    "ssh: connect to host 127.0.0.1 port 22: Permission denied",
    networkTo("127.0.0.1", 22),
  ),
  same("ssh EPERM", ws, 255, "socket: Operation not permitted", network),
  same(
    "node connect EPERM",
    ws,
    1,
    "Error: connect EPERM 1.1.1.1:80 - Local (undefined:undefined)",
    networkTo("1.1.1.1", 80),
  ),
  same("node fetch", ws, 1, "[cause]: Error: connect EPERM ::1:8080", networkTo("::1", 8080)),
  same(
    "node listen EPERM",
    ws,
    1,
    "Error: listen EPERM: operation not permitted 0.0.0.0:8125",
    networkOn(8125),
  ),
  same("node datagram bind EPERM", ws, 1, "Error: bind EPERM 0.0.0.0:5353", network),
  same(
    "npm DNS: the URL gives the port",
    ws,
    1,
    "npm error request to https://registry.npmjs.org/x failed, reason: getaddrinfo EAI_AGAIN registry.npmjs.org",
    networkTo("registry.npmjs.org", 443),
  ),
  same(
    "a URL with its own port",
    ws,
    1,
    "npm error request to https://registry.example.com:8443/x failed, reason: getaddrinfo EAI_AGAIN registry.example.com",
    networkTo("registry.example.com", 8443),
  ),
  same(
    "a URL with user info and an ssh scheme",
    ws,
    128,
    "fatal: unable to access 'ssh://git:tok@git.example.com/a.git': Could not resolve host",
    networkTo("git.example.com", 22),
  ),
  same(
    "ssh names the host it could not look up",
    ws,
    255,
    "ssh: Could not resolve hostname github.com: Temporary failure in name resolution",
    networkTo("github.com"),
  ),
  same(
    "wget names the host it could not look up",
    ws,
    4,
    "wget: unable to resolve host address ‘example.com’",
    networkTo("example.com"),
  ),
  // Without any network an IPv4-only lookup fails as if the name did not exist (seen in the
  // sandbox for registry.npmjs.org, which the host resolves): a denial there, not elsewhere.
  same(
    "node ENOTFOUND without any network",
    ws,
    1,
    "Error: getaddrinfo ENOTFOUND registry.npmjs.org",
    networkTo("registry.npmjs.org"),
  ),
  same(
    "pip without any network",
    ws,
    1,
    "WARNING: Retrying (Retry(total=4)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f75>: Failed to establish a new connection: [Errno -2] Name or service not known')': /simple/six/",
    networkOn(443),
  ),
  same(
    "node: a name error on a loopback-only network is not the sandbox",
    loop,
    1,
    "Error: getaddrinfo ENOTFOUND nosuch.example",
    () => no,
  ),
  same(
    "python: a name error with the network open is not the sandbox",
    net,
    1,
    "socket.gaierror: [Errno -2] Name or service not known",
    () => no,
  ),
  same(
    "node: a port below 1024 is refused to every unprivileged user",
    ws,
    1,
    "Error: listen EACCES: permission denied 0.0.0.0:80",
    () => no,
  ),
  same("network unreachable", ws, 2, "ping: connect: Network is unreachable", network),
  same(
    "git DNS",
    ws,
    128,
    "fatal: unable to access 'https://github.com/a/b/': Could not resolve host: github.com",
    networkTo("github.com", 443),
  ),
  same(
    "read-only also forbids network",
    ro,
    7,
    "curl: (7) Failed to connect to example.com port 80 after 3 ms: Couldn't connect to server",
    networkTo("example.com", 80),
  ),
  // --- partial network
  same(
    "loopback: refused on loopback is not the sandbox",
    loop,
    7,
    "curl: (7) Failed to connect to 127.0.0.1 port 9 after 0 ms: Couldn't connect to server",
    () => no,
  ),
  same(
    "loopback: external host",
    loop,
    7,
    "curl: (7) Failed to connect to example.com port 80 after 0 ms: Couldn't connect to server",
    networkTo("example.com", 80),
  ),
  same(
    "loopback: DNS failure is real",
    loop,
    6,
    "curl: (6) Could not resolve host: nosuch.example",
    () => no,
  ),
  same(
    "loopback: EACCES with unknown destination",
    loop,
    1,
    "bash: connect: Permission denied",
    network,
  ),
  same(
    "loopback ports: unlisted port",
    loopPorts,
    7,
    "curl: (7) Failed to connect to localhost port 8080 after 0 ms: Couldn't connect to server",
    networkTo("localhost", 8080),
  ),
  same(
    "loopback ports: listed port",
    loopPorts,
    7,
    "curl: (7) Failed to connect to localhost port 5432 after 0 ms: Couldn't connect to server",
    () => no,
  ),
  same(
    "loopback ports: node connect to an unlisted port",
    loopPorts,
    1,
    "Error: connect EACCES 127.0.0.1:8080",
    networkTo("127.0.0.1", 8080),
  ),
  same(
    "loopback ports: node listen on an unlisted port",
    loopPorts,
    1,
    "Error: listen EACCES: permission denied 0.0.0.0:3000",
    networkOn(3000),
  ),
  same(
    "loopback ports: node connect to a listed port",
    loopPorts,
    1,
    "Error: connect ECONNREFUSED 127.0.0.1:5432",
    () => no,
  ),
  same(
    "loopback ports: wget unlisted port",
    loopPorts,
    4,
    "Connecting to [::1]:8080... failed: Permission denied.",
    networkTo("[::1]", 8080),
  ),
  same(
    "all ports: unlisted port",
    allPorts,
    255,
    "ssh: connect to host github.com port 22: Permission denied",
    networkTo("github.com", 22),
  ),
  same(
    "all ports: listed port",
    allPorts,
    7,
    "curl: (7) Failed to connect to github.com port 443 after 9 ms: Couldn't connect to server",
    () => no,
  ),
  same(
    "all ports: weak error, unknown port",
    allPorts,
    2,
    "connect: Network is unreachable",
    () => no,
  ),
  same(
    "network all: nothing is a network denial",
    net,
    1,
    "bash: connect: Permission denied",
    () => no,
  ),
  same(
    "network all: curl failure",
    net,
    7,
    "curl: (7) Failed to connect to example.com port 80 after 0 ms: Couldn't connect to server",
    () => no,
  ),
  same(
    "connection refused is never evidence",
    ws,
    4,
    "Connecting to 127.0.0.1:8080... failed: Connection refused.",
    () => no,
  ),
  // --- signals and syscalls
  same("bash kill builtin", ws, 1, "bash: line 1: kill: (1) - Operation not permitted", signal),
  same("dash kill", ws, 2, "sh: 1: kill: Operation not permitted", signal),
  same("procps kill", ws, 1, "kill: (4242): Operation not permitted", signal),
  {
    name: "SIGSYS",
    policy: ws,
    exit: 159,
    output: "Bad system call (core dumped)",
    expect: {
      denied: true,
      denial: {
        kind: "syscall",
        evidence: "exit code 159: killed by SIGSYS (refused system call)",
      },
    },
  },
  // --- never denials
  same(
    "exit 0 is never a denial",
    ws,
    0,
    "touch: cannot touch '/etc/x': Permission denied",
    () => no,
  ),
  same(
    "full-access is never a denial",
    full,
    1,
    "touch: cannot touch '/etc/x': Permission denied",
    () => no,
  ),
  same("full-access SIGSYS", full, 159, "", () => no),
  {
    name: "unknown exit code",
    policy: ws,
    exit: null,
    output: "bash: connect: Permission denied",
    expect: no,
  },
  // --- Codex's false positives
  same(
    "find: path containing sandbox, missing",
    ws,
    1,
    "find: '/work/proj/sandbox/cache': No such file or directory",
    () => no,
  ),
  same(
    "find: path containing sandbox, DAC denial",
    ws,
    1,
    "find: '/home/u/sandbox': Permission denied",
    () => no,
  ),
  same("bash -c false", ws, 1, "", () => no),
  same("command not found", ws, 127, "bash: line 1: frobnicate: command not found", () => no),
  same(
    "ls of a missing file",
    ws,
    2,
    "ls: cannot access '/nope': No such file or directory",
    () => no,
  ),
  same(
    "exit 126 on an allowed path",
    ws,
    126,
    "bash: line 1: ./script.sh: Permission denied",
    () => no,
  ),
  same(
    "real DAC denial on a readable path",
    ws,
    1,
    "cat: /etc/ssl/private/key.pem: Permission denied",
    () => no,
  ),
  same(
    "DAC denial on a writable path",
    ws,
    1,
    "touch: cannot touch '/work/proj/locked': Permission denied",
    () => no,
  ),
  same("stty standard input", ro, 1, "stty: 'standard input': Permission denied", () => no),
  same("nice warning, no path", ro, 1, "nice: cannot set niceness: Permission denied", () => no),
  same(
    "rm of a file named kill",
    ws,
    1,
    "rm: cannot remove '/work/proj/kill': Operation not permitted",
    () => no,
  ),
  {
    name: "supervisor could not access either",
    policy: ws,
    exit: 1,
    output: "cat: /root/.ssh/id_ed25519: Permission denied",
    canAccess: never,
    expect: no,
  },
  {
    name: "relative path without a cwd is not evidence",
    policy: ro,
    exit: 1,
    output: "touch: cannot touch 'out.txt': Permission denied",
    cwd: null,
    expect: no,
  },
];

for (const c of CASES) {
  Deno.test(`detectDenial: ${c.name}`, () => {
    const actual = detectDenial({
      policy: c.policy,
      exitCode: c.exit,
      output: c.output,
      canAccess: c.canAccess ?? always,
      ...(c.cwd === null ? {} : { cwd: c.cwd ?? CWD }),
    });
    assert.deepEqual(actual, c.expect);
  });
}

Deno.test("a relative cwd is ignored, not an error", () => {
  const output = "touch: cannot touch 'out.txt': Permission denied";
  assert.deepEqual(
    detectDenial({ policy: ro, exitCode: 1, output, cwd: "proj", canAccess: always }),
    no,
  );
});

Deno.test("canAccess is asked about the right path and access", () => {
  const asked: string[] = [];
  const spy: CanAccess = (path, access) => {
    asked.push(`${access} ${path}`);
    return true;
  };
  detectDenial({
    policy: ws,
    exitCode: 1,
    output: "cat: /root/x: Permission denied",
    canAccess: spy,
  });
  detectDenial({
    policy: ws,
    exitCode: 1,
    output: "touch: cannot touch '/etc/x': Permission denied",
    canAccess: spy,
  });
  assert.deepEqual(asked, ["read /root/x", "write /etc/x"]);
});

Deno.test("policyAllows: the most specific entry wins, ties restrict", () => {
  const nested: ResolvedPolicy = {
    ...ws,
    writableRoots: ["/root/proj", "/tmp/s"],
    readOnlySubpaths: ["/root/proj/.git"],
    denyRead: ["/root", "/root/proj/secret"],
  };
  assert.ok(policyAllows(nested, "/usr/bin/ls", "read"));
  assert.ok(!policyAllows(nested, "/usr/bin/ls", "write"));
  assert.ok(!policyAllows(nested, "/root/.bashrc", "read"));
  assert.ok(policyAllows(nested, "/root/proj/src/a.ts", "read"));
  assert.ok(policyAllows(nested, "/root/proj/src/a.ts", "write"));
  assert.ok(!policyAllows(nested, "/root/proj/.git", "write"));
  assert.ok(policyAllows(nested, "/root/proj/.git/HEAD", "read"));
  assert.ok(!policyAllows(nested, "/root/proj/secret/k", "read"));
  assert.ok(!policyAllows(nested, "/root/proj/secret/k", "write"));
  assert.ok(policyAllows({ ...nested, enforce: false }, "/root/.bashrc", "write"));
  const tie: ResolvedPolicy = { ...ws, writableRoots: ["/a"], denyRead: ["/a"] };
  assert.ok(!policyAllows(tie, "/a/b", "read"));
  assert.ok(!policyAllows(tie, "/a/b", "write"));
});

Deno.test("supervisorCanAccess checks real files and never throws", () => {
  const dir = Deno.makeTempDirSync();
  try {
    Deno.writeTextFileSync(`${dir}/f`, "x");
    assert.ok(supervisorCanAccess(`${dir}/f`, "read"));
    assert.ok(supervisorCanAccess(`${dir}/f`, "write"));
    assert.ok(supervisorCanAccess(`${dir}/missing/deeper`, "write"));
    assert.equal(supervisorCanAccess("relative", "read"), false);
    assert.equal(supervisorCanAccess("/nul\0byte", "read"), false);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});
