/**
 * The seccomp-BPF filter for the `none` network mode, built in TypeScript and installed on the
 * calling thread only (no TSYNC), so only that thread and the children it spawns are filtered.
 *
 * It refuses, with EPERM: `socket` for AF_INET, AF_INET6 and AF_PACKET; io_uring (whose
 * IORING_OP_SOCKET would bypass the socket check); every x32 system call. A foreign
 * architecture is killed. This module must never install a filter on an architecture whose
 * system call numbers it does not know, and never use SECCOMP_FILTER_FLAG_TSYNC.
 *
 * @module
 */

import { E, readSmallFile } from "../ffi/libc.ts";
import { checkedSyscall, SYS } from "./syscalls.ts";

const BPF_LD_W_ABS = 0x20;
const BPF_JEQ_K = 0x15;
const BPF_JGE_K = 0x35;
const BPF_RET_K = 0x06;

const RET_KILL_PROCESS = 0x80000000;
const RET_ERRNO = 0x00050000;
const RET_ALLOW = 0x7fff0000;

const AUDIT_ARCH_X86_64 = 0xc000003e;
const X32_SYSCALL_BIT = 0x40000000;
const AF_INET = 2;
const AF_INET6 = 10;
const AF_PACKET = 17;

const OFFSET_NR = 0;
const OFFSET_ARCH = 4;
const OFFSET_ARG0 = 16;

const SECCOMP_SET_MODE_FILTER = 1;

/** One `struct sock_filter` instruction. */
export interface BpfInstruction {
  code: number;
  jt: number;
  jf: number;
  k: number;
}

const load = (offset: number): BpfInstruction => ({ code: BPF_LD_W_ABS, jt: 0, jf: 0, k: offset });
const ret = (k: number): BpfInstruction => ({ code: BPF_RET_K, jt: 0, jf: 0, k });
const jeq = (k: number, jt: number, jf: number): BpfInstruction => ({ code: BPF_JEQ_K, jt, jf, k });
const jge = (k: number, jt: number, jf: number): BpfInstruction => ({ code: BPF_JGE_K, jt, jf, k });

/** The filter program (x86_64 only). */
export function denyNetworkProgram(): BpfInstruction[] {
  const denyErrno = RET_ERRNO | E.EPERM;
  const ioUring = [SYS.io_uring_setup, SYS.io_uring_enter, SYS.io_uring_register];
  const families = [AF_INET, AF_INET6, AF_PACKET];
  // Layout after the arch check: [nr checks..., ALLOW, DENY, socket family checks..., ALLOW].
  const nrChecks = 2 + ioUring.length;
  const program: BpfInstruction[] = [
    load(OFFSET_ARCH),
    jeq(AUDIT_ARCH_X86_64, 1, 0),
    ret(RET_KILL_PROCESS),
    load(OFFSET_NR),
  ];
  // Jump offsets are relative to the next instruction; ALLOW sits right after the nr checks.
  program.push(jge(X32_SYSCALL_BIT, nrChecks, 0));
  ioUring.forEach((nr, i) => program.push(jeq(nr, nrChecks - 1 - i, 0)));
  program.push(jeq(SYS.socket, 2, 0));
  program.push(ret(RET_ALLOW), ret(denyErrno));
  program.push(load(OFFSET_ARG0));
  families.forEach((af, i) => program.push(jeq(af, families.length - i, 0)));
  program.push(ret(RET_ALLOW), ret(denyErrno));
  return program;
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

/** Whether the filter can be installed on this machine's architecture. */
export function seccompSupported(): boolean {
  if (Deno.build.os !== "linux" || Deno.build.arch !== "x86_64") return false;
  return readSmallFile("/proc/sys/kernel/seccomp/actions_avail")?.includes("errno") ?? false;
}

/**
 * Installs the filter on the calling thread. NO_NEW_PRIVS must already be set on it (or the
 * thread must hold CAP_SYS_ADMIN). Throws on a foreign architecture or any kernel error.
 */
export function installNetworkFilter(): void {
  if (Deno.build.arch !== "x86_64") {
    throw new Error(`the seccomp filter only knows x86_64 system calls, not ${Deno.build.arch}`);
  }
  const filter = encodeProgram(denyNetworkProgram());
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
