/**
 * Who sandboxed children run as, and the files they need to own or reach.
 *
 * When the server runs as root, children run as an unprivileged uid/gid (`UEXEC_SANDBOX_UID` /
 * `UEXEC_SANDBOX_GID`, default 65534) with no supplementary groups and no capabilities. The
 * spawning worker drops to it with raw per-thread system calls (glibc's wrappers would change
 * every thread of the server). The server, still root, gives that uid a private per-session
 * directory and a POSIX ACL grant on the workspace. This module must never drop the identity
 * of a thread other than the caller's, and never grant anything outside the workspace.
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
  withUserGrant,
  writeAcl,
} from "./acl.ts";
import { SandboxUnavailableError } from "./errors.ts";
import { realPathOrSelf } from "./fsinfo.ts";
import { E, OsError } from "../ffi/libc.ts";
import { checkedSyscall, SYS, threadEuid } from "./syscalls.ts";

/** The credentials sandboxed children run as. */
export interface SandboxIdentity {
  uid: number;
  gid: number;
}

const NOBODY = 65534;

function idFromEnv(name: string): number {
  const raw = Deno.env.get(name);
  if (raw === undefined || raw === "") return NOBODY;
  const id = Number(raw);
  if (!Number.isInteger(id) || id <= 0 || id >= 0xffffffff) {
    throw new SandboxUnavailableError(`${name}=${raw} is not a valid non-root id`);
  }
  return id;
}

/**
 * The identity children drop to: null when the server is not root (children keep the server's
 * uid, which already has no privileges to lose). Explicit values win over the environment.
 */
export function sandboxIdentity(explicit: Partial<SandboxIdentity> = {}): SandboxIdentity | null {
  if (threadEuid() !== 0) return null;
  const identity = {
    uid: explicit.uid ?? idFromEnv("UEXEC_SANDBOX_UID"),
    gid: explicit.gid ?? idFromEnv("UEXEC_SANDBOX_GID"),
  };
  if (identity.uid === 0 || identity.gid === 0) {
    throw new SandboxUnavailableError("the sandbox uid and gid must not be 0");
  }
  return identity;
}

const CAPABILITY_VERSION_3 = 0x20080522;

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

/**
 * Drops the calling thread (and the children it spawns afterwards) to `identity`: no
 * supplementary groups, then real/effective/saved gid and uid. Verifies the result with system
 * calls (not /proc, which may be mounted with hidepid by then): the ids, no groups, and every
 * capability set empty (the ambient set cannot outgrow the empty permitted set).
 */
export function dropThreadIdentity(identity: SandboxIdentity): void {
  const { uid, gid } = identity;
  checkedSyscall("setgroups(0)", SYS.setgroups, 0, null);
  checkedSyscall("setresgid", SYS.setresgid, gid, gid, gid);
  checkedSyscall("setresuid", SYS.setresuid, uid, uid, uid);
  const checks: [string, string, string][] = [
    ["uids", threadIds(SYS.getresuid, "getresuid"), `${uid} ${uid} ${uid}`],
    ["gids", threadIds(SYS.getresgid, "getresgid"), `${gid} ${gid} ${gid}`],
    ["supplementary groups", String(checkedSyscall("getgroups", SYS.getgroups, 0, null)), "0"],
    ["capabilities", threadCapabilities(), "0 0 0 0 0 0"],
  ];
  for (const [what, got, want] of checks) {
    if (got !== want) {
      throw new SandboxUnavailableError(
        `identity drop did not hold: ${what} are "${got}", expected "${want}"`,
      );
    }
  }
}

/** A session's private directory: HOME and TMPDIR for its children. */
export interface PrivateDir {
  /** The directory itself (mode 0700, owned by the sandbox identity): TMPDIR, and a writable root. */
  dir: string;
  /** HOME, a subdirectory of `dir`. */
  home: string;
}

/**
 * Creates a private directory for one session beneath `base` (default: the system temp dir),
 * owned by `identity` when given, mode 0700, with a `home` subdirectory. The file operations
 * run off the calling thread.
 */
export async function createPrivateDir(
  identity: SandboxIdentity | null,
  base?: string,
): Promise<PrivateDir> {
  const dir = await Deno.makeTempDir({ prefix: "uexec-session-", dir: base });
  const home = `${dir}/home`;
  await Deno.mkdir(home, { mode: 0o700 });
  for (const path of [dir, home]) {
    await Deno.chmod(path, 0o700);
    if (identity) await Deno.chown(path, identity.uid, identity.gid);
  }
  return { dir, home };
}

/** Removes a session's private directory and everything in it, off the calling thread. */
export async function removePrivateDir(dir: PrivateDir): Promise<void> {
  await Deno.remove(dir.dir, { recursive: true });
}

/** The environment entries that point a child at its private directory. */
export function privateEnv(dir: PrivateDir): Record<string, string> {
  return { HOME: dir.home, TMPDIR: dir.dir };
}

function ownerOf(info: Deno.FileInfo): Owner {
  return { uid: info.uid ?? 0, gid: info.gid ?? 0, mode: (info.mode ?? 0) & 0o7777 };
}

