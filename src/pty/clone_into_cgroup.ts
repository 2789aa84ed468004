/**
 * Starting a child straight inside its session's cgroups, with no gate: `clone3` with
 * `CLONE_INTO_CGROUP` puts it in its v2 cgroup as it is made, and it inherits its v1 cgroups
 * (`pids`, `memory` on a hybrid host) from the spawning thread, which moves itself, alone, into
 * the session's v1 cgroups just before (writing `0` to their `tasks` files, which the kernel
 * does without the global lock that a pid written to `cgroup.procs` takes, and that costs each
 * start an RCU grace period) and back into the server's own right after.
 *
 * glibc 2.36 has no `posix_spawnattr_setcgroup_np` (2.39 has), and a child made by `syscall`
 * through FFI would return into V8 in a copy of a multi-threaded process. So the child runs a
 * small x86-64 routine of our own in an executable page, called through
 * `Deno.UnsafeFnPointer` (public Deno API; there is no other way to run native code without a
 * build step): `clone3` with `CLONE_VM | CLONE_VFORK` on a stack of its own, after which the
 * child only makes the system calls of a list prepared beforehand (signals to their defaults
 * and unblocked, a new session, the working directory, stdio, no other descriptor, `execve`),
 * all async-signal-safe; a required one that fails stores its errno where the parent reads it
 * and exits 127. The calling thread blocks every signal around the call, so no handler of the
 * server runs in the child, which shares its memory until `execve`.
 *
 * Only for a thread without a seccomp filter (a restricted spawner's answers `clone3` with
 * ENOSYS) and without a uid switch (the kernel checks `CLONE_INTO_CGROUP` against the caller's
 * credentials); elsewhere the cgroup gate (sandbox/limits.ts) places children. It must never
 * let a child run anything before it is in all its cgroups, never leave the spawning thread in
 * a session's cgroup (a thread that cannot move back is reported stuck, and never spawns
 * again), and never be used where {@link cloneIntoCgroupWorks} is false.
 *
 * @module
 */

import { cString, cStringArray, E, errno, libc, OsError, rawSyscall } from "../ffi/libc.ts";

const SYS = {
  rt_sigaction: 13,
  rt_sigprocmask: 14,
  dup2: 33,
  chdir: 80,
  setsid: 112,
  openat: 257,
  close: 3,
  execve: 59,
  close_range: 436,
  clone3: 435,
} as const;

const CLONE_VM = 0x100n;
const CLONE_VFORK = 0x4000n;
const CLONE_INTO_CGROUP = 0x200000000n;
const SIGCHLD = 17n;
/** `struct clone_args` up to `cgroup` (CLONE_ARGS_SIZE_VER2). */
const CLONE_ARGS_SIZE = 88;
const SIG_BLOCK = 0;
const SIG_SETMASK = 2;
const AT_FDCWD = -100;
const O_RDWR = 2;
const PROT_READ = 1;
const PROT_WRITE = 2;
const PROT_EXEC = 4;
const MAP_PRIVATE_ANONYMOUS = 0x22;
const MAP_FAILED = 0xffffffffffffffffn;
const CHILD_STACK_BYTES = 64 * 1024;
/** Signals 1..64; SIGKILL and SIGSTOP refuse a disposition, which is fine. */
const SIGNALS = 64;

/**
 * The routine (x86-64, System V): `(clone_args*, size, program*, errno_slot*) -> pid or -errno`.
 *
 *     push rbx; push r12; push r13; mov r12, rdx; mov r13, rcx
 *     mov eax, 435; syscall               ; clone3(args, size)
 *     test rax, rax; jnz parent
 *   next:                                 ; the child, on its own stack, touches no stack
 *     mov rax, [r12]; cmp rax, -1; je no_exec
 *     mov rdi, [r12+8]; mov rsi, [r12+16]; mov rdx, [r12+24]
 *     mov r10, [r12+32]; mov r8, [r12+40]; mov r9, [r12+48]
 *     syscall
 *     test rax, rax; jns ok
 *     test qword [r12+56], 1; jz ok       ; failure allowed
 *     neg rax; mov [r13], eax; jmp out
 *   ok: add r12, 64; jmp next
 *   no_exec: mov dword [r13], 8           ; ENOEXEC: the list ended without execve
 *   out: mov edi, 127; mov eax, 231; syscall; hlt   ; exit_group(127)
 *   parent: pop r13; pop r12; pop rbx; ret
 */
