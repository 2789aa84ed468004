/**
 * Waiting for processes that are not our children to be gone: a pidfd becomes readable when
 * its process exits (zombies included), so the reactor wakes us; no polling. It never reaps:
 * these processes belong to whoever their parent is.
 *
 * @module
 */

import { libc, rawSyscall } from "../ffi/libc.ts";
import { EPOLLIN, type Reactor } from "../io/reactor.ts";

const SYS_PIDFD_OPEN = 434;

/** Resolve once every process in `pids` has exited, or after `limitMs`, whichever is first. */
export async function whenGone(reactor: Reactor, pids: number[], limitMs: number): Promise<void> {
  const c = libc();
  const waits: Promise<void>[] = [];
  const cleanups: (() => void)[] = [];
  for (const pid of pids) {
    const fd = rawSyscall(SYS_PIDFD_OPEN, pid, 0);
    if (fd < 0) continue;
    const { promise, resolve } = Promise.withResolvers<void>();
    const reg = reactor.add(fd, EPOLLIN, { readable: resolve });
    cleanups.push(() => {
      reactor.remove(reg);
      c.close(fd);
    });
    waits.push(promise);
  }
  if (waits.length === 0) return;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const limit = new Promise<void>((resolve) => timer = setTimeout(resolve, limitMs));
  try {
    await Promise.race([Promise.all(waits), limit]);
  } finally {
    clearTimeout(timer);
    for (const cleanup of cleanups) cleanup();
  }
}
