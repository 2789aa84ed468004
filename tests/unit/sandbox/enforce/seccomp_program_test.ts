/**
 * The seccomp program, run through a small classic-BPF interpreter (the subset seccomp
 * programs use) for each rule's verdict, in each network mode; and its encoding and summary.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  type BpfInstruction,
  DENIED_SYSCALLS,
  encodeProgram,
  filterProgram,
  seccompDenials,
} from "../../../../src/sandbox/enforce/seccomp.ts";
import type { NetworkMode } from "../../../../src/sandbox/policy/policy.ts";

const X86_64 = 0xc000003e;
const I386 = 0x40000003;
const ALLOW = 0x7fff0000;
const KILL_PROCESS = 0x80000000;
const EPERM = 0x00050000 | 1;
const ENOSYS = 0x00050000 | 38;
const MODES: NetworkMode[] = ["none", "loopback", "all"];

/** `struct seccomp_data`: nr, arch, instruction pointer, six 64-bit arguments. */
function seccompData(nr: number, args: bigint[] = [], arch = X86_64): DataView {
  const view = new DataView(new ArrayBuffer(64));
  view.setInt32(0, nr, true);
  view.setUint32(4, arch, true);
  args.forEach((a, i) => view.setBigUint64(16 + 8 * i, BigInt.asUintN(64, a), true));
  return view;
}

/** Runs `program` on `data` as the kernel would; throws on anything seccomp would reject. */
function runBpf(program: BpfInstruction[], data: DataView): number {
  let a = 0;
  for (let pc = 0; pc < program.length;) {
    const { code, jt, jf, k } = program[pc];
    const branch = (taken: boolean) => pc + 1 + (taken ? jt : jf);
    switch (code) {
      case 0x20: // BPF_LD | BPF_W | BPF_ABS
        assert.ok(k % 4 === 0 && k + 4 <= data.byteLength, `aligned load in range at ${pc}`);
        a = data.getUint32(k, true);
        pc++;
        break;
      case 0x15: // BPF_JMP | BPF_JEQ | BPF_K
        pc = branch(a === k);
        break;
      case 0x35: // BPF_JMP | BPF_JGE | BPF_K
        pc = branch(a >= k);
        break;
      case 0x45: // BPF_JMP | BPF_JSET | BPF_K
        pc = branch(((a & k) >>> 0) !== 0);
        break;
      case 0x06: // BPF_RET | BPF_K
        return k;
      default:
        throw new Error(`instruction ${pc}: unexpected code 0x${code.toString(16)}`);
    }
  }
  throw new Error("fell off the end of the program");
}

function verdict(network: NetworkMode, nr: number, args: bigint[] = [], arch = X86_64): number {
  return runBpf(filterProgram(network), seccompData(nr, args, arch));
}

const CLONE_NEW = {
  NEWNS: 0x20000n,
  NEWCGROUP: 0x02000000n,
  NEWUTS: 0x04000000n,
  NEWIPC: 0x08000000n,
  NEWUSER: 0x10000000n,
  NEWPID: 0x20000000n,
  NEWNET: 0x40000000n,
};
const SIGCHLD = 17n;

Deno.test("seccomp program: shape and encoding", () => {
  for (const network of MODES) {
    const program = filterProgram(network);
    assert.ok(program.length < 4096, "within BPF_MAXINSNS");
    assert.deepEqual(program[0], { code: 0x20, jt: 0, jf: 0, k: 4 }, "loads the arch first");
    assert.equal(program.at(-1)!.code, 0x06, "ends with a return");
    program.forEach((ins, i) => {
      const isJump = (ins.code & 0x07) === 0x05;
      if (isJump) assert.ok(i + 1 + Math.max(ins.jt, ins.jf) < program.length, `jump at ${i}`);
      else assert.deepEqual([ins.jt, ins.jf], [0, 0], `no jump offsets at ${i}`);
    });
    const bytes = encodeProgram(program);
    assert.equal(bytes.length, program.length * 8);
    const view = new DataView(bytes.buffer);
    program.forEach((ins, i) => {
      assert.deepEqual(
        [
          view.getUint16(i * 8, true),
          view.getUint8(i * 8 + 2),
          view.getUint8(i * 8 + 3),
          view.getUint32(i * 8 + 4, true),
        ],
        [ins.code, ins.jt, ins.jf, ins.k],
      );
    });
  }
});

