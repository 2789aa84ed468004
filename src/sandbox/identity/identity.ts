/**
 * Who sandboxed children run as, and the files they need to own or reach.
 *
 * When the server runs as root, every session runs as a uid of its own, taken from
 * `UEXEC_UID_RANGE` (default: the first free block of the default pool, see uid_lease.ts), in
 * one shared group (`UEXEC_SANDBOX_GID`,
 * default: the range's first id) with no supplementary groups and no capabilities. The range's
 * first uid is never a session's: it is what spawning threads rest as between spawns. A
 * spawning worker keeps only CAP_SETUID, CAP_SETGID, CAP_SYS_ADMIN and CAP_SYS_CHROOT,
 * permitted but not effective; it raises the last two for one `unshare(CLONE_NEWIPC)` between
 * sessions (a private IPC namespace each) and for the `setns` into and out of a session's own
 * mount namespace around its spawn (session_ns.ts), and switches its own thread to the session's uid just around one
 * spawn, with raw per-thread
 * system calls (glibc's wrappers would change every thread of the server). The server, still
 * root, gives each session a private directory owned by its uid (mode 0700) and grants the
 * group a POSIX ACL entry on the workspace. This module must never change the credentials of a
 * thread other than the caller's, never let a child keep a capability, and never grant
 * anything outside the workspace.
 *
 * @module
 */

import {
  aclFromMode,
  type Owner,
  PERM,
  permits,
  readAcl,
  TAG,
  withGrant,
  writeAcl,
} from "../fs/acl.ts";
import { SandboxUnavailableError } from "../errors.ts";
import { realPathOrSelf } from "../fs/fsinfo.ts";
import {
  AT_FDCWD,
  check,
  cString,
  E,
  errno,
  libc,
  O,
  OsError,
  rawSyscall,
} from "../../ffi/libc.ts";
import { checkedSyscall, prctl, SYS, threadEuid } from "../syscalls.ts";
import { INSTANCE_NAME, instanceName, instanceRuns } from "../instance.ts";
import { gitConfigText } from "./git_config.ts";
import { DEFAULT_POOL, pooledBlock } from "./uid_lease.ts";

/**
 * Beside PATH in every child: the PATH it was started with, which a sandboxed session's
 * `~/.profile` puts back after a login shell's `/etc/profile` reset it (sessions/env.ts sets it).
 */
export const LOGIN_PATH = "UEXEC_LOGIN_PATH";

/** The credentials one sandboxed session runs as. */
export interface SandboxIdentity {
  uid: number;
  gid: number;
}

/** The ids a root server hands out: a uid per session from a range, one shared group. */
export interface SandboxIds {
  /** The uid spawning threads rest as between spawns (the range's first); never a session's. */
  spawner: number;
  /** The first and last uid handed to sessions. */
  first: number;
  last: number;
  /** The group every session runs in; the workspace ACL grants it. */
  gid: number;
  /** Set when the range is this process's block of the default pool (no explicit range). */
  pooled?: { index: number };
}

/** Which ids are the sandbox's: files it made, ACL entries that grant it. */
export interface SandboxOwners {
  isUid(uid: number): boolean;
  isGid(gid: number): boolean;
}

/** The owners for sandboxed children: any uid of the session range (or the spawners'), the group. */
export function sandboxOwners(ids: SandboxIds): SandboxOwners {
  return {
    isUid: (uid) => uid >= ids.spawner && uid <= ids.last,
    isGid: (gid) => gid === ids.gid,
  };
}

function validId(raw: string): number | undefined {
  if (!/^\d+$/.test(raw)) return undefined;
  const id = Number(raw);
  return id > 0 && id < 0xffffffff ? id : undefined;
}

