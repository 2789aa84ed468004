/**
 * The seccomp-BPF filter every enforcing profile installs, built in TypeScript and installed on
 * the calling thread only (no TSYNC), so only that thread and the children it spawns are
 * filtered. One program, parameterised by the network mode:
 *
 * - `socket` and `socketpair` only for an allowed address family: AF_UNIX always, AF_INET and
 *   AF_INET6 only when the network is not `none` (so no AF_NETLINK, AF_PACKET, AF_VSOCK, ...);
 * - no new namespaces: `clone` and `unshare` with any `CLONE_NEW*` flag, `setns`; `clone3`
 *   (whose flags live in a struct seccomp cannot read) fails with ENOSYS, so libc falls back to
 *   `clone`, whose flags are checked. Two exceptions, for the spawning thread itself:
 *   `unshare(CLONE_NEWIPC)` alone (a private System V IPC namespace per session, see
 *   identity.ts) and `setns(fd, CLONE_NEWNS)` (into and out of a session's own mount namespace,
 *   session_ns.ts); the kernel refuses both to children, which hold no CAP_SYS_ADMIN and cannot
 *   make a user namespace to gain one;
 * - `pidfd_open` fails with ENOSYS (programs fall back to waiting on their children): it needs
 *   no permission at all, so it would hand a sandboxed command a descriptor on any host process
 *   that tells it when that process exits;
 * - `personality` only for the harmless personas (Linux, 32-bit, uname26, query);
 * - the usual container deny list ({@link DENIED_SYSCALLS}): keyrings, bpf, userfaultfd,
 *   perf_event_open, io_uring (whose IORING_OP_SOCKET would bypass the socket check), modules,
 *   kexec, mounts, swap, reboot, clocks, raw I/O ports, quotas, syslog and obsolete calls;
 * - every x32 system call; a foreign architecture is killed.
 *
 * Denials return EPERM, so programs fail cleanly. `ptrace`, `setresuid`, `setgroups`, `capset`
 * and `prctl` stay allowed: the spawning thread still switches credentials after the filter is
 * in place, and debuggers within one uid are legitimate.
 *
 * This module must never install a filter on an architecture whose system call numbers it does
 * not know, and never use SECCOMP_FILTER_FLAG_TSYNC.
 *
 * @module
 */

import { E, errno, noDescriptorFree, OsError, readSmallFile } from "../../ffi/libc.ts";
import type { NetworkMode } from "../policy/policy.ts";
import { checkedSyscall, SYS } from "../syscalls.ts";

const BPF_LD_W_ABS = 0x20;
const BPF_JEQ_K = 0x15;
const BPF_JGE_K = 0x35;
const BPF_JSET_K = 0x45;
const BPF_RET_K = 0x06;

const RET_KILL_PROCESS = 0x80000000;
const RET_ERRNO = 0x00050000;
const RET_ALLOW = 0x7fff0000;
const ENOSYS = 38;

const AUDIT_ARCH_X86_64 = 0xc000003e;
const X32_SYSCALL_BIT = 0x40000000;

const OFFSET_NR = 0;
const OFFSET_ARCH = 4;
/** Low 32 bits of args[0] (little-endian). */
const OFFSET_ARG0 = 16;
/** Low 32 bits of args[1]. */
const OFFSET_ARG1 = 24;
const SETNS = 308;
/** The one namespace type `setns` may join: the spawning thread's per-session mounts. */
const CLONE_NEWNS = 0x00020000;

const SECCOMP_SET_MODE_FILTER = 1;

/** Address families by name, with their numbers. */
const AF = { AF_UNIX: 1, AF_INET: 2, AF_INET6: 10 } as const;

/** Every `CLONE_NEW*` flag `clone` accepts (CLONE_NEWTIME shares its bit with the exit signal). */
const CLONE_NEW_FLAGS = 0x00020000 | // NEWNS
  0x02000000 | // NEWCGROUP
  0x04000000 | // NEWUTS
  0x08000000 | // NEWIPC
  0x10000000 | // NEWUSER
  0x20000000 | // NEWPID
  0x40000000; // NEWNET
/** The one namespace `unshare` may make: the spawning thread's per-session IPC namespace. */
const CLONE_NEWIPC = 0x08000000;
/** `unshare` also takes CLONE_NEWTIME. */
const UNSHARE_NEW_FLAGS = CLONE_NEW_FLAGS | 0x00000080;

/** Personas `personality` may set: PER_LINUX, PER_LINUX32, UNAME26 (and both), and the query. */
const SAFE_PERSONAS = [0x0, 0x8, 0x20000, 0x20008, 0xffffffff];

/**
 * x86_64 system calls refused with EPERM whatever their arguments: Docker's default deny list
 * and systemd's @obsolete, @module, @mount, @reboot, @swap, @clock, @raw-io groups, plus
 * keyrings, bpf, userfaultfd, perf_event_open, io_uring and namespace entry.
 */
