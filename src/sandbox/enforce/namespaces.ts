/**
 * Per-thread namespaces for the spawning worker: a private network namespace with only `lo`
 * (the `loopback` network mode) and a private mount namespace in which read-only subpaths are
 * read-only bind mounts, unix sockets the policy must not reach are covered by `/dev/null`
 * (so `connect` to them fails with ECONNREFUSED; see `unix_sockets.ts` for which and why), and
 * `/etc/passwd` and `/etc/group` are the domain's account files (accounts.ts), read-only.
 *
 * `unshare(CLONE_NEWNET | CLONE_NEWNS)` is allowed in a multithreaded process and only moves
 * the calling thread, so the server's other threads keep the host's network and mounts. Both
 * need CAP_SYS_ADMIN, i.e. a root server. This module must never change the host's mount
 * table: the new mount namespace is made private before anything is mounted in it.
 *
 * @module
 */

import {
  AT,
  AT_FDCWD,
  cString,
  E,
  errno,
  fileType,
  O,
  OsError,
  rawSyscall,
  S_IF,
  STAT_SIZE,
} from "../../ffi/libc.ts";
import { checkedSyscall, closeFd, SYS } from "../syscalls.ts";
import { type AccountFiles, HOST_FILES } from "./accounts.ts";

const CLONE_NEWNS = 0x00020000;
const CLONE_NEWNET = 0x40000000;
const MS_NOSUID = 0x2;
const MS_NODEV = 0x4;
const MS_NOEXEC = 0x8;
const MS_BIND = 0x1000;
const MS_REC = 0x4000;
const MS_PRIVATE = 1 << 18;
const MOUNT_ATTR_RDONLY = 1n;
const AT_RECURSIVE = 0x8000;
const AF_INET = 2;
const SOCK_DGRAM = 2;
const SOCK_CLOEXEC = 0o2000000;
const SIOCGIFFLAGS = 0x8913;
const SIOCSIFFLAGS = 0x8914;
const IFF_UP = 1;
const ELOOP = 40;
const OPEN_TREE_CLONE = 1;
const OPEN_TREE_CLOEXEC = O.CLOEXEC;
const MOVE_MOUNT_F_EMPTY_PATH = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH = 0x40;

/** What {@link enterNamespaces} sets up on the calling thread. */
export interface NamespacePlan {
  /** Move into a fresh network namespace whose only interface is `lo`, brought up. */
  privateNetwork: boolean;
  /** Existing paths to make read-only through bind mounts in a private mount namespace. */
  readOnlyPaths: string[];
  /**
   * Mount a private procfs with `hidepid=invisible` over /proc, so children see only processes
   * they could ptrace: not the server, nor anything else of another uid.
   */
  hideProcesses: boolean;
  /**
   * Mount a new devpts instance over /dev/pts: terminals opened by this thread belong to it and
   * are invisible to every other domain (whose children could otherwise open them by path).
   * Each terminal is mode 0600, owned by the uid that opened it: the session's own.
   */
  privateTerminals: boolean;
  /** At most this many terminals in that instance (sessions without a terminal slot share it). */
  maxTerminals?: number;
  /** Unix sockets to cover, when they still are sockets and `reachable` refuses their real path. */
  hiddenSockets: SocketHiding;
  /** Files to mount over `/etc/passwd` and `/etc/group`, read-only. */
  accounts?: AccountFiles;
}

/** The unix socket paths to cover, and which resolved paths must stay reachable. */
export interface SocketHiding {
  paths: string[];
  reachable(realPath: string): boolean;
}