/** The ids of an /etc/passwd or /etc/group style file in [first, last]; none if it is absent. */
function idsInFile(path: string, first: number, last: number): string[] {
  let text = "";
  try {
    text = Deno.readTextFileSync(path);
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
  const found: string[] = [];
  for (const line of text.split("\n")) {
    const [name, , id] = line.split(":");
    if (id === undefined || !/^\d+$/.test(id)) continue;
    const n = Number(id);
    if (n >= first && n <= last) found.push(`${name} (${n})`);
  }
  return found;
}

/**
 * The ids sessions run as: null when the server is not root (children keep the server's uid,
 * which has no privileges to lose, and sessions are not isolated from each other). Reads
 * `UEXEC_UID_RANGE` ("first-last", at least two ids) and `UEXEC_SANDBOX_GID`, and refuses a
 * range that holds a user of /etc/passwd, or a default group id that /etc/group already uses.
 * Without `UEXEC_UID_RANGE`, the range is the process's block of the default pool, leased on
 * the first call (so the main thread must call it before its workers need ids).
 */
export function sandboxIds(
  env: (name: string) => string | undefined = Deno.env.get,
): SandboxIds | null {
  if (threadEuid() !== 0) return null;
  const rawRange = env("UEXEC_UID_RANGE");
  if (!rawRange) {
    const block = pooledBlock((first, last) =>
      idsInFile("/etc/passwd", first, last).length === 0 &&
      idsInFile("/etc/group", first, first).length === 0
    );
    const gid = sandboxGid(env, block.first);
    return {
      spawner: block.first,
      first: block.first + 1,
      last: block.last,
      gid,
      pooled: { index: block.index },
    };
  }
  const m = /^(\d+)-(\d+)$/.exec(rawRange);
  const first = m ? validId(m[1]) : undefined;
  const last = m ? validId(m[2]) : undefined;
  if (first === undefined || last === undefined || last <= first) {
    throw new SandboxUnavailableError(
      `UEXEC_UID_RANGE=${rawRange} is not a range "first-last" of at least two non-root uids`,
    );
  }
  const users = idsInFile("/etc/passwd", first, last);
  if (users.length > 0) {
    throw new SandboxUnavailableError(
      `UEXEC_UID_RANGE=${rawRange} overlaps existing users: ${users.slice(0, 3).join(", ")}`,
    );
  }
  return { spawner: first, first: first + 1, last, gid: sandboxGid(env, first) };
}

/** `UEXEC_SANDBOX_GID`, or the range's first id when /etc/group does not use it. */
function sandboxGid(env: (name: string) => string | undefined, first: number): number {
  const rawGid = env("UEXEC_SANDBOX_GID");
  let gid = first;
  if (rawGid) {
    const id = validId(rawGid);
    if (id === undefined) {
      throw new SandboxUnavailableError(`UEXEC_SANDBOX_GID=${rawGid} is not a valid non-root id`);
    }
    gid = id;
  } else {
    const groups = idsInFile("/etc/group", gid, gid);
    if (groups.length > 0) {
      throw new SandboxUnavailableError(
        `the default sandbox group ${gid} is taken by ${groups[0]}; set UEXEC_SANDBOX_GID`,
      );
    }
  }
  return gid;
}

/**
 * The identity a spawning thread rests as: the range's first uid and the sandbox group unless
 * `explicit` says otherwise; null when the server is not root.
 */
export function sandboxIdentity(explicit: Partial<SandboxIdentity> = {}): SandboxIdentity | null {
  if (threadEuid() !== 0) return null;
  // A worker is told both; asking sandboxIds() there would lease a pool block of its own.
  const ids = explicit.uid !== undefined && explicit.gid !== undefined ? undefined : sandboxIds();
  const identity = { uid: explicit.uid ?? ids!.spawner, gid: explicit.gid ?? ids!.gid };
  if (identity.uid === 0 || identity.gid === 0) {
    throw new SandboxUnavailableError("the sandbox uid and gid must not be 0");
  }
  return identity;
}

const CAPABILITY_VERSION_3 = 0x20080522;
const CAP_SETGID = 6;
const CAP_SETUID = 7;
const CAP_SYS_CHROOT = 18;
const CAP_SYS_ADMIN = 21;
/** CAP_SETUID and CAP_SETGID as a capability bit set (low word). */
const SWITCH_CAPS = (1 << CAP_SETGID) | (1 << CAP_SETUID);
/** What `unshare(CLONE_NEWIPC)` and `setns` into a mount namespace need. */
const NAMESPACE_CAPS = (1 << CAP_SYS_ADMIN) | (1 << CAP_SYS_CHROOT);
/** What a spawning thread keeps permitted (never effective but around one call). */
const KEPT_CAPS = SWITCH_CAPS | NAMESPACE_CAPS;
const CLONE_NEWIPC = 0x08000000;
const PR_SET_KEEPCAPS = 8;
const PR_CAPBSET_READ = 23;
const PR_CAPBSET_DROP = 24;
const PR_CAP_AMBIENT = 47;
const PR_CAP_AMBIENT_IS_SET = 1;
const PR_CAP_AMBIENT_CLEAR_ALL = 4;
const SIGKILL = 9;

/** The calling thread's real, effective and saved ids, read with `getres[ug]id`. */
function threadIds(nr: number, name: string): string {
  const ids = new Uint32Array(3);
  const bytes = new Uint8Array(ids.buffer);
  checkedSyscall(name, nr, bytes.subarray(0, 4), bytes.subarray(4, 8), bytes.subarray(8, 12));
  return ids.join(" ");
}

/** The calling thread's effective, permitted and inheritable capability sets, as hex. */
function threadCapabilities(): string {
  const header = new Uint32Array([CAPABILITY_VERSION_3, 0]);
  const data = new Uint32Array(6);
  checkedSyscall("capget", SYS.capget, new Uint8Array(header.buffer), new Uint8Array(data.buffer));
  return Array.from(data, (n) => n.toString(16)).join(" ");
}

const capHeader = new Uint8Array(new Uint32Array([CAPABILITY_VERSION_3, 0]).buffer);
/** The capability sets with `effective` raised and {@link KEPT_CAPS} permitted. */
const capSets = (effective: number) =>
  new Uint8Array(new Uint32Array([effective, KEPT_CAPS, 0, 0, 0, 0]).buffer);
const capsRaised = capSets(SWITCH_CAPS);
const capsLowered = capSets(0);
const capsNamespace = capSets(NAMESPACE_CAPS);

/** Sets the calling thread's capabilities: the kept caps permitted, the switch caps effective if `raised`. */
function setSwitchCaps(raised: boolean): void {
  checkedSyscall("capset", SYS.capset, capHeader, raised ? capsRaised : capsLowered);
}

/** Capabilities still in the calling thread's bounding or ambient set, as numbers. */
function boundingAndAmbient(): number[] {
  const left: number[] = [];
  for (let cap = 0; cap < 64; cap++) {
    const bounded = rawSyscall(SYS.prctl, PR_CAPBSET_READ, cap);
    if (bounded === -1) break;
    if (bounded === 1 || rawSyscall(SYS.prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, cap) === 1) {
      left.push(cap);
    }
  }
  return left;
}

function verify(checks: [string, string, string][], what: string): void {
  for (const [name, got, want] of checks) {
    if (got !== want) {
      throw new SandboxUnavailableError(
        `${what} did not hold: ${name} are "${got}", expected "${want}"`,
      );
    }
  }
}

/** The uid the calling thread rests as, once it entered the spawner identity. */
let restingUid: number | undefined;
/** Why the thread could not return to rest after a spawn; it must never spawn again. */
let stuck: string | undefined;

/**
 * Turns the calling (root) thread into a spawner that can switch to session uids and nothing
 * else: an empty bounding and ambient set (so no child can ever gain a capability, even as
 * root), KEEPCAPS, then no supplementary groups, gid `ids.gid` and uid `ids.spawner` for real,
 * effective and saved ids, keeping only CAP_SETUID, CAP_SETGID, CAP_SYS_ADMIN and CAP_SYS_CHROOT
 * (for {@link withNamespaceCaps}), permitted but not effective. Verifies the result with system calls (not /proc, which may be mounted with
 * hidepid by then). Call it once, before Landlock and seccomp.
 */
export function enterSpawnerIdentity(ids: { uid: number; gid: number }): void {
  const { uid, gid } = ids;
  for (let cap = 0; rawSyscall(SYS.prctl, PR_CAPBSET_READ, cap) !== -1; cap++) {
    prctl(`PR_CAPBSET_DROP(${cap})`, PR_CAPBSET_DROP, cap);
  }
  prctl("PR_CAP_AMBIENT_CLEAR_ALL", PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  prctl("PR_SET_KEEPCAPS", PR_SET_KEEPCAPS, 1);
  checkedSyscall("setgroups(0)", SYS.setgroups, 0, null);
  checkedSyscall("setresgid", SYS.setresgid, gid, gid, gid);
  checkedSyscall("setresuid", SYS.setresuid, uid, uid, uid);
  setSwitchCaps(false);
  verify([
    ["uids", threadIds(SYS.getresuid, "getresuid"), `${uid} ${uid} ${uid}`],
    ["gids", threadIds(SYS.getresgid, "getresgid"), `${gid} ${gid} ${gid}`],
    ["supplementary groups", String(checkedSyscall("getgroups", SYS.getgroups, 0, null)), "0"],
    ["capabilities", threadCapabilities(), `0 ${KEPT_CAPS.toString(16)} 0 0 0 0`],
    ["bounding or ambient capabilities", boundingAndAmbient().join(" "), ""],
  ], "spawner identity");
  restingUid = uid;
}

/** Whether the calling thread entered the spawner identity (so every spawn needs a uid). */
export function switchesUid(): boolean {
  return restingUid !== undefined;
}

/**
 * Runs `fn` with the calling spawner thread switched to `uid` (real, effective and saved), so
 * what it spawns runs as `uid`; the thread returns to its resting uid afterwards. Children keep
 * no capability: execve of a non-root program with no file capabilities empties every set.
 */
export function withThreadUid<T>(uid: number, fn: () => T): T {
  const rest = restingUid;
  if (rest === undefined) throw new Error("this thread has not entered the spawner identity");
  if (stuck) throw new SandboxUnavailableError(`spawner credentials are stuck: ${stuck}`);
  if (uid === 0 || uid === rest) throw new Error(`uid ${uid} is not a session uid`);
  setSwitchCaps(true);
  try {
    checkedSyscall("setresuid(session)", SYS.setresuid, uid, uid, uid);
    return fn();
  } finally {
    try {
      checkedSyscall("setresuid(rest)", SYS.setresuid, rest, rest, rest);
      setSwitchCaps(false);
    } catch (e) {
      stuck = String(e);
    }
  }
}

/**
 * Moves the calling spawner thread into a new, empty System V IPC namespace (CAP_SYS_ADMIN
 * effective for that one call), so the next child it spawns, and only that child's session,
 * shares it: its segments, queues and semaphores are invisible to every other session and to
 * the host, and the kernel destroys them with the namespace once the session's last process is
 * gone (the thread holds a namespace only until its next spawn, see spawner.ts).
 */
export function freshIpcNamespace(): void {
  withNamespaceCaps(() => checkedSyscall("unshare(CLONE_NEWIPC)", SYS.unshare, CLONE_NEWIPC));
}

/**
 * Runs `call` on the calling spawner thread with CAP_SYS_ADMIN and CAP_SYS_CHROOT effective
 * (what namespace calls need), lowered again before it returns.
 */
export function withNamespaceCaps<T>(call: () => T): T {
  if (restingUid === undefined) throw new Error("this thread has not entered the spawner identity");
  checkedSyscall("capset(namespaces)", SYS.capset, capHeader, capsNamespace);
  try {
    return call();
  } finally {
    setSwitchCaps(false);
  }
}

/**
 * Sends SIGKILL to every process of `uid` (what `kill(-1)` reaches as that uid: its own
 * processes, not the calling process). Call it on an unrestricted root thread that spawns
 * nothing: it takes the uid as real and effective id for the call only, keeping root as saved
 * id to return to. A fork under way is covered: the kernel hands such a signal to the new child.
 */
export function killAllOf(uid: number): void {
  if (uid === 0) throw new Error("refusing to kill every process of root");
  checkedSyscall("setresuid(reap)", SYS.setresuid, uid, uid, 0);
  const rc = libc().kill(-1, SIGKILL);
  const code = rc === -1 ? errno() : 0;
  checkedSyscall("setresuid(root)", SYS.setresuid, 0, 0, 0);
  if (rc === -1 && code !== E.ESRCH) throw new OsError(`kill(-1) as ${uid}`, code);
}

/** A session's private directory: HOME and TMPDIR for its children. */
export interface PrivateDir {
  /** The directory itself (mode 0700, owned by the session's uid): TMPDIR. */
  dir: string;
  /** HOME, a subdirectory of `dir`. */
  home: string;
}

/**
 * Gives directory `dir` (made with {@link groupDirMode}) to root and the sandbox group `gid`:
 * sessions may pass through it but neither list nor change it. Nothing without a `gid` (a
 * server that is not root keeps its own directories).
 */
function shareWithGroup(dir: string, gid: number | null): void {
  if (gid !== null) check(`chown(${dir})`, libc().chown(cString(dir), 0, gid));
}

/** 0710 for a directory shared with the sandbox group `gid`, else 0700. */
function groupDirMode(gid: number | null): number {
  return gid === null ? 0o700 : 0o710;
}

/** The temporary directory, as Deno's own temporary files find it. */
function tempRoot(): string {
  return Deno.env.get("TMPDIR") || "/tmp";
}

const INSTANCE_DIR_PREFIX = "uexec-";

const MS_NOSUID = 0x2;
const MS_NODEV = 0x4;
const MNT_DETACH = 2;

/**
 * Creates the directory this server instance keeps its domain directories in,
 * `uexec-<instance>` in the temporary directory (see instance.ts), so that a later server can
 * remove what a dead one left. Sessions may pass through it (`gid` given) but neither list nor
 * change it.
 *
 * On a root server (`gid` given) with `tmpBytes`, it is a tmpfs of that size (nosuid, nodev),
 * mounted in the server's mount namespace before any domain's worker makes its own (which
 * thus holds a copy of the mount, the same file system): every session's HOME and TMPDIR are
 * on it, so what they hold is bounded by its size for all sessions together, and, as tmpfs
 * pages are charged to the memory cgroup of the process that wrote them, by each session's
 * memory limit for that session (this kernel has no tmpfs quotas, and a mount per session
 * would not reach the domain's mount namespace, which is private). It never touches the
 * host's disk; {@link removeInstanceDir} unmounts it.
 */
export function createInstanceDir(gid: number | null, tmpBytes?: number): string {
  const dir = `${tempRoot()}/${INSTANCE_DIR_PREFIX}${instanceName()}`;
  makeDir(dir, groupDirMode(gid));
  if (gid !== null && tmpBytes !== undefined) {
    const options = `size=${tmpBytes},mode=0${groupDirMode(gid).toString(8)},uid=0,gid=${gid}`;
    try {
      checkedSyscall(
        `mount(tmpfs, ${dir})`,
        SYS.mount,
        cString("tmpfs"),
        cString(dir),
        cString("tmpfs"),
        MS_NOSUID | MS_NODEV,
        cString(options),
      );
    } catch (err) {
      Deno.removeSync(dir);
      throw new SandboxUnavailableError(
        `cannot bound the sessions' HOME and TMPDIR: ${(err as Error).message}`,
        { cause: err },
      );
    }
  }
  shareWithGroup(dir, gid);
  return dir;
}

/**
 * Unmounts the tmpfs of an instance's directory `dir` (when it is one: a file system of its own)
 * and removes the rest. A plain directory is not unmounted: `umount2` refuses a server that is
 * not root with EPERM before it looks whether the path is a mount point at all.
 */
export async function removeInstanceDir(dir: string): Promise<void> {
  const mounted = Deno.lstatSync(dir).dev !== Deno.statSync(`${dir}/..`).dev;
  if (mounted && rawSyscall(SYS.umount2, cString(dir), MNT_DETACH) < 0 && errno() !== E.EINVAL) {
    throw new OsError(`umount(${dir})`, errno());
  }
  await Deno.remove(dir, { recursive: true });
}

/**
 * Removes the directories of server instances that no longer run (a server killed with
 * SIGKILL leaves its sessions' HOMEs, caches and all); resolves to how many. Only directories
 * of this server's uid count (not a look-alike another user made). Off the calling thread.
 */
export async function removeDeadInstanceDirs(): Promise<number> {
  const root = tempRoot();
  let removed = 0;
  for await (const entry of Deno.readDir(root)) {
    const instance = entry.name.slice(INSTANCE_DIR_PREFIX.length);
    if (!entry.isDirectory || !entry.name.startsWith(INSTANCE_DIR_PREFIX)) continue;
    if (!INSTANCE_NAME.test(instance) || instanceRuns(instance)) continue;
    const path = `${root}/${entry.name}`;
    if ((await Deno.lstat(path)).uid !== Deno.uid()) continue;
    await removeInstanceDir(path);
    removed++;
  }
  return removed;
}

/**
 * Creates the directory a domain's sessions get their private directories in (the profile's
 * `{tmp}`) in `parent` (the instance's directory; by default the temporary directory itself):
 * owned by root and the sandbox group with mode 0710 when `gid` is given (sessions may pass
 * through it but neither list nor change it), else owned by the server, mode 0700.
 */
export function createDomainDir(gid: number | null, parent = tempRoot()): string {
  const dir = makeUniqueDir(parent, "domain-", groupDirMode(gid));
  shareWithGroup(dir, gid);
  return dir;
}

/**
 * A private HOME's `.profile`. A login shell (the default) runs `/etc/profile` first, which may
 * set PATH anew (Debian's does, for every user but root): a tool the session's PATH found
 * (say in `/opt/node/bin`) would then be missing. This takes back the PATH the session started
 * with, then appends what the profiles added. POSIX sh, no command run: bash, dash and ksh read
 * it at every login shell's start.
 */
const PROFILE = `# Written by uexec: a login shell's /etc/profile may reset PATH. Put back the PATH
# this session started with, then add what the profiles added.
if [ -n "\${${LOGIN_PATH}-}" ]; then
  uexec_added=$PATH
  PATH=$${LOGIN_PATH}
  uexec_ifs=$IFS
  IFS=:
  set -f
  for uexec_dir in $uexec_added; do
    case ":$PATH:" in *":$uexec_dir:"*) ;; *) PATH=$PATH:$uexec_dir ;; esac
  done
  set +f
  IFS=$uexec_ifs
  export PATH
  unset uexec_added uexec_dir uexec_ifs ${LOGIN_PATH}
fi
`;

const PROFILE_BYTES = new TextEncoder().encode(PROFILE);

/** `mkdir` then `chmod` (a default ACL on the parent may have masked the mode), on this thread. */
function makeDir(path: string, mode: number): void {
  check(`mkdir(${path})`, libc().mkdir(cString(path), mode));
  checkedSyscall(`chmod(${path})`, SYS.fchmodat, AT_FDCWD, cString(path), mode);
}

/** A new directory `prefix<16 random hex digits>` in `base`. */
function makeUniqueDir(base: string, prefix: string, mode: number): string {
  for (;;) {
    const path = `${base}/${prefix}${crypto.getRandomValues(new Uint8Array(8)).toHex()}`;
    try {
      makeDir(path, mode);
      return path;
    } catch (err) {
      if (!(err instanceof OsError && err.errno === E.EEXIST)) throw err;
    }
  }
}

/** Creates `path` (which must not exist) holding `bytes`, on this thread. */
function writeNewFile(path: string, bytes: Uint8Array<ArrayBuffer>, mode: number): void {
  const flags = O.WRONLY | O.CREAT | O.EXCL | O.NOFOLLOW | O.CLOEXEC;
  const fd = checkedSyscall(`open(${path})`, SYS.openat, AT_FDCWD, cString(path), flags, mode);
  try {
    const written = check(`write(${path})`, libc().write(fd, bytes, BigInt(bytes.length)));
    if (written !== bytes.length) throw new Error(`write(${path}): ${written} of ${bytes.length}`);
  } finally {
    libc().close(fd);
  }
}

/** A `.gitconfig` with git's ownership check off and no identity (see git_config.ts). */
const GITCONFIG_BYTES = new TextEncoder().encode(gitConfigText({}));

/**
 * Creates a private directory for one session beneath `base`, mode 0700, with a `home`
 * subdirectory holding the `.profile` above and `gitconfig` as `.gitconfig`, all owned by
 * `owner` when given. About a dozen synchronous system calls on this thread (tens of
 * microseconds), where Deno's asynchronous file calls for the same work cost several times that
 * in dispatch.
 */
export function createPrivateDir(
  owner: SandboxIdentity | null,
  base: string,
  gitconfig: Uint8Array<ArrayBuffer> = GITCONFIG_BYTES,
): PrivateDir {
  const dir = makeUniqueDir(base, "uexec-session-", 0o700);
  const home = `${dir}/home`;
  const profile = `${home}/.profile`;
  const git = `${home}/.gitconfig`;
  try {
    makeDir(home, 0o700);
    writeNewFile(profile, PROFILE_BYTES, 0o644);
    writeNewFile(git, gitconfig, 0o644);
    if (owner) {
      for (const path of [dir, home, profile, git]) {
        check(`chown(${path})`, libc().chown(cString(path), owner.uid, owner.gid));
      }
    }
  } catch (err) {
    Deno.removeSync(dir, { recursive: true });
    throw err;
  }
  return { dir, home };
}

/** Removes a private directory and everything in it, off the calling thread. */
export async function removePrivateDir(dir: string): Promise<void> {
  await Deno.remove(dir, { recursive: true });
}

/** The environment entries that point a child at its private directory. */
export function privateEnv(dir: PrivateDir): Record<string, string> {
  return { HOME: dir.home, TMPDIR: dir.dir };
}

function ownerOf(info: Deno.FileInfo): Owner {
  return { uid: info.uid ?? 0, gid: info.gid ?? 0, mode: (info.mode ?? 0) & 0o7777 };
}

/** Whether any session (a uid of the range that owns nothing, in the group) gets `want`. */
function canAccess(path: string, ids: SandboxIds, want: number): boolean {
  const owner = ownerOf(Deno.statSync(path));
  return permits(owner, readAcl(path, "access"), ids.first, ids.gid, want);
}

function parentsOf(path: string): string[] {
  const parts = path.split("/").filter(Boolean);
  return parts.slice(0, -1).map((_, i) => `/${parts.slice(0, i + 1).join("/")}`).concat(["/"]);
}

function describe(path: string): string {
  const info = Deno.statSync(path);
  return `${path} (owner ${info.uid}:${info.gid}, mode ${
    ((info.mode ?? 0) & 0o7777).toString(8).padStart(4, "0")
  })`;
}

function grant(path: string, info: Deno.FileInfo, gid: number): number {
  const owner = ownerOf(info);
  const perm = info.isDirectory ? 7 : PERM.R | PERM.W | ((owner.mode >> 6) & PERM.X);
  let changed = 0;
  const access = readAcl(path, "access");
  if (!permits(owner, access, -1, gid, perm)) {
    writeAcl(path, "access", withGrant(access ?? aclFromMode(owner.mode), TAG.GROUP, gid, perm));
    changed++;
  }
  if (info.isDirectory) {
    const defaults = readAcl(path, "default");
    const named = defaults?.find((e) => e.tag === TAG.GROUP && e.id === gid);
    if (named?.perm !== 7) {
      writeAcl(
        path,
        "default",
        withGrant(defaults ?? aclFromMode(owner.mode), TAG.GROUP, gid, 7),
      );
      changed++;
    }
  }
  return changed;
}

/** Told about each path before it is granted; true keeps the grant out of it (git_guard.ts). */
export type GrantHook = (path: string, info: Deno.FileInfo) => boolean;

/**
 * Whether `uid` is one a sandbox hands out: of `ids`' range (its resting uid included), or of
 * the default pool (another server's block, or this one's before a restart).
 */
function sessionMade(uid: number | null, ids: SandboxIds): boolean {
  if (uid === null) return false;
  const { base, blockSize, blocks } = DEFAULT_POOL;
  return (uid >= ids.spawner && uid <= ids.last) ||
    (uid >= base && uid < base + blockSize * blocks);
}

function grantTree(
  path: string,
  ids: SandboxIds,
  skip: Set<string>,
  claim?: GrantHook,
): number {
  const info = Deno.lstatSync(path);
  if (claim?.(path, info) || skip.has(path)) return 0;
  if (!info.isDirectory && !info.isFile) return 0;
  // What a session made got the group's access when it was made (the default ACL); if it is
  // narrower now, its session narrowed it (`chmod 600`): never widened again.
  let changed = sessionMade(info.uid, ids) ? 0 : grant(path, info, ids.gid);
  if (info.isDirectory) {
    for (const entry of Deno.readDirSync(path)) {
      changed += grantTree(`${path}/${entry.name}`, ids, skip, claim);
    }
  }
  return changed;
}

function unusable(workdir: string, ids: SandboxIds, why: string, fix: string) {
  return new SandboxUnavailableError(
    `workdir ${workdir} cannot be used by the sandbox group ${ids.gid}: ${why}. Fix: ${fix}`,
  );
}

/**
 * Checks, without changing anything, that every session can reach `workdir`: it must be an
 * existing directory whose ancestors (and, with `self`, itself) let the sandbox group search
 * them. Throws a {@link SandboxUnavailableError} that says why and how to fix it.
 */
export function assertReachable(workdir: string, ids: SandboxIds, self = false): void {
  let info: Deno.FileInfo;
  try {
    info = Deno.statSync(workdir);
  } catch (e) {
    const why = e instanceof Deno.errors.NotFound ? "it does not exist" : String(e);
    throw unusable(workdir, ids, why, "create it, or pass an existing workdir");
  }
  if (!info.isDirectory) {
    throw unusable(workdir, ids, "it is not a directory", "pass a directory");
  }
  const real = Deno.realPathSync(workdir);
  const dirs = [...parentsOf(workdir), ...parentsOf(real), ...(self ? [real] : [])];
  for (const parent of new Set(dirs)) {
    if (!canAccess(parent, ids, PERM.X)) {
      throw unusable(
        workdir,
        ids,
        `${parent === real ? "the directory" : "its ancestor"} ${describe(parent)} ` +
          `does not let group ${ids.gid} search it`,
        `move the workspace elsewhere, or allow search with "setfacl -m g:${ids.gid}:x ${parent}" ` +
          `(or "chmod o+x ${parent}")`,
      );
    }
  }
}

/**
 * Makes `workdir` usable by every session (call as root, before spawning): every ancestor must
 * already let the sandbox group search (nothing outside the workspace is changed), then the
 * workspace tree gets an ACL entry granting the group rw (rwx on directories, x on files whose
 * owner has x) and a default ACL, so files a session creates (owned by its own uid) stay
 * writable by the next session's uid. Paths in `skip` (read-only subpaths), and paths `claim`
 * returns true for, are left alone, and so is an entry a session uid owns (it had the group's
 * access from its start; a session that took it away meant to). Returns how many ACLs were written. Throws a
 * {@link SandboxUnavailableError} that says why and how to fix it when the workspace cannot be
 * made usable.
 */
export function prepareWorkdir(
  workdir: string,
  ids: SandboxIds,
  skip: string[] = [],
  claim?: GrantHook,
): number {
  assertReachable(workdir, ids);
  const real = Deno.realPathSync(workdir);
  try {
    const skipReal = skip.map(realPathOrSelf);
    return grantTree(real, ids, new Set(skipReal), claim);
  } catch (e) {
    if (!(e instanceof OsError)) throw e;
    const why = e.errno === E.EOPNOTSUPP
      ? `its file system does not support POSIX ACLs (${e.call})`
      : e.errno === E.EROFS
      ? `it is on a read-only file system (${e.call})`
      : e.message;
    throw unusable(
      workdir,
      ids,
      why,
      `give group ${ids.gid} write access yourself (e.g. "chgrp -R ${ids.gid} ${workdir} && ` +
        `chmod -R g+rwXs ${workdir}"), or put the workspace on a file system with ACL support`,
    );
  }
}
