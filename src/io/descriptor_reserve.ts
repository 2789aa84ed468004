/**
 * Headroom below the process's descriptor limit, kept for the runtime itself.
 *
 * Deno aborts the whole process when some of its own steps cannot get a file descriptor (seen
 * under 2.9.6: a panic on the main thread while it reads `/proc/self/maps` for a stack limit,
 * right after a session start met EMFILE). So the server holds `size` descriptors back; the
 * first start that meets EMFILE or ENFILE gives them up at once (`spend`), so that what the
 * runtime does next finds descriptors, and starts are refused without trying until twice as
 * many are free again (`replenish`), so that the server does not walk back to the edge.
 *
 * It must never hold a descriptor a child could inherit (each is close-on-exec, on /dev/null),
 * and it costs nothing while held: a check of one field. Workers started after start-up go
 * through {@link startWorker}, which refuses rather than let a new worker abort the process.
 *
 * @module
 */

import { closeAll, cString, E, libc, O, OsError } from "../ffi/libc.ts";

const DEV_NULL = cString("/dev/null");

/** Descriptors held back from the process's own use until the process runs out. */
export class DescriptorReserve {
  readonly size: number;
  #held: number[] = [];

  /** Hold `size` descriptors now if they can be had (otherwise the reserve starts spent). */
  constructor(size: number) {
    this.size = size;
    this.replenish();
  }

  /** Whether the reserve is held (descriptors were not short since it was last taken). */
  get held(): boolean {
    return this.#held.length > 0;
  }

  /** The process ran out: give the reserve back to it. */
  spend(): void {
    closeAll(this.#held);
    this.#held = [];
  }

  /**
   * Take the reserve back if twice its size is free; true when it is held afterwards. While it
   * is spent, every call tries anew (a few system calls, only in that state).
   */
  replenish(): boolean {
    if (this.held || this.size === 0) return true;
    const opened = openSome(2 * this.size);
    if (opened.length < 2 * this.size) {
      closeAll(opened);
      return false;
    }
    closeAll(opened.splice(this.size));
    this.#held = opened;
    return true;
  }
}

/**
 * Descriptors a new Worker takes for its runtime (6 measured under Deno 2.9.6), with as many
 * again to spare for what the process does meanwhile.
 */
const WORKER_DESCRIPTORS = 12;

/**
 * `new Worker(module)` (a module worker), only when {@link WORKER_DESCRIPTORS} descriptors are
 * free: Deno aborts the whole process when a new worker's runtime cannot get its descriptors (a
 * panic in its tokio setup, seen under 2.9.6), so short of them this throws an EMFILE
 * {@link OsError} instead, which the caller answers as being out of descriptors.
 */
export function startWorker(module: URL): Worker {
  const free = openSome(WORKER_DESCRIPTORS);
  closeAll(free);
  if (free.length < WORKER_DESCRIPTORS) {
    throw new OsError(`start a worker (${free.length} descriptors free)`, E.EMFILE);
  }
  return new Worker(module, { type: "module" });
}

/** Up to `n` new descriptors (on /dev/null, close-on-exec): as many as the process can have. */
function openSome(n: number): number[] {
  const c = libc();
  const opened: number[] = [];
  while (opened.length < n) {
    const fd = c.open(DEV_NULL, O.CLOEXEC);
    if (fd < 0) break;
    opened.push(fd);
  }
  return opened;
}
