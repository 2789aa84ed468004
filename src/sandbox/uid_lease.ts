/**
 * A lease on a range of session uids for the life of this server: an open-file-description
 * lock on the bytes `first..last` of one host-wide file (`/run/uexec/uids.lock`). Two servers
 * whose ranges overlap would reap (kill) each other's sessions before reusing a uid, so the
 * second one is refused with a message saying which range to change. The kernel drops the lock
 * when the server exits, however it exits (SIGKILL included), so no stale lease survives it.
 *
 * It must never wait for a lease (a held range is an error at once); the lease is released only
 * when the uids' owner closes (server shutdown) or the process ends.
 *
 * @module
 */

import { AT_FDCWD, cString, E, errno, O, rawSyscall } from "../ffi/libc.ts";
import { SandboxUnavailableError } from "./errors.ts";
import { closeFd, SYS } from "./syscalls.ts";

const LOCK_DIR = "/run/uexec";
const F_OFD_SETLK = 37;
const F_OFD_GETLK = 36;
const F_WRLCK = 1;
const SEEK_SET = 0;

/** struct flock (x86_64): l_type, l_whence, l_start, l_len, l_pid (0 for OFD locks). */
function flock(first: number, last: number): Uint8Array<ArrayBuffer> {
  const buf = new Uint8Array(32);
  const view = new DataView(buf.buffer);
  view.setInt16(0, F_WRLCK, true);
  view.setInt16(2, SEEK_SET, true);
  view.setBigInt64(8, BigInt(first), true);
  view.setBigInt64(16, BigInt(last - first + 1), true);
  return buf;
}

/** A held lease. */
export interface UidLease {
  /** Give the range back (once every session of it has ended). */
  release(): void;
}

/**
 * Takes the lease on uids `first..last` (held until released or this process exits). Throws
 * {@link SandboxUnavailableError} when another holder has any of them.
 */
export function leaseUidRange(first: number, last: number, dir = LOCK_DIR): UidLease {
  Deno.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const path = `${dir}/uids.lock`;
  const fd = rawSyscall(SYS.openat, AT_FDCWD, cString(path), O.RDWR | O.CREAT | O.CLOEXEC, 0o600);
  if (fd < 0) {
    throw new SandboxUnavailableError(
      `cannot open ${path} to lease the sandbox uids: errno ${errno()}`,
    );
  }
  const request = flock(first, last);
  if (rawSyscall(SYS.fcntl, fd, F_OFD_SETLK, request) === 0) {
    let held = true;
    return {
      release() {
        if (held) closeFd(fd);
        held = false;
      },
    };
  }
  const code = errno();
  const probe = flock(first, last);
  rawSyscall(SYS.fcntl, fd, F_OFD_GETLK, probe);
  closeFd(fd);
  if (code !== E.EAGAIN && code !== E.EACCES) {
    throw new SandboxUnavailableError(
      `cannot lease the sandbox uids ${first}-${last}: errno ${code}`,
    );
  }
  const view = new DataView(probe.buffer);
  const heldFrom = Number(view.getBigInt64(8, true));
  const heldLen = Number(view.getBigInt64(16, true));
  throw new SandboxUnavailableError(
    `sandbox uids ${first}-${last} overlap ${heldFrom}-${heldFrom + heldLen - 1}, ` +
      `which another uexec server on this host uses; give each server its own UEXEC_UID_RANGE`,
  );
}
