/**
 * The file tree a root server's sandbox domain runs in: the host's, with every file system that
 * can hold a pathname unix socket shown through a read-only overlay of its own, and only the
 * places the policy opens (its writable roots, the workdir, the sockets it lists) shown as the
 * host's own directories (bind mounts).
 *
 * Why (issue 29 point 8): `connect` on a pathname socket finds the listening socket by the
 * inode the path resolves to. Through an overlay every inode is the overlay's, never the host
 * file system's, so a socket there, bound before the domain or at any time after, can never be
 * reached: `connect` fails with ECONNREFUSED, and its service never sees a connection. That
 * makes the unreachability a rule the kernel applies at each `connect`, not a picture of the
 * sockets bound at some moment. Landlock (up to ABI 8) does not mediate pathname `connect`,
 * seccomp cannot read the address, and BPF LSM programs are refused on the hosts this runs on:
 * see docs/isolation-unix-sockets.md.
 *
 * The price, stated in that page and in docs/sandbox.md: overlayfs caches what it looked up, so
 * outside the live places a file the host replaces by rename (an editor's save), or creates
 * after the domain looked for it, can show its old state to that domain. The domain key carries
 * the view's age (`UEXEC_VIEW_MAX_AGE_S`), so new commands get a fresh view after that long.
 *
 * {@link buildView} runs on the spawning worker's thread, in the private mount namespace it has
 * just made (namespaces.ts), and ends with `pivot_root` into the new tree. This module must
 * never mount anything in the host's namespace, and never make a place writable that the host's
 * tree has read-only.
 *
 * @module
 */

import {
  AT_FDCWD,
  cString,
  E,
  errno,
  libc,
  OsError,
  rawSyscall,
  readWholeFile,
  S_IF,
} from "../../ffi/libc.ts";
import { checkedSyscall, closeFd, mount, MS, setReadOnly, SYS } from "../syscalls.ts";
import { isWithin } from "../policy/profiles.ts";
import { kind, openEntry, statOf } from "../fs/entries.ts";
import { parseMountInfo } from "../fs/mountinfo.ts";

const MNT_DETACH = 2;

/**
 * File systems shown as bind mounts of the host's: none of them can hold a socket inode
 * (`mknod` and `bind` are refused there), and some cannot be an overlay's lower layer.
 */
const NO_SOCKETS = new Set([
  "proc",
  "sysfs",
  "cgroup",
  "cgroup2",
  "devpts",
  "mqueue",
  "bpf",
  "debugfs",
  "tracefs",
  "securityfs",
  "pstore",
  "configfs",
  "fusectl",
  "binfmt_misc",
  "efivarfs",
  "nsfs",
  "autofs",
  "selinuxfs",
  "smackfs",
]);

/** One line of `/proc/<pid>/mountinfo`, the fields the view needs. */
export interface MountEntry {
  /** Where it is mounted (escapes decoded). */
  mountPoint: string;
  /** Its file system type (`tmpfs`, `ext4`, `proc`, ...). */
  fsType: string;
  /** Its per-mount flags among nosuid, nodev, noexec, as `MS_*` bits. */
  flags: number;
}

/** A place the view shows as the host's own, live. */
export interface LivePath {
  path: string;
  /** False: shown read-only (the bind mount, and everything mounted beneath it). */
  writable: boolean;
}

/** What {@link buildView} makes. */
export interface ViewPlan {
  /**
   * An existing directory of the host, not a mount point and not needed in the view, that the
   * thread may mount its staging tmpfs over (in its own namespace only).
   */
  staging: string;
  /** The live places, in any order. */
  live: LivePath[];
}

/** The mounts listed in a mountinfo text, in its order, with the per-mount flags the view keeps. */
export function mountEntries(text: string): MountEntry[] {
  return parseMountInfo(text).map(({ mountPoint, fsType, mountOptions }) => ({
    mountPoint,
    fsType,
    flags: (mountOptions.includes("nosuid") ? MS.NOSUID : 0) |
      (mountOptions.includes("nodev") ? MS.NODEV : 0) |
      (mountOptions.includes("noexec") ? MS.NOEXEC : 0),
  }));
}

function depth(path: string): number {
  return path === "/" ? 0 : path.split("/").length - 1;
}

/**
 * The mounts to show, one per mount point (the one listed last: stacked mounts are listed
 * bottom first), parents before children, none at or beneath `staging`.
 */
export function viewMounts(entries: MountEntry[], staging: string): MountEntry[] {
  const byPoint = new Map<string, MountEntry>();
  for (const entry of entries) {
    if (isWithin(entry.mountPoint, staging)) continue;
    byPoint.delete(entry.mountPoint);
    byPoint.set(entry.mountPoint, entry);
  }
  return [...byPoint.values()].sort((a, b) => depth(a.mountPoint) - depth(b.mountPoint));
}

