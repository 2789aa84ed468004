/**
 * POSIX ACLs read and written as raw `system.posix_acl_*` extended attributes, plus the
 * kernel's permission algorithm, so the server (as root) can grant the sandbox group access to
 * a workspace and explain exactly which path stops it.
 *
 * The encoding is the kernel's xattr format: a little-endian u32 version (2) followed by
 * {u16 tag, u16 perm, u32 id} entries sorted by tag then id. This module must never remove or
 * weaken an existing entry: it only adds or widens the entry for one user or group and the mask.
 *
 * @module
 */

import { cString, E, errno, OsError, rawSyscall } from "../../ffi/libc.ts";
import { checkedSyscall, SYS } from "../syscalls.ts";

const VERSION = 2;
/** The id of an entry that names nobody (owner, owning group, mask, other). */
export const UNDEFINED_ID = 0xffffffff;
/** The extended attributes that hold a file's access ACL and a directory's default ACL. */
export const ACL_XATTR = {
  access: "system.posix_acl_access",
  default: "system.posix_acl_default",
} as const;

/** Which of a file's ACLs. */
export type AclKind = keyof typeof ACL_XATTR;

/** ACL entry tags, in the order the kernel requires. */
export const TAG = {
  USER_OBJ: 0x01,
  USER: 0x02,
  GROUP_OBJ: 0x04,
  GROUP: 0x08,
  MASK: 0x10,
  OTHER: 0x20,
} as const;

/** Permission bits: read, write, execute/search. */
export const PERM = { R: 4, W: 2, X: 1 } as const;

/** One ACL entry. */
export interface AclEntry {
  tag: number;
  perm: number;
  id: number;
}

/** Decodes an ACL xattr value. */
export function decodeAcl(bytes: Uint8Array): AclEntry[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes.length < 4 || view.getUint32(0, true) !== VERSION) {
    throw new Error("unknown ACL version");
  }
  const entries: AclEntry[] = [];
  for (let off = 4; off + 8 <= bytes.length; off += 8) {
    entries.push({
      tag: view.getUint16(off, true),
      perm: view.getUint16(off + 2, true),
      id: view.getUint32(off + 4, true),
    });
  }
  return entries;
}

/** Encodes entries (sorting them as the kernel requires) into an ACL xattr value. */
export function encodeAcl(entries: AclEntry[]): Uint8Array {
  const sorted = [...entries].sort((a, b) => a.tag - b.tag || a.id - b.id);
  const bytes = new Uint8Array(4 + 8 * sorted.length);
  const view = new DataView(bytes.buffer);
  view.setUint32(0, VERSION, true);
  sorted.forEach((e, i) => {
    view.setUint16(4 + i * 8, e.tag, true);
    view.setUint16(6 + i * 8, e.perm, true);
    view.setUint32(8 + i * 8, e.id, true);
  });
  return bytes;
}

/** The minimal ACL equivalent to a file mode. */
export function aclFromMode(mode: number): AclEntry[] {
  return [
    { tag: TAG.USER_OBJ, perm: (mode >> 6) & 7, id: UNDEFINED_ID },
    { tag: TAG.GROUP_OBJ, perm: (mode >> 3) & 7, id: UNDEFINED_ID },
    { tag: TAG.OTHER, perm: mode & 7, id: UNDEFINED_ID },
  ];
}

/**
 * Reads an ACL xattr of `path`; null when it has none. A symlink at `path` is not followed,
 * unless `follow` (for `/proc/self/fd/<n>`, which leads to the entry a descriptor holds).
 */
export function readAcl(path: string, kind: AclKind, follow = false): AclEntry[] | null {
  const buf = new Uint8Array(8192);
  const n = rawSyscall(
    follow ? SYS.getxattr : SYS.lgetxattr,
    cString(path),
    cString(ACL_XATTR[kind]),
    buf,
    buf.length,
  );
  if (n === -1) {
    const code = errno();
    if (code === E.ENODATA || code === E.EOPNOTSUPP) return null;
    throw new OsError(`getxattr(${path})`, code);
  }
  return decodeAcl(buf.subarray(0, n));
}

/** Writes an ACL xattr of `path` (a symlink there followed only with `follow`, as above). */
export function writeAcl(path: string, kind: AclKind, entries: AclEntry[], follow = false): void {
  const value = encodeAcl(entries);
  const name = ACL_XATTR[kind];
  checkedSyscall(
    `setxattr(${path}, ${name})`,
    follow ? SYS.setxattr : SYS.lsetxattr,
    cString(path),
    cString(name),
    value,
    value.length,
    0,
  );
}

/**
 * `entries` with the named user or group (`tag` USER or GROUP) `id` granted at least `perm`,
 * and the mask widened to cover every group-class entry.
 */
export function withGrant(entries: AclEntry[], tag: number, id: number, perm: number): AclEntry[] {
  const others = entries.filter((e) => e.tag !== TAG.MASK && !(e.tag === tag && e.id === id));
  const current = entries.find((e) => e.tag === tag && e.id === id)?.perm ?? 0;
  const granted = [...others, { tag, perm: current | perm, id }];
  return [...granted, { tag: TAG.MASK, perm: groupClass(granted), id: UNDEFINED_ID }];
}

/** The permissions the group-class entries (named users, owning and named groups) hold. */
export function groupClass(entries: AclEntry[]): number {
  return entries
    .filter((e) => e.tag === TAG.USER || e.tag === TAG.GROUP_OBJ || e.tag === TAG.GROUP)
    .reduce((m, e) => m | e.perm, 0);
}

/** The file owner, group and mode bits of a stat result. */
export interface Owner {
  uid: number;
  gid: number;
  mode: number;
}

/**
 * Whether a process with `uid` and the single group `gid` (no supplementary groups, no
 * capabilities) gets every bit of `want` on a file, following the kernel's POSIX ACL algorithm.
 */
export function permits(
  owner: Owner,
  acl: AclEntry[] | null,
  uid: number,
  gid: number,
  want: number,
): boolean {
  const entries = acl ?? aclFromMode(owner.mode);
  const has = (perm: number) => (perm & want) === want;
  const mask = entries.find((e) => e.tag === TAG.MASK)?.perm ?? 7;
  if (uid === owner.uid) return has((owner.mode >> 6) & 7);
  const named = entries.find((e) => e.tag === TAG.USER && e.id === uid);
  if (named) return has(named.perm & mask);
  const groups = entries.filter((e) =>
    (e.tag === TAG.GROUP_OBJ && owner.gid === gid) || (e.tag === TAG.GROUP && e.id === gid)
  );
  if (groups.length > 0) return groups.some((e) => has(e.perm & mask));
  return has(owner.mode & 7);
}