Deno.test("seccomp program: foreign architectures are killed, x32 calls refused", () => {
  for (const network of MODES) {
    assert.equal(verdict(network, 39, [], I386), KILL_PROCESS);
    assert.equal(verdict(network, 0x40000000 + 39), EPERM);
    assert.equal(verdict(network, 0x40000000 + 41, [1n]), EPERM);
  }
});

Deno.test("seccomp program: every listed call is refused whatever its arguments", () => {
  for (const network of MODES) {
    for (const [name, nr] of Object.entries(DENIED_SYSCALLS)) {
      assert.equal(verdict(network, nr), EPERM, `${name} (${network})`);
      assert.equal(verdict(network, nr, [1n, 2n, 3n]), EPERM, `${name} with args (${network})`);
    }
  }
  for (
    const name of [
      "keyctl",
      "add_key",
      "request_key",
      "bpf",
      "userfaultfd",
      "perf_event_open",
      "mount",
      "kexec_load",
      "init_module",
      "finit_module",
      "io_uring_setup",
      "open_by_handle_at",
    ]
  ) {
    assert.ok(name in DENIED_SYSCALLS, name);
  }
});

Deno.test("seccomp program: ordinary calls, credentials and debugging stay allowed", () => {
  const allowed = {
    read: 0,
    write: 1,
    openat: 257,
    connect: 42,
    execve: 59,
    fork: 57,
    vfork: 58,
    ptrace: 101,
    setgroups: 116,
    setresuid: 117,
    setresgid: 119,
    capset: 126,
    prctl: 157,
    name_to_handle_at: 303,
    seccomp: 317,
    landlock_restrict_self: 446,
  };
  for (const network of MODES) {
    for (const [name, nr] of Object.entries(allowed)) {
      assert.equal(verdict(network, nr, [0x10000000n]), ALLOW, `${name} (${network})`);
    }
  }
});

Deno.test("seccomp program: socket and socketpair families by allow-list", () => {
  const families = { AF_UNIX: 1, AF_INET: 2, AF_INET6: 10, AF_NETLINK: 16, AF_PACKET: 17 };
  const others = { AF_VSOCK: 40, AF_ALG: 38, AF_BLUETOOTH: 31, AF_KEY: 15, AF_UNSPEC: 0 };
  for (const nr of [41, 53]) {
    for (const network of MODES) {
      const expected = network === "none"
        ? { AF_UNIX: ALLOW, AF_INET: EPERM, AF_INET6: EPERM, AF_NETLINK: EPERM, AF_PACKET: EPERM }
        : { AF_UNIX: ALLOW, AF_INET: ALLOW, AF_INET6: ALLOW, AF_NETLINK: EPERM, AF_PACKET: EPERM };
      const got = Object.fromEntries(
        Object.entries(families).map(([name, af]) => [name, verdict(network, nr, [BigInt(af)])]),
      );
      assert.deepEqual(got, expected, `syscall ${nr}, ${network}`);
      for (const [name, af] of Object.entries(others)) {
        assert.equal(verdict(network, nr, [BigInt(af)]), EPERM, `${name} (${network})`);
      }
    }
  }
});

