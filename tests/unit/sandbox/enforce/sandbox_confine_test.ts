/**
 * Kernel-level tests of what every enforcing profile confines beyond files: socket families,
 * namespaces, keyrings, bpf, userfaultfd, perf_event_open, personality, and pathname unix
 * sockets of root services. Real children run as a session uid under the real seccomp filter
 * and mount namespace. Each refused call below succeeds (or fails differently) for the same uid
 * without the sandbox, so no assertion could hold with the filter or the hiding silently off.
 *
 * @module
 */

import assert from "node:assert/strict";
import { sandboxIds } from "../../../../src/sandbox/identity/identity.ts";
import {
  createDomainDir,
  createPrivateDir,
  privateEnv,
  removePrivateDir,
} from "../../../../src/sandbox/identity/home.ts";
import type { NetworkMode, ResolvedPolicy } from "../../../../src/sandbox/policy/policy.ts";
import type { CommandResult } from "../../../fixtures/sandbox/enforce_worker.ts";
import { runSandboxed } from "../../../helpers/sandboxed.ts";
import { rootService } from "../../../helpers/unix_service.ts";

const SH = "/bin/sh";
const PY = "/usr/bin/python3";

/**
 * One line per probe: the call and "ok" or the errno text. Calls that would succeed in a new
 * process (clone, clone3) exit that process at once. `unshare` runs last: it would move this
 * process into new namespaces.
 */
const SYSCALL_PROBE = `
import ctypes, os, struct
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    return r, ctypes.get_errno()
def show(name, r, e):
    print(name, "ok" if r >= 0 else os.strerror(e))
def fork_like(name, nr, *args):
    r, e = call(nr, *args)
    if r == 0:
        os._exit(0)
    if r > 0:
        os.waitpid(r, 0)
    show(name, r, e)
SIGCHLD, NEWUSER, NEWNET = 17, 0x10000000, 0x40000000
for fam, name in [(1, "AF_UNIX"), (2, "AF_INET"), (10, "AF_INET6"), (16, "AF_NETLINK"), (17, "AF_PACKET"), (40, "AF_VSOCK")]:
    ctypes.set_errno(0)
    fd = libc.socket(fam, 2 if fam in (16, 17) else 1, 0)
    show("socket " + name, fd, ctypes.get_errno())
    if fd >= 0:
        os.close(fd)
pair = (ctypes.c_int * 2)()
ctypes.set_errno(0)
show("socketpair AF_UNIX", libc.socketpair(1, 1, 0, pair), ctypes.get_errno())
fork_like("clone", 56, SIGCHLD, 0, 0, 0, 0)
fork_like("clone NEWUSER", 56, NEWUSER | SIGCHLD, 0, 0, 0, 0)
args = (ctypes.c_uint64 * 11)()
args[0], args[4] = NEWUSER, SIGCHLD
fork_like("clone3 NEWUSER", 435, args, 88)
show("setns", *call(308, -1, 0))
show("keyctl", *call(250, 0, -3, 1))
show("add_key", *call(248, b"user", b"uexec-probe", b"x", 1, -2))
show("request_key", *call(249, b"user", b"uexec-absent", None, 0))
show("bpf", *call(321, 0xffff, None, 0))
show("userfaultfd", *call(323, 1 | os.O_CLOEXEC))
attr = ctypes.create_string_buffer(128)
struct.pack_into("<IIQ", attr, 0, 1, 128, 0)
struct.pack_into("<Q", attr, 40, 1 | 1 << 5 | 1 << 6)
show("perf_event_open", *call(298, attr, 0, -1, -1, 8))
show("personality query", *call(135, 0xffffffff))
show("personality ADDR_NO_RANDOMIZE", *call(135, 0x0040000))
show("umount2", *call(166, b"/", 0xffff))
ctypes.set_errno(0)
show("unshare NEWUSER|NEWNET", libc.unshare(NEWUSER | NEWNET), ctypes.get_errno())
`;

const EPERM = "Operation not permitted";

/** The probe's expected output; only the socket families differ between network modes. */
function expectedProbe(network: NetworkMode): string {
  const inet = network === "none" ? EPERM : "ok";
  return [
    "socket AF_UNIX ok",
    `socket AF_INET ${inet}`,
    `socket AF_INET6 ${inet}`,
    `socket AF_NETLINK ${EPERM}`,
    `socket AF_PACKET ${EPERM}`,
    `socket AF_VSOCK ${EPERM}`,
    "socketpair AF_UNIX ok",
    "clone ok",
    `clone NEWUSER ${EPERM}`,
    "clone3 NEWUSER Function not implemented",
    `setns ${EPERM}`,
    `keyctl ${EPERM}`,
    `add_key ${EPERM}`,
    `request_key ${EPERM}`,
    `bpf ${EPERM}`,
    `userfaultfd ${EPERM}`,
    `perf_event_open ${EPERM}`,
    "personality query ok",
    `personality ADDR_NO_RANDOMIZE ${EPERM}`,
    `umount2 ${EPERM}`,
    `unshare NEWUSER|NEWNET ${EPERM}`,
    "",
  ].join("\n");
}

/** Connects to each path given and prints what it answered, or the exception. */
const CONNECT_PROBE = `
import socket, sys
for path in sys.argv[1:]:
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(path)
            print(s.recv(16).decode())
    except OSError as e:
        print(type(e).__name__, e.strerror)
`;

interface Fixture {
  base: string;
  ws: string;
  domainDir: string;
  priv: ReturnType<typeof createPrivateDir>;
}

/** The sandbox ids of this (root) test process, and the session uid its commands run as. */
const IDS = sandboxIds()!;
const UID = IDS.last;