/** The live places parents first; a place beneath another comes after it. */
export function liveOrder(live: LivePath[]): LivePath[] {
  return [...live].sort((a, b) => depth(a.path) - depth(b.path));
}

function fdPath(fd: number): string {
  return `/proc/thread-self/fd/${fd}`;
}

/** An O_PATH descriptor of `path` and its file type; null when it is gone or not reachable. */
function openPlace(path: string): { fd: number; type: number } | null {
  let fd: number | null;
  try {
    fd = openEntry(AT_FDCWD, path);
  } catch (e) {
    if (e instanceof OsError && e.errno === E.EACCES) return null;
    throw e;
  }
  if (fd === null) return null;
  try {
    return { fd, type: kind(statOf(fd)) };
  } catch (e) {
    closeFd(fd);
    throw e;
  }
}

/** Shows one host mount at `target`: an overlay of it, a bind of it, or nothing (a socket). */
function showMount(entry: MountEntry, target: string, empty: string): void {
  const place = openPlace(entry.mountPoint);
  if (!place) return;
  try {
    const source = fdPath(place.fd);
    if (place.type === S_IF.SOCK) return; // the parent's overlay shows an inert node there
    if (place.type !== S_IF.DIR || NO_SOCKETS.has(entry.fsType)) {
      mount(`mount(bind ${entry.mountPoint})`, source, target, null, MS.BIND);
      if (place.type !== S_IF.DIR) setReadOnly(target);
      return;
    }
    // No upper layer: read-only, and every inode is the overlay's. Two lower layers because
    // overlayfs wants at least two without an upper one; the second is empty.
    mount(
      `mount(overlay of ${entry.mountPoint} (${entry.fsType}))`,
      "overlay",
      target,
      "overlay",
      MS.RDONLY | entry.flags,
      `lowerdir=${source}:${empty}`,
    );
  } finally {
    closeFd(place.fd);
  }
}

/** Shows a live place at `target`: the host's own, with all mounted beneath it. */
function showLive(live: LivePath, target: string): void {
  const place = openPlace(live.path);
  if (!place) return;
  try {
    mount(`mount(bind ${live.path})`, fdPath(place.fd), target, null, MS.BIND | MS.REC);
  } finally {
    closeFd(place.fd);
  }
  if (!live.writable) setReadOnly(target);
}

/** The calling thread's working directory (a path in the namespace it was made in). */
function workingDirectory(): string | null {
  const buf = new Uint8Array(4096);
  const n = rawSyscall(SYS.readlink, cString("/proc/thread-self/cwd"), buf, buf.length);
  return n < 0 ? null : new TextDecoder().decode(buf.subarray(0, n));
}

/**
 * Builds the view in the calling thread's mount namespace, which must be private and its own,
 * and makes it the thread's root. Throws on any failure (the caller fails closed).
 */
export function buildView(plan: ViewPlan): void {
  const mounts = viewMounts(
    mountEntries(readWholeFile("/proc/thread-self/mountinfo")),
    plan.staging,
  );
  mount(
    `mount(tmpfs, ${plan.staging})`,
    "tmpfs",
    plan.staging,
    "tmpfs",
    MS.NOSUID | MS.NODEV | MS.NOEXEC,
    "mode=0700,size=64k",
  );
  const root = `${plan.staging}/root`;
  const empty = `${plan.staging}/empty`;
  for (const dir of [root, empty]) {
    if (libc().mkdir(cString(dir), 0o700) < 0) throw new OsError(`mkdir(${dir})`, errno());
  }
  const target = (path: string) => path === "/" ? root : root + path;
  for (const entry of mounts) {
    try {
      showMount(entry, target(entry.mountPoint), empty);
    } catch (e) {
      // A mount point the parent's overlay does not show (hidden beneath a later mount on the
      // host) has nothing to show either.
      if (e instanceof OsError && e.errno === E.ENOENT && entry.mountPoint !== "/") continue;
      throw e;
    }
  }
  for (const live of liveOrder(plan.live)) showLive(live, target(live.path));
  const cwd = workingDirectory();
  checkedSyscall(`chdir(${root})`, SYS.chdir, cString(root));
  // The classic form: the old root ends up stacked on the new one, and is detached at once.
  checkedSyscall("pivot_root(., .)", SYS.pivot_root, cString("."), cString("."));
  checkedSyscall("umount2(old root, MNT_DETACH)", SYS.umount2, cString("."), MNT_DETACH);
  if (cwd === null || rawSyscall(SYS.chdir, cString(cwd)) < 0) {
    checkedSyscall("chdir(/)", SYS.chdir, cString("/"));
  }
}
