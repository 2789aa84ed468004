/**
 * Per-thread namespaces for the spawning worker: a private network namespace with only `lo`
 * (the `loopback` network mode) and a private mount namespace whose tree is the domain's view
 * (mount_view.ts: no host unix socket outside the policy's places is reachable), in which
 * read-only subpaths are read-only bind mounts and `/etc/passwd` and `/etc/group` are the
 * domain's account files (accounts.ts), read-only.
 *
 * `unshare(CLONE_NEWNET | CLONE_NEWNS)` is allowed in a multithreaded process and only moves
 * the calling thread, so the server's other threads keep the host's network and mounts. Both
 * need CAP_SYS_ADMIN, i.e. a root server. This module must never change the host's mount
 * table: the new mount namespace is made private before anything is mounted in it.
 *
 * @module
 */

import { checkedSyscall, closeFd, mount, MS, setReadOnly, SYS } from "../syscalls.ts";
import { type AccountFiles, HOST_FILES } from "./accounts.ts";
import { buildView, type ViewPlan } from "./mount_view.ts";

const CLONE_NEWNS = 0x00020000;
const CLONE_NEWNET = 0x40000000;
const AF_INET = 2;
const SOCK_DGRAM = 2;
const SOCK_CLOEXEC = 0o2000000;
const SIOCGIFFLAGS = 0x8913;
const SIOCSIFFLAGS = 0x8914;
const IFF_UP = 1;

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
  /**
   * The tree to show (a root server): every file system through a read-only overlay but the
   * live places (mount_view.ts), so no host socket outside them can be reached.
   */
  view?: ViewPlan;
  /** Files to mount over `/etc/passwd` and `/etc/group`, read-only. */
  accounts?: AccountFiles;
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
  mount(`mount(bind ${source} over ${target})`, source, target, null, MS.BIND | MS.REC);
  setReadOnly(target);
}

/** Unshares the requested namespaces on the calling thread and sets them up. Needs root. */
export function enterNamespaces(plan: NamespacePlan): void {
  const mounts = plan.readOnlyPaths.length > 0 || plan.hideProcesses || plan.privateTerminals ||
    plan.view !== undefined || plan.accounts !== undefined;
  const flags = (plan.privateNetwork ? CLONE_NEWNET : 0) | (mounts ? CLONE_NEWNS : 0);
  if (flags === 0) return;
  checkedSyscall("unshare", SYS.unshare, flags);
  if (plan.privateNetwork) bringLoopbackUp();
  if (!mounts) return;
  mount("mount(/, MS_REC|MS_PRIVATE)", null, "/", null, MS.REC | MS.PRIVATE);
  if (plan.view) buildView(plan.view);
  for (const path of plan.readOnlyPaths) bindReadOnly(path);
  if (plan.accounts) {
    bindReadOnly(HOST_FILES.passwd, plan.accounts.passwd);
    bindReadOnly(HOST_FILES.group, plan.accounts.group);
  }
  if (plan.privateTerminals) mountTerminals(plan.maxTerminals);
  if (plan.hideProcesses) {
    mount(
      "mount(proc, /proc, hidepid=invisible)",
      "proc",
      "/proc",
      "proc",
      MS.NOSUID | MS.NODEV | MS.NOEXEC,
      "hidepid=invisible",
    );
  }
}

/**
 * A devpts instance of its own over /dev/pts (of at most `maxPtys` terminals when given), in the
 * calling thread's mount namespace.
 */
export function mountTerminals(maxPtys?: number): void {
  mount(
    "mount(devpts, /dev/pts, newinstance)",
    "devpts",
    "/dev/pts",
    "devpts",
    MS.NOSUID | MS.NOEXEC,
    `newinstance,ptmxmode=0666,mode=0600${maxPtys === undefined ? "" : `,max=${maxPtys}`}`,
  );
}
