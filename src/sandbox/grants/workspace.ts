/**
 * The workspace grant: makes the server's workspace usable by every session uid through one
 * POSIX ACL entry for the sandbox group (and a default ACL, so files a session makes stay
 * writable by the next), and checks that a workdir outside it is reachable already. It must
 * never grant anything outside the workspace, nor widen what a session narrowed.
 *
 * Flow at a glance (the `grants/` folder: write access a session's uid is given):
 * - `workspace.ts` (this file): the workspace granted once to the sandbox group (domains.ts
 *   calls {@link prepareWorkdir} with the first workdir inside it), {@link assertReachable} for
 *   workdirs outside it and for each approved directory.
 * - `session_grant.ts`: an approved writable directory beyond the workspace granted to one
 *   session's uid while it runs (`write_grant.ts` does the granting and the taking back, on a
 *   thread of its own: `grant_thread.ts`, `grant_worker.ts`), recorded until taken back
 *   (`grant_journal.ts`), so that the next start takes back what a crash left.
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
import { E, OsError } from "../../ffi/libc.ts";
import { DEFAULT_POOL } from "../identity/uid_lease.ts";
import type { SandboxIds } from "../identity/identity.ts";

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
