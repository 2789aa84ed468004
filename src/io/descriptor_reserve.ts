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
 * and it costs nothing while held: a check of one field.
 *
 * @module
 */

import { closeAll, cString, libc, O } from "../ffi/libc.ts";

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
    const c = libc();
    const opened: number[] = [];
    while (opened.length < 2 * this.size) {
      const fd = c.open(DEV_NULL, O.CLOEXEC);
      if (fd < 0) break;
      opened.push(fd);
    }
    if (opened.length < 2 * this.size) {
      closeAll(opened);
      return false;
    }
    closeAll(opened.splice(this.size));
    this.#held = opened;
    return true;
  }
}
