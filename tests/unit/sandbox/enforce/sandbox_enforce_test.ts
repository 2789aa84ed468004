/**
 * Kernel-level tests of the Linux sandbox: real Landlock, seccomp, namespaces, uid drop and
 * rlimits, in a Worker that restricts its own thread and spawns real commands. Every denial
 * below is asserted with its exact text, on paths that root's DAC (and the test's own modes)
 * would allow, so no case can pass with the sandbox silently off.
 *
 * @module
 */

import assert from "node:assert/strict";
import { libc } from "../../../../src/ffi/libc.ts";
import { openPty } from "../../../../src/pty/open.ts";
import { sandboxIds } from "../../../../src/sandbox/identity/identity.ts";
import {
  createDomainDir,
  createPrivateDir,
  privateEnv,
  removePrivateDir,
} from "../../../../src/sandbox/identity/home.ts";
import { prepareWorkdir } from "../../../../src/sandbox/grants/workspace.ts";
import { withLimits } from "../../../../src/sandbox/enforce/limits.ts";
import { FS, landlockAbi, planRuleset } from "../../../../src/sandbox/enforce/landlock.ts";
import { type ApplyOptions, probeSandbox } from "../../../../src/sandbox/enforce/apply.ts";
import type { NetworkMode, ResolvedPolicy } from "../../../../src/sandbox/policy/policy.ts";
import { runSandboxed } from "../../../helpers/sandboxed.ts";
import type { CommandResult, WorkerReply } from "../../../fixtures/sandbox/enforce_worker.ts";

const SH = "/bin/sh";
const PY = "/usr/bin/python3";

interface Fixture {
  base: string;
  ws: string;
  outside: string;
  secret: string;
  domainDir: string;
  priv: ReturnType<typeof createPrivateDir>;
}

/** The sandbox ids of this (root) test process, and the session uid its commands run as. */
const IDS = sandboxIds()!;
const UID = IDS.last;
const GID = IDS.gid;

/** A root-owned tree: base (0700 at first) / ws (0755, with a 0777 `.git`), outside (0777), secret. */
function makeFixture(): Fixture {
  const base = Deno.makeTempDirSync({ prefix: "uexec-enforce-" });
  const ws = `${base}/ws`;
  Deno.mkdirSync(`${ws}/.git`, { recursive: true });
  Deno.chmodSync(ws, 0o755);
  Deno.chmodSync(`${ws}/.git`, 0o777);
  Deno.writeTextFileSync(`${ws}/.git/HEAD`, "ref: main\n", { mode: 0o666 });
  Deno.writeTextFileSync(`${ws}/existing.txt`, "old\n", { mode: 0o644 });
  const outside = `${base}/outside`;
  Deno.mkdirSync(outside, { mode: 0o777 });
  Deno.chmodSync(outside, 0o777);
  Deno.writeTextFileSync(`${outside}/readme`, "visible\n", { mode: 0o644 });
  const secret = `${base}/secret`;
  Deno.mkdirSync(secret, { mode: 0o755 });
  Deno.writeTextFileSync(`${secret}/key`, "s3cr3t\n", { mode: 0o644 });
  const domainDir = createDomainDir(GID);
  const priv = createPrivateDir({ uid: UID, gid: GID }, domainDir);
  return { base, ws, outside, secret, domainDir, priv };
}

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
    readOnlySubpaths: [`${f.ws}/.git`, `${f.ws}/.uexec`],
    denyRead: [f.secret, "/root", "/etc/shadow", `/proc/${Deno.pid}`],
    network,
    limits: {},
    ...extra,
  };
}

function sandboxed(
  f: Fixture,
  policy: ResolvedPolicy,
  commands: string[][],
  opts: ApplyOptions = {},
): Promise<WorkerReply> {
  return runSandboxed({
    policy,
    // The worker is told the ids: on its own it would lease another block of the pool.
    opts: { uid: IDS.spawner, gid: IDS.gid, ...opts },
    uid: UID,
    cwd: f.ws,
    env: { PATH: "/usr/bin:/bin", ...privateEnv(f.priv) },
    commands,
  });
}