function canAccess(path: string, identity: SandboxIdentity, want: number): boolean {
  const owner = ownerOf(Deno.statSync(path));
  return permits(owner, readAcl(path, "access"), identity.uid, identity.gid, want);
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

function grant(path: string, info: Deno.FileInfo, identity: SandboxIdentity): number {
  const owner = ownerOf(info);
  const perm = info.isDirectory ? 7 : PERM.R | PERM.W | ((owner.mode >> 6) & PERM.X);
  let changed = 0;
  const access = readAcl(path, "access");
  if (!permits(owner, access, identity.uid, identity.gid, perm)) {
    writeAcl(path, "access", withUserGrant(access ?? aclFromMode(owner.mode), identity.uid, perm));
    changed++;
  }
  if (info.isDirectory) {
    const defaults = readAcl(path, "default");
    const named = defaults?.find((e) => e.tag === TAG.USER && e.id === identity.uid);
    if (named?.perm !== 7) {
      writeAcl(
        path,
        "default",
        withUserGrant(defaults ?? aclFromMode(owner.mode), identity.uid, 7),
      );
      changed++;
    }
  }
  return changed;
}

/** Told about each path before it is granted; true keeps the grant out of it (git_guard.ts). */
export type GrantHook = (path: string, info: Deno.FileInfo) => boolean;

function grantTree(
  path: string,
  identity: SandboxIdentity,
  skip: Set<string>,
  claim?: GrantHook,
): number {
  const info = Deno.lstatSync(path);
  if (claim?.(path, info) || skip.has(path)) return 0;
  if (!info.isDirectory && !info.isFile) return 0;
  let changed = grant(path, info, identity);
  if (info.isDirectory) {
    for (const entry of Deno.readDirSync(path)) {
      changed += grantTree(`${path}/${entry.name}`, identity, skip, claim);
    }
  }
  return changed;
}

function unusable(
  workdir: string,
  identity: SandboxIdentity,
  why: string,
  fix: string,
): SandboxUnavailableError {
  return new SandboxUnavailableError(
    `workdir ${workdir} cannot be used by the sandbox uid ${identity.uid}: ${why}. Fix: ${fix}`,
  );
}

/**
 * Checks, without changing anything, that `identity` can reach `workdir`: it must be an
 * existing directory whose ancestors (and, with `self`, itself) let the uid search them.
 * Throws a {@link SandboxUnavailableError} that says why and how to fix it.
 */
export function assertReachable(workdir: string, identity: SandboxIdentity, self = false): void {
  let info: Deno.FileInfo;
  try {
    info = Deno.statSync(workdir);
  } catch (e) {
    const why = e instanceof Deno.errors.NotFound ? "it does not exist" : String(e);
    throw unusable(workdir, identity, why, "create it, or pass an existing workdir");
  }
  if (!info.isDirectory) {
    throw unusable(workdir, identity, "it is not a directory", "pass a directory");
  }
  const real = Deno.realPathSync(workdir);
  const dirs = [...parentsOf(workdir), ...parentsOf(real), ...(self ? [real] : [])];
  for (const parent of new Set(dirs)) {
    if (!canAccess(parent, identity, PERM.X)) {
      throw unusable(
        workdir,
        identity,
        `${parent === real ? "the directory" : "its ancestor"} ${describe(parent)} ` +
          `does not let uid ${identity.uid} search it`,
        `move the workspace elsewhere, or allow search with "setfacl -m u:${identity.uid}:x ${parent}" ` +
          `(or "chmod o+x ${parent}"), or set UEXEC_SANDBOX_UID to a uid that can reach it`,
      );
    }
  }
}

/**
 * Makes `workdir` usable by `identity` (call as root, before spawning): every ancestor must
 * already let it search (nothing outside the workspace is changed), then the workspace tree
 * gets an ACL entry granting the uid rw (rwx on directories, x on files whose owner has x) and
 * a default ACL so files created later inherit it. Paths in `skip` (read-only subpaths), and
 * paths `claim` returns true for, are left alone. Returns how many ACLs were written. Throws a {@link SandboxUnavailableError}
 * that says why and how to fix it when the workspace cannot be made usable.
 */
export function prepareWorkdir(
  workdir: string,
  identity: SandboxIdentity,
  skip: string[] = [],
  claim?: GrantHook,
): number {
  assertReachable(workdir, identity);
  const real = Deno.realPathSync(workdir);
  try {
    const skipReal = skip.map(realPathOrSelf);
    return grantTree(real, identity, new Set(skipReal), claim);
  } catch (e) {
    if (!(e instanceof OsError)) throw e;
    const why = e.errno === E.EOPNOTSUPP
      ? `its file system does not support POSIX ACLs (${e.call})`
      : e.errno === E.EROFS
      ? `it is on a read-only file system (${e.call})`
      : e.message;
    throw unusable(
      workdir,
      identity,
      why,
      `give uid ${identity.uid} write access yourself (e.g. "chown -R ${identity.uid}:${identity.gid} ${workdir}"), ` +
        `or put the workspace on a file system with ACL support`,
    );
  }
}