Deno.test("seccomp program: no new namespaces through clone, clone3 or unshare", () => {
  const spawnFlags = 0x100n | 0x4000n | SIGCHLD; // CLONE_VM | CLONE_VFORK: posix_spawn
  const threadFlags = 0x3d0f00n; // what pthread_create passes
  for (const network of MODES) {
    assert.equal(verdict(network, 56, [SIGCHLD]), ALLOW, "fork-like clone");
    assert.equal(verdict(network, 56, [spawnFlags]), ALLOW, "posix_spawn's clone");
    assert.equal(verdict(network, 56, [threadFlags]), ALLOW, "a thread");
    assert.equal(verdict(network, 272, [0x200n]), ALLOW, "unshare(CLONE_FS)");
    assert.equal(verdict(network, 272, [0x80n]), EPERM, "unshare(CLONE_NEWTIME)");
    for (const [name, flag] of Object.entries(CLONE_NEW)) {
      assert.equal(verdict(network, 56, [flag | SIGCHLD]), EPERM, `clone ${name}`);
      assert.equal(verdict(network, 56, [flag | spawnFlags]), EPERM, `clone ${name} + vfork`);
      if (name !== "NEWIPC") assert.equal(verdict(network, 272, [flag]), EPERM, `unshare ${name}`);
      assert.equal(verdict(network, 272, [flag | 0x200n]), EPERM, `unshare ${name} + CLONE_FS`);
    }
    // The spawning thread's per-session IPC namespace; children lack the capability it needs.
    assert.equal(verdict(network, 272, [CLONE_NEW.NEWIPC]), ALLOW, "unshare(CLONE_NEWIPC)");
    assert.equal(verdict(network, 435, [0n, 88n]), ENOSYS, "clone3 falls back to clone");
  }
});

Deno.test("seccomp program: pidfd_open is ENOSYS (no descriptor on a host process)", () => {
  for (const network of MODES) {
    assert.equal(verdict(network, 434, [1n, 0n]), ENOSYS, "pidfd_open");
    assert.equal(verdict(network, 62, [1n, 0n]), ALLOW, "kill stays (the kernel checks it)");
  }
});

Deno.test("seccomp program: setns only into a mount namespace, named as such", () => {
  for (const network of MODES) {
    // The spawning thread's terminal slots; children lack the capabilities setns needs.
    assert.equal(verdict(network, 308, [3n, CLONE_NEW.NEWNS]), ALLOW, "setns(CLONE_NEWNS)");
    assert.equal(verdict(network, 308, [3n, 0n]), EPERM, "setns of any type");
    for (const [name, flag] of Object.entries(CLONE_NEW)) {
      if (name === "NEWNS") continue;
      assert.equal(verdict(network, 308, [3n, flag]), EPERM, `setns ${name}`);
    }
  }
});

Deno.test("seccomp program: personality only for harmless personas", () => {
  for (const network of MODES) {
    for (const persona of [0x0n, 0x8n, 0x20000n, 0x20008n, 0xffffffffn]) {
      assert.equal(verdict(network, 135, [persona]), ALLOW, `persona 0x${persona.toString(16)}`);
    }
    for (const persona of [0x40000n, 0x400000n, 0x100000n, 0x40008n]) {
      assert.equal(verdict(network, 135, [persona]), EPERM, `persona 0x${persona.toString(16)}`);
    }
  }
});

Deno.test("seccompDenials: the /healthz summary matches the program's tables", () => {
  const none = seccompDenials("none");
  assert.deepEqual(none.socket_families_allowed, ["AF_UNIX"]);
  assert.deepEqual(seccompDenials("loopback").socket_families_allowed, [
    "AF_UNIX",
    "AF_INET",
    "AF_INET6",
  ]);
  assert.deepEqual(none.syscalls, Object.keys(DENIED_SYSCALLS).sort());
  assert.deepEqual(none.enosys, ["clone3", "pidfd_open"]);
  assert.deepEqual(Object.keys(none.conditional).sort(), [
    "clone",
    "personality",
    "setns",
    "socket",
    "socketpair",
    "unshare",
  ]);
  assert.equal(none.conditional.socket, "families other than AF_UNIX");
});
