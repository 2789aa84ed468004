/**
 * A lease on a range of session uids for the life of this server: an open-file-description
 * lock on the bytes `first..last` of one host-wide file (`/run/uexec/uids.lock`). Two servers
 * whose ranges overlap would reap (kill) each other's sessions before reusing a uid, so the
 * second one is refused with a message saying which range to change. The kernel drops the lock
 * when the server exits, however it exits (SIGKILL included), so no stale lease survives it.
 *
 * Without an explicit range, a process takes the first free block of the default pool
 * ({@link DEFAULT_POOL}: 32 blocks of 65,536 uids) and keeps it until it exits, so any number of
 * servers, test suites and stdio MCP servers run side by side with no setting.
 *
 * It must never wait for a lease (a held range is an error at once); the lease is released only
 * when the uids' owner closes (server shutdown) or the process ends.
 *
 * @module
 */

import { AT_FDCWD, cString, E, errno, O, rawSyscall } from "../../ffi/libc.ts";
import { SandboxUnavailableError } from "../errors.ts";
import { closeFd, SYS } from "../syscalls.ts";

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

/** The default pool of uid blocks: above systemd's container ranges, below its "foreign" one. */
export const DEFAULT_POOL = { base: 2_000_000_000, blockSize: 65_536, blocks: 32 } as const;

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
  const fd = openLockFile(dir);
  if (rawSyscall(SYS.fcntl, fd, F_OFD_SETLK, flock(first, last)) === 0) return heldLease(fd);
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

function openLockFile(dir: string): number {
  Deno.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const path = `${dir}/uids.lock`;
  const fd = rawSyscall(SYS.openat, AT_FDCWD, cString(path), O.RDWR | O.CREAT | O.CLOEXEC, 0o600);
  if (fd < 0) {
    throw new SandboxUnavailableError(
      `cannot open ${path} to lease the sandbox uids: errno ${errno()}`,
    );
  }
  return fd;
}

function heldLease(fd: number): UidLease {
  let held = true;
  return {
    release() {
      if (held) closeFd(fd);
      held = false;
    },
  };
}

/** A block of the default pool, leased by this process. */
export interface PooledBlock {
  first: number;
  last: number;
  /** Its index in the pool. */
  index: number;
}

let pooled: PooledBlock | undefined;
let pooledClaimed = false;

/**
 * The block of the default pool this process holds: on the first call, the first block no other
 * process holds and `usable` accepts (no user or group of the host in it); then the same block
 * until the process exits. Throws {@link SandboxUnavailableError} when every block is taken.
 */
export function pooledBlock(
  usable: (first: number, last: number) => boolean,
  dir = LOCK_DIR,
): PooledBlock {
  if (pooled) return pooled;
  const fd = openLockFile(dir);
  const { base, blockSize, blocks } = DEFAULT_POOL;
  for (let index = 0; index < blocks; index++) {
    const first = base + index * blockSize;
    const last = first + blockSize - 1;
    if (!usable(first, last)) continue;
    if (rawSyscall(SYS.fcntl, fd, F_OFD_SETLK, flock(first, last)) === 0) {
      // Held for the life of the process: the descriptor is never closed.
      return pooled = { first, last, index };
    }
    const code = errno();
    if (code !== E.EAGAIN && code !== E.EACCES) {
      closeFd(fd);
      throw new SandboxUnavailableError(`cannot lease a block of sandbox uids: errno ${code}`);
    }
  }
  closeFd(fd);
  throw new SandboxUnavailableError(
    `all ${blocks} blocks of the default sandbox uid pool (${base}-${
      base + blocks * blockSize - 1
    }) are held by other uexec servers on this host; set UEXEC_UID_RANGE`,
  );
}

/**
 * The lease of this process's pooled block for one owner at a time (the server's sandbox): the
 * block itself stays held until the process exits; a second owner while the first holds it is
 * refused as an overlapping explicit range would be.
 */
export function claimPooledBlock(block: PooledBlock): UidLease {
  if (pooledClaimed) {
    throw new SandboxUnavailableError(
      `sandbox uids ${block.first}-${block.last} are already in use in this process`,
    );
  }
  pooledClaimed = true;
  let held = true;
  return {
    release() {
      if (held) pooledClaimed = false;
      held = false;
    },
  };
}
