/**
 * The free-space floor (`UEXEC_DISK_FLOOR_BYTES`): before a command starts, the file systems
 * holding the workspace and the state directory (tokens, the history database) are asked how
 * much room is left to an unprivileged writer (`statfs`'s `f_bavail`, one system call each);
 * below the floor the start is refused with 507 `insufficient_storage`, so that what earlier
 * commands wrote stays readable and the history can still record, and a start after space was
 * freed runs again. Nothing is polled or cached: the answer is as of the call.
 *
 * It only reads; it must never write to, reserve or delete anything on those file systems.
 *
 * @module
 */

import { ApiError } from "../errors.ts";
import { cString, errno, OsError, rawSyscall } from "../ffi/libc.ts";

/** x86_64 `statfs(2)` (Deno has no public API for free space). */
const SYS_STATFS = 137;
/** `struct statfs` on x86_64: 120 bytes; `f_bsize` at 8, `f_bavail` at 32, `f_frsize` at 72. */
const STATFS_SIZE = 120;

/** A start refused for want of disk space (507 `insufficient_storage`). */
export class InsufficientStorageError extends ApiError {
  readonly code = "insufficient_storage";
}

/** Bytes an unprivileged writer may still write on the file system holding `path`. */
export function freeBytes(path: string): number {
  const buf = new Uint8Array(STATFS_SIZE);
  if (rawSyscall(SYS_STATFS, cString(path), buf) < 0) {
    throw new OsError(`statfs(${path})`, errno());
  }
  const view = new DataView(buf.buffer);
  const frsize = Number(view.getBigUint64(72, true)) || Number(view.getBigUint64(8, true));
  return Number(view.getBigUint64(32, true)) * frsize;
}

/** The floor for a set of directories. */
export class DiskFloor {
  readonly #paths: { what: string; path: string }[];
  readonly #floor: number;

  /** `paths`: what each directory is (for the message) and where; `floor` 0 checks nothing. */
  constructor(paths: { what: string; path: string }[], floor: number) {
    this.#paths = paths;
    this.#floor = floor;
  }

  /** Throws {@link InsufficientStorageError} when one of the directories is below the floor. */
  check(): void {
    if (this.#floor === 0) return;
    for (const { what, path } of this.#paths) {
      const free = freeBytes(path);
      if (free < this.#floor) {
        throw new InsufficientStorageError(
          // No path: the state directory's is not the agent's to know.
          `only ${free} bytes are free on the file system of the ${what}, below ` +
            `the floor of ${this.#floor} (UEXEC_DISK_FLOOR_BYTES): nothing was started; ` +
            "free some space there and try again",
        );
      }
    }
  }
}