export const DENIED_SYSCALLS: Readonly<Record<string, number>> = {
  uselib: 134,
  ustat: 136,
  sysfs: 139,
  vhangup: 153,
  pivot_root: 155,
  _sysctl: 156,
  adjtimex: 159,
  chroot: 161,
  acct: 163,
  settimeofday: 164,
  mount: 165,
  umount2: 166,
  swapon: 167,
  swapoff: 168,
  reboot: 169,
  sethostname: 170,
  setdomainname: 171,
  iopl: 172,
  ioperm: 173,
  create_module: 174,
  init_module: 175,
  delete_module: 176,
  get_kernel_syms: 177,
  query_module: 178,
  quotactl: 179,
  nfsservctl: 180,
  getpmsg: 181,
  putpmsg: 182,
  afs_syscall: 183,
  tuxcall: 184,
  security: 185,
  syslog: 103,
  lookup_dcookie: 212,
  clock_settime: 227,
  vserver: 236,
  kexec_load: 246,
  add_key: 248,
  request_key: 249,
  keyctl: 250,
  perf_event_open: 298,
  open_by_handle_at: 304,
  clock_adjtime: 305,
  finit_module: 313,
  kexec_file_load: 320,
  bpf: 321,
  userfaultfd: 323,
  io_uring_setup: SYS.io_uring_setup,
  io_uring_enter: SYS.io_uring_enter,
  io_uring_register: SYS.io_uring_register,
  open_tree: 428,
  move_mount: 429,
  fsopen: 430,
  fsconfig: 431,
  fsmount: 432,
  fspick: 433,
  quotactl_fd: 443,
  mount_setattr: SYS.mount_setattr,
};

/** System calls whose arguments the filter inspects. */
const NR = {
  socket: SYS.socket,
  socketpair: 53,
  clone: 56,
  unshare: SYS.unshare,
  personality: 135,
};
const CLONE3 = 435;
const PIDFD_OPEN = 434;

/** One `struct sock_filter` instruction. */
export interface BpfInstruction {
  code: number;
  jt: number;
  jf: number;
  k: number;
}

/** The address families `socket` and `socketpair` accept in network mode `network`. */
export function allowedFamilies(network: NetworkMode): (keyof typeof AF)[] {
  return network === "none" ? ["AF_UNIX"] : ["AF_UNIX", "AF_INET", "AF_INET6"];
}

/** An instruction whose jumps name labels; {@link assemble} turns them into offsets. */
type Step =
  | { label: string }
  | { code: number; k: number; jt?: string; jf?: string };

const load = (offset: number): Step => ({ code: BPF_LD_W_ABS, k: offset });
const ret = (k: number): Step => ({ code: BPF_RET_K, k });
const jeq = (k: number, jt?: string, jf?: string): Step => ({ code: BPF_JEQ_K, k, jt, jf });
const jge = (k: number, jt?: string, jf?: string): Step => ({ code: BPF_JGE_K, k, jt, jf });
const jset = (k: number, jt?: string, jf?: string): Step => ({ code: BPF_JSET_K, k, jt, jf });

/** Resolves label jumps (forward only; an absent target means the next instruction). */
function assemble(steps: Step[]): BpfInstruction[] {
  const at = new Map<string, number>();
  let index = 0;
  for (const step of steps) {
    if ("label" in step) at.set(step.label, index);
    else index++;
  }
  const program: BpfInstruction[] = [];
  const offset = (label: string | undefined): number => {
    if (label === undefined) return 0;
    const target = at.get(label);
    if (target === undefined) throw new Error(`BPF label ${label} is not defined`);
    const jump = target - program.length - 1;
    if (jump < 0 || jump > 255) throw new Error(`BPF jump to ${label} out of range: ${jump}`);
    return jump;
  };
  for (const step of steps) {
    if ("label" in step) continue;
    program.push({ code: step.code, jt: offset(step.jt), jf: offset(step.jf), k: step.k });
  }
  return program;
}