const ROUTINE = new Uint8Array([
  0x53,
  0x41,
  0x54,
  0x41,
  0x55,
  0x49,
  0x89,
  0xd4,
  0x49,
  0x89,
  0xcd,
  0xb8,
  0xb3,
  0x01,
  0x00,
  0x00,
  0x0f,
  0x05,
  0x48,
  0x85,
  0xc0,
  0x75,
  0x5e,
  0x49,
  0x8b,
  0x04,
  0x24,
  0x48,
  0x83,
  0xf8,
  0xff,
  0x74,
  0x3f,
  0x49,
  0x8b,
  0x7c,
  0x24,
  0x08,
  0x49,
  0x8b,
  0x74,
  0x24,
  0x10,
  0x49,
  0x8b,
  0x54,
  0x24,
  0x18,
  0x4d,
  0x8b,
  0x54,
  0x24,
  0x20,
  0x4d,
  0x8b,
  0x44,
  0x24,
  0x28,
  0x4d,
  0x8b,
  0x4c,
  0x24,
  0x30,
  0x0f,
  0x05,
  0x48,
  0x85,
  0xc0,
  0x79,
  0x14,
  0x49,
  0xf7,
  0x44,
  0x24,
  0x38,
  0x01,
  0x00,
  0x00,
  0x00,
  0x74,
  0x09,
  0x48,
  0xf7,
  0xd8,
  0x41,
  0x89,
  0x45,
  0x00,
  0xeb,
  0x0e,
  0x49,
  0x83,
  0xc4,
  0x40,
  0xeb,
  0xb7,
  0x41,
  0xc7,
  0x45,
  0x00,
  0x08,
  0x00,
  0x00,
  0x00,
  0xbf,
  0x7f,
  0x00,
  0x00,
  0x00,
  0xb8,
  0xe7,
  0x00,
  0x00,
  0x00,
  0x0f,
  0x05,
  0xf4,
  0x41,
  0x5d,
  0x41,
  0x5c,
  0x5b,
  0xc3,
]);

const ROUTINE_DEFINITION = {
  parameters: ["buffer", "usize", "buffer", "buffer"],
  result: "i64",
} as const;

/** Where a child goes: its v2 cgroup and its v1 `tasks` files, and the server's own. */
export interface Placement {
  /** The session's v2 cgroup directory, opened `O_PATH`. */
  cgroup: number;
  /** The session's v1 `tasks` files (opened for writing by the server). */
  tasks: number[];
  /** This server's own v1 `tasks` files, which the spawning thread returns to. */
  home: number[];
}

/** How the child's stdio is made: the terminal's slave by path, or given pipes. */
export type ChildStdio = { path: string } | { stdin: number; output: number };

/** What the child is started with. */
export interface CloneSpec {
  file: string;
  argv: string[];
  env: string[];
  cwd: string;
}

/**
 * The child could not be placed: the thread could not move into the session's v1 cgroups (no
 * child was made), or, `stuck`, not back into the server's (it must never spawn again).
 */
export class PlacementError extends Error {
  override name = "PlacementError";
  constructor(message: string, readonly stuck: boolean) {
    super(message);
  }
}

let routine: Deno.UnsafeFnPointer<typeof ROUTINE_DEFINITION> | undefined;

