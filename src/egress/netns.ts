/**
 * Work done by the calling thread (the egress proxy's, gateway_worker.ts) inside another network
 * namespace, for as long as one synchronous call takes: `setns` in, the call, `setns` back. A
 * socket keeps the namespace it was made in, so a listener made this way inside a sandbox's
 * loopback-only namespace is reachable there (and nowhere else) while the server accepts on it
 * here, with Deno's own networking: Deno has no public API that adopts a raw descriptor, and
 * `Deno.listen` makes its socket synchronously on the calling thread, which is what makes this
 * work.
 *
 * `setns(CLONE_NEWNET)` moves the calling thread only and is allowed in a multithreaded
 * process; nothing else runs on that thread meanwhile (JavaScript is single-threaded), and
 * no thread is started by the calls made in there. It must never return with the thread still
 * in the other namespace: if the way back fails, the process exits at once (fail closed: the
 * thread's own connections would otherwise go into a sandbox's namespace).
 *
 * @module
 */

import { AT_FDCWD, cString, errno, O, OsError, rawSyscall } from "../ffi/libc.ts";

const SYS_SETNS = 308;
const SYS_OPENAT = 257;
const CLONE_NEWNET = 0x40000000;

let home: number | undefined;

/** The calling thread's own namespace, opened once (per thread: a module instance each). */
function hostNamespace(): number {
  if (home !== undefined) return home;
  const fd = rawSyscall(
    SYS_OPENAT,
    AT_FDCWD,
    cString("/proc/thread-self/ns/net"),
    O.CLOEXEC,
    0,
  );
  if (fd < 0) throw new OsError("open(/proc/thread-self/ns/net)", errno());
  return home = fd;
}

/** Runs `fn` (synchronous) on this thread inside the network namespace `nsFd`. */
export function insideNamespace<T>(nsFd: number, fn: () => T): T {
  const back = hostNamespace();
  if (rawSyscall(SYS_SETNS, nsFd, CLONE_NEWNET) !== 0) {
    throw new OsError("setns(sandbox network namespace)", errno());
  }
  try {
    return fn();
  } finally {
    if (rawSyscall(SYS_SETNS, back, CLONE_NEWNET) !== 0) {
      console.error(`uexec: cannot return to the server's network namespace (errno ${errno()})`);
      Deno.exit(70);
    }
  }
}
