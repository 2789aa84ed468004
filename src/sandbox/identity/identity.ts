/**
 * Who sandboxed children run as, and how the spawning thread becomes them.
 *
 * When the server runs as root, every session runs as a uid of its own, taken from
 * `UEXEC_UID_RANGE` (default: the first free block of the default pool, see uid_lease.ts), in
 * one shared group (`UEXEC_SANDBOX_GID`, default: the range's first id) with no supplementary
 * groups and no capabilities. The range's first uid is never a session's: it is what spawning
 * threads rest as between spawns. A spawning worker keeps only CAP_SETUID, CAP_SETGID,
 * CAP_SYS_ADMIN and CAP_SYS_CHROOT, permitted but not effective; it raises the last two for one
 * `unshare(CLONE_NEWIPC)` between sessions (a private IPC namespace each) and for the `setns`
 * into and out of a session's own mount namespace around its spawn (enforce/terminal_slots.ts),
 * and switches its own thread to the session's uid just around one spawn, with raw per-thread
 * system calls (glibc's wrappers would change every thread of the server). This module must
 * never change the credentials of a thread other than the caller's, nor let a child keep a
 * capability.
 *
 * Flow at a glance (the `identity/` folder: who a sandboxed thing is):
 * - `identity.ts` (this file): the ids of a root server ({@link sandboxIds}), the spawning
 *   thread's identity drop and per-spawn uid switch, the reaper's `kill(-1)` as a uid.
 * - `session_uids.ts` puts the session uids together on first use: `uid_lease.ts` leases this
 *   server's block across servers, `uid_cursor.ts` keeps where handing out goes on across runs,
 *   `uids.ts` hands uids out and back, each reaped (`reaper.ts`: the interface the composition
 *   root's spawner fills, so that sandbox/ imports no workers/) and its files taken back
 *   (`uid_files.ts`, run by the reaper) before reuse.
 * - `home.ts`: each session's private HOME and TMPDIR, owned by its uid, and the instance and
 *   domain directories they sit in.
 * - `git_config.ts`, `host_git.ts`: the `.gitconfig` a private HOME holds, from the host's git.
 * - `tcp_peers.ts`: which uid owns the client end of a local TCP connection (the HTTP layer and
 *   the egress proxy tell a sandboxed client by it).
 *
 * @module
 */

import { SandboxUnavailableError } from "../errors.ts";
import { E, errno, libc, OsError, rawSyscall } from "../../ffi/libc.ts";
import { checkedSyscall, prctl, SYS, threadEuid } from "../syscalls.ts";
import { pooledBlock } from "./uid_lease.ts";

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