/** The routine in an executable page of its own, made once per thread that asks. */
function nativeRoutine(): Deno.UnsafeFnPointer<typeof ROUTINE_DEFINITION> {
  if (routine) return routine;
  const c = libc();
  const address = c.mmap(null, 4096n, PROT_READ | PROT_WRITE, MAP_PRIVATE_ANONYMOUS, -1, 0n);
  if (address === null || Deno.UnsafePointer.value(address) === MAP_FAILED) {
    throw new OsError("mmap", errno());
  }
  new Uint8Array(Deno.UnsafePointerView.getArrayBuffer(address, 4096)).set(ROUTINE);
  if (c.mprotect(address, 4096n, PROT_READ | PROT_EXEC) !== 0) {
    throw new OsError("mprotect", errno());
  }
  routine = new Deno.UnsafeFnPointer(
    address as Deno.PointerObject<typeof ROUTINE_DEFINITION>,
    ROUTINE_DEFINITION,
  );
  return routine;
}

let works: boolean | undefined;

/**
 * Whether this host can start children this way: x86-64, and a kernel with `clone3` and
 * `CLONE_INTO_CGROUP` (5.7), probed once without making a child (a cgroup descriptor that is not
 * open is refused with EBADF where the flag is known, EINVAL where it is not, ENOSYS without
 * `clone3`).
 * Call it on a thread without a seccomp filter (the main thread).
 */
export function cloneIntoCgroupWorks(): boolean {
  if (works !== undefined) return works;
  if (Deno.build.os !== "linux" || Deno.build.arch !== "x86_64") return works = false;
  const args = new BigUint64Array(CLONE_ARGS_SIZE / 8);
  args[0] = CLONE_INTO_CGROUP;
  args[4] = SIGCHLD;
  args[10] = 0x7fffffffn; // the largest descriptor the kernel takes, never open (RLIMIT_NOFILE)
  // The kernel checks the descriptor before it copies anything: no child can be made here.
  const rc = rawSyscall(SYS.clone3, new Uint8Array(args.buffer), CLONE_ARGS_SIZE);
  works = rc === -1 && errno() === E.EBADF;
  return works;
}

/** The list the child runs: 8 words per system call (number, six arguments, must succeed). */
class Program {
  readonly words: BigInt64Array;
  #n = 0;
  /** Buffers the list points into, held until the call returns. */
  readonly held: Uint8Array[] = [];