function policyFor(
  f: Fixture,
  network: NetworkMode,
  extra: Partial<ResolvedPolicy> = {},
): ResolvedPolicy {
  return {
    profile: "workspace-write",
    enforce: true,
    readableRoots: ["/"],
    writableRoots: [f.ws, f.priv.dir],
    readOnlySubpaths: [`${f.ws}/.git`],
    denyRead: [],
    network,
    limits: {},
    ...extra,
  };
}

async function run(
  f: Fixture,
  policy: ResolvedPolicy,
  commands: string[][],
): Promise<CommandResult[]> {
  const reply = await runSandboxed({
    policy,
    opts: { uid: IDS.spawner, gid: IDS.gid },
    uid: UID,
    cwd: f.ws,
    env: { PATH: "/usr/bin:/bin", ...privateEnv(f.priv) },
    commands,
  });
  if ("error" in reply) throw new Error(`sandbox failed: ${reply.error}`);
  return reply.results;
}

const ok = (stdout: string) => ({ code: 0, signal: null, stdout, stderr: "" });

Deno.test("every enforcing profile confines sockets, namespaces and kernel interfaces", async (t) => {
  assert.equal(Deno.uid(), 0, "these tests need root (uid drop, mount namespace)");
  const base = Deno.makeTempDirSync({ prefix: "uexec-confine-" });
  Deno.chmodSync(base, 0o755);
  const ws = `${base}/ws`;
  Deno.mkdirSync(ws, { mode: 0o777 });
  Deno.chmodSync(ws, 0o777);
  const domainDir = createDomainDir(IDS.gid);
  const priv = createPrivateDir({ uid: UID, gid: IDS.gid }, domainDir);
  const f: Fixture = { base, ws, domainDir, priv };
  try {
    for (const network of ["none", "loopback", "all"] as const) {
      await t.step(
        `network ${network}: socket families, namespaces, keyrings, bpf...`,
        async () => {
          const [probe, unshareUn, unshareUser] = await run(f, policyFor(f, network), [
            [PY, "-c", SYSCALL_PROBE],
            ["/usr/bin/unshare", "-U", "-n", "true"],
            ["/usr/bin/unshare", "--user", "true"],
          ]);
          assert.deepEqual(probe, ok(expectedProbe(network)));
          const refused = {
            code: 1,
            signal: null,
            stdout: "",
            stderr: `unshare: unshare failed: ${EPERM}\n`,
          };
          assert.deepEqual(unshareUn, refused);
          assert.deepEqual(unshareUser, refused);
        },
      );
    }

    await t.step("spawning and ordinary programs still work under the filter", async () => {
      const [pipeline, bash, python, git] = await run(f, policyFor(f, "none"), [
        [SH, "-c", "echo hi | tr a-z A-Z | wc -c"],
        ["/usr/bin/bash", "-c", "x=$(echo a; (echo b) | cat); echo $x"],
        [
          PY,
          "-c",
          "import threading, subprocess\n" +
          "t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()\n" +
          "print(subprocess.run(['echo', 'sub'], capture_output=True, text=True).stdout, end='')",
        ],
        [
          SH,
          "-c",
          "git init -q repo && cd repo && git -c user.name=n -c user.email=n@x commit -q " +
          "--allow-empty -m first && git log --format=%s",
        ],
      ]);
      assert.deepEqual(pipeline, ok("3\n"));
      assert.deepEqual(bash, ok("a b\n"));
      assert.deepEqual(python, ok("thread\nsub\n"));
      assert.deepEqual(git, ok("first\n"));
    });

    await t.step("a root service's 0777 socket outside the writable roots is hidden", async () => {
      const sockDir = Deno.makeTempDirSync({ prefix: "uexec-svc-" });
      Deno.chmodSync(sockDir, 0o755);
      const paths = {
        tmp: `${sockDir}/svc.sock`,
        run: `/run/uexec-test-${Deno.pid}.sock`,
        listed: `/run/uexec-test-${Deno.pid}-listed.sock`,
        session: `${f.priv.dir}/svc.sock`,
        workdir: `${f.ws}/svc.sock`,
      };
      const services = Object.entries(paths).map(([name, path]) => rootService(path, name));
      try {
        const argv = [PY, "-c", CONNECT_PROBE, ...Object.values(paths)];
        const refused = "ConnectionRefusedError Connection refused";
        for (const network of ["none", "loopback", "all"] as const) {
          const policy = policyFor(f, network, { unixSockets: [paths.listed] });
          const [probe] = await run(f, policy, [argv]);
          assert.deepEqual(
            probe,
            ok(`${refused}\n${refused}\nlisted\nsession\nworkdir\n`),
            `network ${network}`,
          );
        }
        const [unlisted] = await run(f, policyFor(f, "none"), [argv]);
        assert.deepEqual(
          unlisted,
          ok(`${refused}\n${refused}\n${refused}\nsession\nworkdir\n`),
        );
        // The host's view is untouched: the same sockets still answer outside the sandbox.
        const host = await new Deno.Command(PY, { args: argv.slice(1) }).output();
        assert.equal(new TextDecoder().decode(host.stdout), "tmp\nrun\nlisted\nsession\nworkdir\n");
        assert.ok(!Deno.readTextFileSync("/proc/self/mountinfo").includes(paths.run));
      } finally {
        for (const s of services) await s.close();
        Deno.removeSync(sockDir, { recursive: true });
      }
    });
  } finally {
    Deno.removeSync(base, { recursive: true });
    await removePrivateDir(f.domainDir);
  }
});