async function run(
  f: Fixture,
  policy: ResolvedPolicy,
  commands: string[][],
): Promise<CommandResult[]> {
  const reply = await sandboxed(f, policy, commands);
  if ("error" in reply) throw new Error(`sandbox failed: ${reply.error}`);
  return reply.results;
}

const ok = (stdout: string) => ({ code: 0, signal: null, stdout, stderr: "" });

/** A TCP listener on the host's loopback that greets every client with `hello`. */
function listener(): { port: number; close: () => Promise<void> } {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const serving = (async () => {
    for await (const conn of l) {
      await conn.write(new TextEncoder().encode("hello"));
      conn.close();
    }
  })();
  return {
    port: (l.addr as Deno.NetAddr).port,
    close: async () => {
      l.close();
      await serving;
    },
  };
}

/** A PTY pair opened with libc (as the core does), its slave path, and how to close it. */

/** Python calling an x32 system call and io_uring_setup directly; prints each errno text. */
const RAW_SYSCALLS = `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for name, nr in [("x32-getpid", 0x40000000 + 39), ("io_uring_setup", 425)]:
    libc.syscall(nr, 0, 0)
    print(name, os.strerror(ctypes.get_errno()))
`;

/** A Python probe printing one line per network check: the result or the exception. */
function netProbe(ports: number[]): string {
  return `
import socket
def show(name, f):
    try:
        print(name, f())
    except Exception as e:
        print(name, type(e).__name__, e)
def tcp(port):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        return s.recv(10)
def udp():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        return s.sendto(b"x", ("127.0.0.1", 9))
def own_loopback():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        with socket.create_connection(srv.getsockname()) as c:
            a, _ = srv.accept()
            a.send(b"lo-ok")
            a.close()
            return c.recv(10)
for p in ${JSON.stringify(ports)}:
    show("tcp", lambda: tcp(p))
show("udp", udp)
show("dns", lambda: socket.getaddrinfo("example.com", 80)[0][4])
show("own-loopback", own_loopback)
`;
}