  /** A list of at most `calls` calls, starting with those of `prefix` (a list not ended). */
  constructor(calls: number, prefix?: Program) {
    this.words = new BigInt64Array(calls * 8 + 1);
    if (prefix) {
      this.words.set(prefix.words.subarray(0, prefix.#n * 8));
      this.#n = prefix.#n;
    }
  }

  call(nr: number, must: boolean, ...args: (number | bigint | Uint8Array)[]): void {
    const at = this.#n++ * 8;
    this.words[at] = BigInt(nr);
    args.forEach((a, i) => this.words[at + 1 + i] = this.#word(a));
    this.words[at + 7] = must ? 1n : 0n;
  }

  /** Ends the list. */
  end(): Uint8Array {
    this.words[this.#n * 8] = -1n;
    return new Uint8Array(this.words.buffer);
  }

  #word(a: number | bigint | Uint8Array): bigint {
    if (typeof a === "bigint") return a;
    if (typeof a === "number") return BigInt(a);
    this.held.push(a);
    return BigInt(Deno.UnsafePointer.value(Deno.UnsafePointer.of(a as Uint8Array<ArrayBuffer>)));
  }
}

const ZERO_SIGACTION = new Uint8Array(32);
const EMPTY_SIGSET = new Uint8Array(8);

let resets: Program | undefined;

/**
 * The calls every child starts with, made once (about 60 µs of BigInt work saved per start):
 * every signal to its default disposition (SIGKILL and SIGSTOP refuse, which is fine), then an
 * empty signal mask. It points only into module constants, which stay where they are.
 */
function signalResets(): Program {
  if (resets) return resets;
  const program = new Program(SIGNALS + 1);
  for (let sig = 1; sig <= SIGNALS; sig++) {
    program.call(SYS.rt_sigaction, false, sig, ZERO_SIGACTION, 0, 8);
  }
  program.call(SYS.rt_sigprocmask, true, SIG_SETMASK, EMPTY_SIGSET, 0, 8);
  return resets = program;
}
const FULL_SIGSET = new Uint8Array(8).fill(0xff);
const stack = new Uint8Array(CHILD_STACK_BYTES);
const ZERO = new TextEncoder().encode("0");

/** Writes `0` (the calling thread) to each of `files`; false at the first that refuses it. */
function moveThread(files: number[]): boolean {
  const c = libc();
  for (const fd of files) if (c.write(fd, ZERO, 1n) !== 1) return false;
  return true;
}

/**
 * Start `spec` with `stdio` inside `placement`'s cgroups; returns its pid, or throws an
 * `OsError` with the errno of what failed (the child is reaped then). Synchronous FFI only, on
 * the spawning thread.
 */
export function cloneIntoCgroup(spec: CloneSpec, stdio: ChildStdio, placement: Placement): number {
  const held: Uint8Array[] = [];
  const program = new Program(SIGNALS + 10, signalResets());
  program.call(SYS.setsid, true);
  program.call(SYS.chdir, true, cString(spec.cwd));
  if ("path" in stdio) {
    program.call(SYS.close, false, 0);
    program.call(SYS.openat, true, AT_FDCWD, cString(stdio.path), O_RDWR, 0);
    program.call(SYS.dup2, true, 0, 1);
  } else {
    program.call(SYS.dup2, true, stdio.stdin, 0);
    program.call(SYS.dup2, true, stdio.output, 1);
  }
  program.call(SYS.dup2, true, 1, 2);
  program.call(SYS.close_range, true, 3, 0xffffffff, 0);
  const argv = cStringArray(spec.argv, held);
  const envp = cStringArray(spec.env, held);
  program.call(SYS.execve, true, cString(spec.file), argv, envp);
  const list = program.end();

  const args = new BigUint64Array(CLONE_ARGS_SIZE / 8);
  args[0] = CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP;
  args[4] = SIGCHLD;
  args[5] = BigInt(Deno.UnsafePointer.value(Deno.UnsafePointer.of(stack)));
  args[6] = BigInt(stack.length);
  args[10] = BigInt(placement.cgroup);
  const failed = new Uint8Array(4);
  const old = new Uint8Array(8);

  const fn = nativeRoutine();
  if (!moveThread(placement.tasks)) {
    const code = errno();
    const back = moveThread(placement.home);
    throw new PlacementError(
      `cannot move the spawning thread into the session's v1 cgroups (errno ${code})` +
        (back ? "" : `, nor back into the server's (errno ${errno()})`),
      !back,
    );
  }
  let pid = -E.EINVAL;
  let thrown: unknown;
  rawSyscall(SYS.rt_sigprocmask, SIG_BLOCK, FULL_SIGSET, old, 8);
  try {
    pid = Number(
      fn.call(new Uint8Array(args.buffer), BigInt(CLONE_ARGS_SIZE), list, failed),
    );
  } catch (err) {
    thrown = err;
  }
  rawSyscall(SYS.rt_sigprocmask, SIG_SETMASK, old, null, 8);
  if (!moveThread(placement.home)) {
    throw new PlacementError(
      `the spawning thread cannot return to the server's cgroups (errno ${errno()})`,
      true,
    );
  }
  if (thrown) throw thrown;
  // What the list points to stays referenced until here: the child read it from our memory.
  held.length = program.held.length = 0;
  if (pid < 0) throw new OsError("clone3", -pid);
  const code = new Int32Array(failed.buffer)[0];
  if (code !== 0) {
    libc().waitpid(pid, new Uint8Array(4), 0);
    throw new OsError("the child's start", code);
  }
  return pid;
}
