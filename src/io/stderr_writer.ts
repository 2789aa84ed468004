/**
 * Writing to the process's stderr without a thread hop per write: where a write cannot block, it
 * goes out at once on the calling thread, and only what would block goes through Deno's
 * asynchronous `Deno.stderr.write` (which runs each write on a pool thread; one hop per log
 * batch cost a request about 0.07 ms on a 2-core host). A pipe or a terminal is written through a
 * descriptor of its own opened non-blocking (`/proc/self/fd/2` opened anew: a file description
 * of this process alone, so the flag never reaches whoever shares fd 2); a regular file is
 * written directly (such a write does not wait for a reader, and it shares fd 2's offset with
 * everything else written there); anything else (a socket) always goes the asynchronous way.
 *
 * It must never block the calling thread on a reader, never change fd 2's own flags, and never
 * hold a descriptor a child could inherit (close-on-exec).
 *
 * @module
 */

import { AT, cString, E, errno, fileType, libc, O, OsError, S_IF, STAT_SIZE } from "../ffi/libc.ts";
import type { WriteBytes } from "./batched_writer.ts";

const STDERR = 2;

/** How a write to stderr can be made at once: on `fd`, or not at all (`undefined`). */
function immediateDescriptor(): number | undefined {
  const c = libc();
  const stat = new Uint8Array(STAT_SIZE);
  if (c.fstatat(STDERR, cString(""), stat, AT.EMPTY_PATH) !== 0) return undefined;
  const type = fileType(stat);
  if (type === S_IF.REG) return STDERR;
  if (type !== S_IF.FIFO && type !== S_IF.CHR) return undefined;
  const fd = c.open(
    cString("/proc/self/fd/2"),
    O.WRONLY | O.NONBLOCK | O.CLOEXEC | O.NOCTTY,
  );
  return fd < 0 ? undefined : fd;
}

/**
 * A {@link WriteBytes} for stderr: at once where it cannot block, else (or for what would block
 * now) through `Deno.stderr.write`. A write that fails (a closed pipe) rejects.
 */
export function stderrWriter(): WriteBytes {
  const fd = immediateDescriptor();
  if (fd === undefined) return (bytes) => Deno.stderr.write(bytes);
  const c = libc();
  return (bytes) => {
    const n = c.write(fd, bytes, BigInt(bytes.length));
    if (n > 0) return Promise.resolve(n);
    const code = n < 0 ? errno() : E.EAGAIN;
    if (code === E.EAGAIN || code === E.EINTR) return Deno.stderr.write(bytes);
    return Promise.reject(new OsError("write(stderr)", code));
  };
}