Deno.test("sandbox enforcement on the real kernel", async (t) => {
  assert.equal(Deno.uid(), 0, "these tests need root (uid drop, namespaces)");
  assert.ok(landlockAbi() >= 6, "these tests need Landlock ABI 6+");
  const f = makeFixture();
  try {
    await t.step("probe reports an enforceable sandbox with a uid per session", () => {
      assert.deepEqual(probeSandbox(), {
        landlock_abi: landlockAbi(),
        seccomp: true,
        drops_uid: true,
        uid_range: `${IDS.first}-${IDS.last}`,
        gid: IDS.gid,
        loopback: true,
        enforceable: true,
      });
    });

    await t.step("an unreachable workdir is refused with the reason and the fix", () => {
      const identity = IDS;
      assert.throws(() => prepareWorkdir(f.ws, identity, [`${f.ws}/.git`]), {
        name: "SandboxUnavailableError",
        message:
          `workdir ${f.ws} cannot be used by the sandbox group ${GID}: its ancestor ${f.base} ` +
          `(owner 0:0, mode 0700) does not let group ${GID} search it. Fix: move the workspace ` +
          `elsewhere, or allow search with "setfacl -m g:${GID}:x ${f.base}" (or "chmod o+x ${f.base}")`,
      });
      Deno.chmodSync(f.base, 0o755);
      assert.equal(prepareWorkdir(f.ws, identity, [`${f.ws}/.git`]), 3);
      assert.equal(prepareWorkdir(f.ws, identity, [`${f.ws}/.git`]), 0, "idempotent");
    });

    await t.step("workspace-write: root-owned workspace is editable, the rest is not", async () => {
      const [inside, outside, git] = await run(f, policyFor(f, "none"), [
        [
          SH,
          "-c",
          "id -u; id -G; echo new > new.txt; echo more >> existing.txt; mkdir sub; echo x > sub/f; cat existing.txt; echo t > $TMPDIR/t; echo h > $HOME/h",
        ],
        [SH, "-c", `echo x > ${f.outside}/x`],
        [SH, "-c", "echo x > .git/HEAD; echo y > .git/new; mkdir .git/d; cat .git/HEAD"],
      ]);
      assert.deepEqual(inside, ok(`${UID}\n${GID}\nold\nmore\n`));
      assert.equal(Deno.statSync(`${f.ws}/new.txt`).uid, UID);
      assert.equal(Deno.readTextFileSync(`${f.ws}/sub/f`), "x\n");
      assert.deepEqual(outside, {
        code: 2,
        signal: null,
        stdout: "",
        stderr: `/bin/sh: 1: cannot create ${f.outside}/x: Read-only file system\n`,
      });
      assert.deepEqual(git, {
        code: 0,
        signal: null,
        stdout: "ref: main\n",
        stderr: "/bin/sh: 1: cannot create .git/HEAD: Read-only file system\n" +
          "/bin/sh: 1: cannot create .git/new: Read-only file system\n" +
          "mkdir: cannot create directory '.git/d': Read-only file system\n",
      });
    });

    await t.step("deny-read paths can be neither read nor listed; siblings can", async () => {
      const [secret, sibling, shadow] = await run(f, policyFor(f, "none"), [
        [SH, "-c", `cat ${f.secret}/key; ls ${f.secret}`],
        [SH, "-c", `cat ${f.outside}/readme; ls ${f.outside}; ls ${f.ws}/.git`],
        [SH, "-c", "cat /etc/shadow; cat /etc/hostname >/dev/null && echo etc-ok; ls /root"],
      ]);
      assert.deepEqual(secret, {
        code: 2,
        signal: null,
        stdout: "",
        stderr:
          `cat: ${f.secret}/key: Permission denied\nls: cannot open directory '${f.secret}': Permission denied\n`,
      });
      assert.deepEqual(sibling, ok("visible\nreadme\nHEAD\n"));
      assert.deepEqual(shadow, {
        code: 2,
        signal: null,
        stdout: "etc-ok\n",
        stderr:
          "cat: /etc/shadow: Permission denied\nls: cannot open directory '/root': Permission denied\n",
      });
    });

    await t.step("the child can neither signal the server nor read its environ", async () => {
      const pid = Deno.pid;
      const [res] = await run(f, policyFor(f, "none"), [
        [
          SH,
          "-c",
          `kill -TERM ${pid}; cat /proc/${pid}/environ; for e in /proc/${pid}/task/*/environ; do cat $e >/dev/null 2>&1 && echo LEAK $e; done; echo end`,
        ],
      ]);
      assert.deepEqual(res, {
        code: 0,
        signal: null,
        stdout: "end\n",
        // dash prints an empty line after its kill error; the private hidepid procfs hides the
        // test process entirely.
        stderr:
          `/bin/sh: 1: kill: Operation not permitted\n\ncat: /proc/${pid}/environ: No such file or directory\n`,
      });
    });

    await t.step("network none: TCP, UDP, DNS and bash /dev/tcp are refused", async () => {
      const server = listener();
      try {
        const [probe, bash, raw] = await run(f, policyFor(f, "none"), [
          [PY, "-c", netProbe([server.port])],
          ["/usr/bin/bash", "-c", `exec 3<>/dev/tcp/127.0.0.1/${server.port}`],
          [PY, "-c", RAW_SYSCALLS],
        ]);
        assert.deepEqual(
          probe,
          ok(
            "tcp PermissionError [Errno 1] Operation not permitted\n" +
              "udp PermissionError [Errno 1] Operation not permitted\n" +
              "dns gaierror [Errno -3] Temporary failure in name resolution\n" +
              "own-loopback PermissionError [Errno 1] Operation not permitted\n",
          ),
        );
        assert.deepEqual(bash, {
          code: 1,
          signal: null,
          stdout: "",
          stderr: "/usr/bin/bash: socket: Operation not permitted\n" +
            `/usr/bin/bash: line 1: /dev/tcp/127.0.0.1/${server.port}: Operation not permitted\n`,
        });
        assert.deepEqual(
          raw,
          ok("x32-getpid Operation not permitted\nio_uring_setup Operation not permitted\n"),
        );
      } finally {
        await server.close();
      }
    });

    await t.step(
      "network loopback: a private lo only, the host's listener is unreachable",
      async () => {
        const server = listener();
        try {
          const [probe] = await run(f, policyFor(f, "loopback"), [[
            PY,
            "-c",
            netProbe([server.port]),
          ]]);
          assert.deepEqual(
            probe,
            ok(
              "tcp ConnectionRefusedError [Errno 111] Connection refused\n" +
                "udp 1\n" +
                "dns gaierror [Errno -3] Temporary failure in name resolution\n" +
                "own-loopback b'lo-ok'\n",
            ),
          );
        } finally {
          await server.close();
        }
      },
    );

    await t.step(
      "network all: the host's listener is reachable; with ports, only those",
      async () => {
        const allowed = listener();
        const other = listener();
        try {
          const [all] = await run(f, policyFor(f, "all"), [[
            PY,
            "-c",
            netProbe([allowed.port, other.port]),
          ]]);
          const [ports] = await run(f, policyFor(f, "all", { tcpPorts: [allowed.port] }), [
            [PY, "-c", netProbe([allowed.port, other.port])],
          ]);
          const lines = (r: CommandResult) =>
            r.stdout.split("\n").filter((l) => !l.startsWith("dns "));
          assert.deepEqual(lines(all), [
            "tcp b'hello'",
            "tcp b'hello'",
            "udp 1",
            "own-loopback b'lo-ok'",
            "",
          ]);
          assert.deepEqual(lines(ports), [
            "tcp b'hello'",
            "tcp PermissionError [Errno 13] Permission denied",
            "udp 1",
            "own-loopback PermissionError [Errno 13] Permission denied",
            "",
          ]);
        } finally {
          await allowed.close();
          await other.close();
        }
      },
    );

    await t.step("limits stop a fork bomb, a huge file and a huge allocation", async () => {
      const forks = `
import os
r, w = os.pipe()
n = 0
try:
    while n < 1000:
        pid = os.fork()
        if pid == 0:
            os.close(w)
            os.read(r, 1)
            os._exit(0)
        n += 1
except OSError as e:
    print("refused:", e.strerror, "below limit:", n < 20)
os.close(w)
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
print("reaped")
`;
      for (const wrapper of ["dash", "prlimit"] as const) {
        const [bomb, big, mem] = await run(f, policyFor(f, "none"), [
          withLimits([PY, "-c", forks], { maxProcesses: 20 }, wrapper),
          withLimits(
            [SH, "-c", "head -c 8388608 /dev/zero > big; echo rc=$?; stat -c %s big"],
            { maxFileSizeBytes: 1 << 20 },
            wrapper,
          ),
          withLimits([PY, "-c", "bytearray(1 << 30)"], { addressSpaceBytes: 256 << 20 }, wrapper),
        ]);
        assert.deepEqual(
          bomb,
          ok("refused: Resource temporarily unavailable below limit: True\nreaped\n"),
        );
        assert.deepEqual(big, {
          code: 0,
          signal: null,
          stdout: "rc=153\n1048576\n",
          stderr: "File size limit exceeded\n",
        });
        assert.equal(mem.code, 1);
        assert.match(mem.stderr, /\nMemoryError\n$/);
      }
      const after = await new Deno.Command("/bin/sh", { args: ["-c", "echo server-fine"] })
        .output();
      assert.equal(new TextDecoder().decode(after.stdout), "server-fine\n");
    });

    await t.step(
      "the server's own thread stays unrestricted after workers restricted themselves",
      async () => {
        const netBefore = Deno.readLinkSync("/proc/thread-self/ns/net");
        await run(f, policyFor(f, "loopback"), [[SH, "-c", "true"]]);
        const status = Deno.readTextFileSync("/proc/thread-self/status");
        assert.match(status, /^NoNewPrivs:\t0$/m);
        assert.match(status, /^Seccomp:\t0$/m);
        assert.match(status, /^Uid:\t0\t0\t0\t0$/m);
        assert.equal(Deno.readLinkSync("/proc/thread-self/ns/net"), netBefore);
        assert.ok(!Deno.readTextFileSync("/proc/thread-self/mountinfo").includes(`${f.ws}/.git`));
        Deno.writeTextFileSync(`${f.outside}/from-main`, "main\n");
        const child = await new Deno.Command(SH, {
          args: ["-c", `id -u; echo c > ${f.outside}/from-child; cat ${f.secret}/key`],
        }).output();
        assert.equal(new TextDecoder().decode(child.stdout), "0\ns3cr3t\n");
        assert.equal(Deno.readTextFileSync(`${f.outside}/from-child`), "c\n");
        const server = listener();
        try {
          const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.port });
          const buf = new Uint8Array(5);
          assert.equal(await conn.read(buf), 5);
          conn.close();
        } finally {
          await server.close();
        }
      },
    );

    await t.step("host terminals are out of reach: the domain has its own devpts", async () => {
      const host = openPty({ cols: 80, rows: 24 });
      try {
        Deno.chownSync(host.slavePath, UID, GID);
        // Control: the host terminal is writable from outside the sandbox.
        await Deno.writeTextFile(host.slavePath, "from-host\n");
        const reply = await sandboxed(f, policyFor(f, "none"), [
          [SH, "-c", `ls /dev/pts; echo b > ${host.slavePath}`],
        ]);
        assert.deepEqual(reply, {
          results: [{
            code: 2,
            signal: null,
            stdout: "ptmx\n",
            stderr: `/bin/sh: 1: cannot create ${host.slavePath}: Permission denied\n`,
          }],
        });
      } finally {
        libc().close(host.master);
      }
    });

    await t.step(
      "a policy that cannot be enforced fails closed before any command runs",
      async () => {
        const reply = await sandboxed(f, policyFor(f, "none", { denyRead: ["/proc/sys/kernel"] }), [
          [SH, "-c", `echo ran > ${f.outside}/ran`],
        ]);
        assert.deepEqual(reply, {
          name: "SandboxUnavailableError",
          error: "cannot exclude /proc/sys/kernel: Landlock rules beneath /proc would " +
            "break /proc/self for new processes",
        });
        assert.throws(() => Deno.statSync(`${f.outside}/ran`), Deno.errors.NotFound);
      },
    );

    await t.step("without root mounts, read-only subpaths are cut out of the write grant", () => {
      const plan = planRuleset(policyFor(f, "none"), landlockAbi(), {
        readOnlyEnforcedElsewhere: false,
      });
      const writes = plan.paths.filter((r) => (r.access & FS.WRITE_FILE) !== 0n).map((r) => r.path);
      assert.ok(writes.includes(`${f.ws}/existing.txt`));
      assert.ok(writes.includes(`${f.ws}/sub`));
      assert.ok(
        !writes.includes(f.ws),
        "the root of the writable tree holds .git, so it gets no write rule",
      );
      assert.ok(!writes.some((p) => p.startsWith(`${f.ws}/.git`)));
      assert.ok(!plan.paths.some((r) => r.path === f.secret || r.path.startsWith(`${f.secret}/`)));
    });
  } finally {
    Deno.removeSync(f.base, { recursive: true });
    await removePrivateDir(f.domainDir);
  }
});