/** The filter program for network mode `network` (x86_64 only). */
export function filterProgram(network: NetworkMode): BpfInstruction[] {
  const deny = RET_ERRNO | E.EPERM;
  return assemble([
    load(OFFSET_ARCH),
    jeq(AUDIT_ARCH_X86_64, "native"),
    ret(RET_KILL_PROCESS),
    { label: "native" },
    load(OFFSET_NR),
    jge(X32_SYSCALL_BIT, "deny"),
    jeq(NR.socket, "family"),
    jeq(NR.socketpair, "family"),
    jeq(NR.clone, "clone"),
    jeq(NR.unshare, "unshare"),
    jeq(SETNS, "setns"),
    jeq(NR.personality, "personality"),
    jeq(CLONE3, "enosys"),
    jeq(PIDFD_OPEN, "enosys"),
    ...Object.values(DENIED_SYSCALLS).map((nr) => jeq(nr, "deny")),
    ret(RET_ALLOW),
    { label: "family" },
    load(OFFSET_ARG0),
    ...allowedFamilies(network).map((name) => jeq(AF[name], "allow")),
    ret(deny),
    { label: "clone" },
    load(OFFSET_ARG0),
    jset(CLONE_NEW_FLAGS, "deny", "allow"),
    { label: "unshare" },
    load(OFFSET_ARG0),
    jeq(CLONE_NEWIPC, "allow"),
    jset(UNSHARE_NEW_FLAGS, "deny", "allow"),
    { label: "setns" },
    load(OFFSET_ARG1),
    jeq(CLONE_NEWNS, "allow", "deny"),
    { label: "personality" },
    load(OFFSET_ARG0),
    ...SAFE_PERSONAS.map((persona) => jeq(persona, "allow")),
    ret(deny),
    { label: "allow" },
    ret(RET_ALLOW),
    { label: "deny" },
    ret(deny),
    { label: "enosys" },
    ret(RET_ERRNO | ENOSYS),
  ]);
}

/** What the filter refuses in one network mode, for `/healthz`. */
export interface SeccompDenials {
  /** Refused with EPERM whatever the arguments, sorted by name. */
  syscalls: string[];
  /** Refused only for some arguments: the call and the rule. */
  conditional: Record<string, string>;
  /**
   * Refused with ENOSYS so that callers fall back: libc to a call the filter can inspect, a
   * runtime watching its children from pidfds to waiting for them.
   */
  enosys: string[];
  /** The only families `socket` and `socketpair` accept. */
  socket_families_allowed: string[];
  /** How other ABIs are treated. */
  architectures: string;
}

/** What {@link filterProgram} refuses for `network`, derived from the same tables. */
export function seccompDenials(network: NetworkMode): SeccompDenials {
  const families = allowedFamilies(network);
  const personas = SAFE_PERSONAS.map((p) => `0x${p.toString(16)}`).join(", ");
  return {
    syscalls: Object.keys(DENIED_SYSCALLS).sort(),
    conditional: {
      socket: `families other than ${families.join(", ")}`,
      socketpair: `families other than ${families.join(", ")}`,
      clone: "with any CLONE_NEW* flag",
      unshare: "with any CLONE_NEW* flag but CLONE_NEWIPC alone (needs CAP_SYS_ADMIN)",
      setns: "but into a mount namespace, named as such (needs CAP_SYS_ADMIN)",
      personality: `personas other than ${personas}`,
    },
    enosys: ["clone3", "pidfd_open"],
    socket_families_allowed: families,
    architectures: "x86_64 only: x32 system calls are refused, other architectures are killed",
  };
}

/** Encodes instructions as an array of `struct sock_filter` (8 bytes each). */
export function encodeProgram(program: BpfInstruction[]): Uint8Array {
  const buf = new Uint8Array(program.length * 8);
  const view = new DataView(buf.buffer);
  program.forEach((ins, i) => {
    view.setUint16(i * 8, ins.code, true);
    view.setUint8(i * 8 + 2, ins.jt);
    view.setUint8(i * 8 + 3, ins.jf);
    view.setUint32(i * 8 + 4, ins.k, true);
  });
  return buf;
}

const ACTIONS_AVAIL = "/proc/sys/kernel/seccomp/actions_avail";

/**
 * Whether the filter can be installed on this machine's architecture. Throws when the kernel's
 * answer cannot be read for want of a descriptor: that is not an answer.
 */
export function seccompSupported(): boolean {
  if (Deno.build.os !== "linux" || Deno.build.arch !== "x86_64") return false;
  const actions = readSmallFile(ACTIONS_AVAIL);
  const code = errno();
  if (actions === undefined && noDescriptorFree(code)) {
    throw new OsError(`open(${ACTIONS_AVAIL})`, code);
  }
  return actions?.includes("errno") ?? false;
}

/**
 * Installs the filter for `network` on the calling thread. NO_NEW_PRIVS must already be set on
 * it (or the thread must hold CAP_SYS_ADMIN). Throws on a foreign architecture or any kernel
 * error.
 */
export function installFilter(network: NetworkMode): void {
  if (Deno.build.arch !== "x86_64") {
    throw new Error(`the seccomp filter only knows x86_64 system calls, not ${Deno.build.arch}`);
  }
  const filter = encodeProgram(filterProgram(network));
  const fprog = new Uint8Array(16);
  const view = new DataView(fprog.buffer);
  view.setUint16(0, filter.length / 8, true);
  const address = Deno.UnsafePointer.value(
    Deno.UnsafePointer.of(filter as Uint8Array<ArrayBuffer>),
  );
  view.setBigUint64(8, BigInt(address), true);
  checkedSyscall(
    "seccomp(SECCOMP_SET_MODE_FILTER)",
    SYS.seccomp,
    SECCOMP_SET_MODE_FILTER,
    0,
    fprog,
  );
}