function bringLoopbackUp(): void {
  const fd = checkedSyscall("socket(AF_INET)", SYS.socket, AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  try {
    const ifreq = new Uint8Array(40);
    ifreq.set(new TextEncoder().encode("lo"));
    const view = new DataView(ifreq.buffer);
    checkedSyscall("ioctl(lo, SIOCGIFFLAGS)", SYS.ioctl, fd, SIOCGIFFLAGS, ifreq);
    view.setInt16(16, view.getInt16(16, true) | IFF_UP, true);
    checkedSyscall("ioctl(lo, SIOCSIFFLAGS)", SYS.ioctl, fd, SIOCSIFFLAGS, ifreq);
  } finally {
    closeFd(fd);
  }
}

/** Bind-mounts `source` (default: `target` itself) over `target`, read-only. */
function bindReadOnly(target: string, source = target): void {
  const p = cString(target);
  checkedSyscall(
    `mount(bind ${source} over ${target})`,
    SYS.mount,
    cString(source),
    p,
    null,
    MS_BIND | MS_REC,
    null,
  );
  const attr = new Uint8Array(32);
  new DataView(attr.buffer).setBigUint64(0, MOUNT_ATTR_RDONLY, true);
  checkedSyscall(
    `mount_setattr(${target}, RDONLY)`,
    SYS.mount_setattr,
    AT_FDCWD,
    p,
    AT_RECURSIVE,
    attr,
    attr.length,
  );
}

/** The target of `/proc/self/fd/<fd>`: the path an open descriptor resolved to. */
function fdPath(fd: number): string {
  const buf = new Uint8Array(4096);
  const n = rawSyscall(SYS.readlink, cString(`/proc/self/fd/${fd}`), buf, buf.length);
  if (n < 0) throw new OsError(`readlink(/proc/self/fd/${fd})`, errno());
  return new TextDecoder().decode(buf.subarray(0, n));
}

/**
 * Covers the socket at `path` with a clone of `/dev/null`, mounted on the very inode checked
 * (through its descriptor, so a path swapped meanwhile changes nothing). Paths that are gone,
 * no longer sockets, or resolve into a reachable place are left alone.
 */
export function hideSocket(path: string, reachable: (realPath: string) => boolean): void {
  const fd = rawSyscall(SYS.openat, AT_FDCWD, cString(path), O.PATH | O.CLOEXEC, 0);
  if (fd < 0) {
    // Gone, or a path `connect` cannot resolve either; anything else is a real failure.
    const code = errno();
    if (code === E.ENOENT || code === E.ENOTDIR || code === ELOOP) return;
    throw new OsError(`open(${path})`, code);
  }
  try {
    const stat = new Uint8Array(STAT_SIZE);
    checkedSyscall(`stat(${path})`, SYS.newfstatat, fd, cString(""), stat, AT.EMPTY_PATH);
    if (fileType(stat) !== S_IF.SOCK || reachable(fdPath(fd))) return;
    const tree = checkedSyscall(
      "open_tree(/dev/null)",
      SYS.open_tree,
      AT_FDCWD,
      cString("/dev/null"),
      OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC,
    );
    try {
      const moved = rawSyscall(
        SYS.move_mount,
        tree,
        cString(""),
        fd,
        cString(""),
        MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
      );
      // ENOENT: the socket was unlinked since it was opened (another server on the host closing
      // its relay, a daemon stopping): its path no longer leads to it, as for one gone at open.
      if (moved < 0 && errno() !== E.ENOENT) {
        throw new OsError(`move_mount(/dev/null over ${path})`, errno());
      }
    } finally {
      closeFd(tree);
    }
  } finally {
    closeFd(fd);
  }
}

/** Unshares the requested namespaces on the calling thread and sets them up. Needs root. */
export function enterNamespaces(plan: NamespacePlan): void {
  const { paths: sockets, reachable } = plan.hiddenSockets;
  const mounts = plan.readOnlyPaths.length > 0 || plan.hideProcesses || plan.privateTerminals ||
    sockets.length > 0 || plan.accounts !== undefined;
  const flags = (plan.privateNetwork ? CLONE_NEWNET : 0) | (mounts ? CLONE_NEWNS : 0);
  if (flags === 0) return;
  checkedSyscall("unshare", SYS.unshare, flags);
  if (plan.privateNetwork) bringLoopbackUp();
  if (!mounts) return;
  checkedSyscall(
    "mount(/, MS_REC|MS_PRIVATE)",
    SYS.mount,
    null,
    cString("/"),
    null,
    MS_REC | MS_PRIVATE,
    null,
  );
  for (const path of plan.readOnlyPaths) bindReadOnly(path);
  if (plan.accounts) {
    bindReadOnly(HOST_FILES.passwd, plan.accounts.passwd);
    bindReadOnly(HOST_FILES.group, plan.accounts.group);
  }
  for (const path of sockets) hideSocket(path, reachable);
  if (plan.privateTerminals) mountTerminals(plan.maxTerminals);
  if (plan.hideProcesses) {
    checkedSyscall(
      "mount(proc, /proc, hidepid=invisible)",
      SYS.mount,
      cString("proc"),
      cString("/proc"),
      cString("proc"),
      MS_NOSUID | MS_NODEV | MS_NOEXEC,
      cString("hidepid=invisible"),
    );
  }
}

/**
 * A devpts instance of its own over /dev/pts (of at most `maxPtys` terminals when given), in the
 * calling thread's mount namespace.
 */
export function mountTerminals(maxPtys?: number): void {
  checkedSyscall(
    "mount(devpts, /dev/pts, newinstance)",
    SYS.mount,
    cString("devpts"),
    cString("/dev/pts"),
    cString("devpts"),
    MS_NOSUID | MS_NOEXEC,
    cString(
      `newinstance,ptmxmode=0666,mode=0600${maxPtys === undefined ? "" : `,max=${maxPtys}`}`,
    ),
  );
}
