/**
 * Write access an approver granted, made real for one session's uid. An approved `escalate.write`
 * directory becomes a writable root of the session's Landlock policy, but on a root server the
 * session runs as a uid of its own, which the file system's permissions do not let write a
 * directory the operator owns (outside the workspace, which the sandbox group is granted as a
 * whole), nor a `.git` directory (kept read-only by git_guard.ts). So, before the session's
 * command starts, each such directory gets POSIX ACL entries for that uid alone; after the
 * session's processes are gone they are taken away.
 *
 * The grant never lets the uid read what it could not read before: an entry gets write only
 * where the uid can already read it (a directory: read and search it), and one it cannot read
 * is left alone, with everything beneath it. Left alone too: anything but regular files and
 * directories, files with several links (their other names may lie elsewhere) or set-id bits,
 * entries whose ACL mask holds another entry back (the uid's entry would need it widened),
 * what another session's uid owns, what is in a sticky world-writable directory such as `/tmp`
 * (every user's: the uid may already make its own entries there, the others' stay theirs),
 * executable files inside a protected directory (hooks: they run as whoever runs git next),
 * and, beneath the granted directory, directories with a protected name (a nested `.git`).
 * More than `MAX_ENTRIES` entries is refused. Landlock still decides where the session may
 * write; this only makes the permissions agree for that one uid.
 *
 * Taking it back: each entry that got an entry loses it again (another session's grant on the
 * same entry stays), and what the session made is given to the granted directory's owner, with
 * no write for group and others, no set-id bits and no ACL entries of its own (a file the
 * session made 0777 would otherwise be root's and everyone's to change); each granted directory
 * is reached through the descriptor held since the grant, so renaming it (or a directory above
 * it) meanwhile does not hide it, and each entry given an ACL entry is found again by its file
 * handle (`name_to_handle_at`, taken at the grant) when the session renamed it out of the
 * granted directories meanwhile; an entry without a handle gets no ACL entry at all;
 * inside a protected directory as git_guard.ts adopts what the sandbox made (no write for group
 * and others, no execute bits on files), so no hook it planted runs when the operator runs git;
 * elsewhere, a repository's shape the session made is taken apart first (git_guard.ts
 * `unshape`), so no bare repository whose configuration git trusts becomes the owner's.
 * A grant a killed server held is taken back by the next start from its record
 * (grant_journal.ts), the uid's entry taken wherever one is left.
 *
 * Entries are reached through descriptors, never by following a symlink (entries.ts). This
 * module must never widen what any other uid may do, and never touch an entry outside the
 * granted directories.
 *
 * @module
 */

import {
  type AclEntry,
  aclFromMode,
  groupClass,
  PERM,
  permits,
  TAG,
  UNDEFINED_ID,
  withGrant,
} from "../fs/acl.ts";
import {
  chmodOf,
  chownOf,
  eachChild,
  kind,
  openCanonical,
  readAclOf,
  type Stat,
  statOf,
  writeAclOf,
} from "../fs/entries.ts";
import { SandboxUnavailableError } from "../errors.ts";
import { adopt, type Keeper, keeperOf, unshape } from "../git_guard/protected.ts";
import { pathOf } from "../git_guard/fanotify.ts";
import type { SandboxOwners } from "../identity/identity.ts";
import { closeFd, SYS } from "../syscalls.ts";
import { AT, cString, E, errno, O, openFile, OsError, rawSyscall, S_IF } from "../../ffi/libc.ts";

/** `struct file_handle`: its size and type, then up to this many bytes. */
const MAX_HANDLE_SZ = 128;
const ESTALE = 116;
const EOVERFLOW = 75;

/**
 * The most entries one grant may look at: the command waits for the walk (about five system
 * calls an entry, on the grant thread, grant_thread.ts), and a directory this large is better
 * granted in part.
 */
export const MAX_ENTRIES = 50_000;

/**
 * A grant that could not be made. `takenBack` is false when what it had already changed could
 * not all be undone: then its uid must not be used again.
 */
export class GrantError extends SandboxUnavailableError {
  constructor(message: string, readonly takenBack: boolean) {
    super(message);
    this.name = "GrantError";
  }
}

/** A directory to grant, and whether it lies in (or is) a protected directory. */
export interface GrantedRoot {
  /** Canonical and absolute. */
  path: string;
  /** Inside a protected directory (`.git`): what the session made loses execute bits. */
  protected: boolean;
}

/** Who the grant is for, and what it must leave alone. */
export interface GrantOptions {
  uid: number;
  /** The session's (only) group. */
  gid: number;
  /** Every sandbox uid: another session's entries are left alone. */
  owners: SandboxOwners;
  /** Names kept read-only at any depth (git_guard.ts): not entered beneath a granted root. */
  protectedNames: ReadonlySet<string>;
  /** At most this many entries are looked at (default {@link MAX_ENTRIES}). */
  maxEntries?: number;
}

/**
 * Whether the ACL's mask holds an entry below what it says: then the mask the uid's entry needs
 * would widen that entry too, so such an entry is left alone.
 */
function maskHoldsBack(entries: AclEntry[] | null): boolean {
  const mask = entries?.find((e) => e.tag === TAG.MASK);
  return mask !== undefined && (groupClass(entries!) & ~mask.perm) !== 0;
}

/**
 * `entries` without the named user `uid`: with no named entry left, the minimal ACL it was;
 * otherwise the mask covers exactly the entries left (another session's grant on the same entry
 * stays, and nobody's mask was holding anything back, see `maskHoldsBack`).
 */
function withoutUser(entries: AclEntry[], uid: number): AclEntry[] {
  const rest = entries.filter((e) => e.tag !== TAG.MASK && !(e.tag === TAG.USER && e.id === uid));
  if (!rest.some((e) => e.tag === TAG.USER || e.tag === TAG.GROUP)) return rest;
  return [...rest, { tag: TAG.MASK, perm: groupClass(rest), id: UNDEFINED_ID }];
}

const key = (st: Stat) => `${st.dev}:${st.ino}`;

/** A sticky world-writable directory (`/tmp`): every user's. */
const shared = (st: Stat) => kind(st) === S_IF.DIR && (st.mode & 0o1002) === 0o1002;

/** Looks at one entry of a walk; returns whether to enter it. */
type Visit = (fd: number, st: Stat, inShared: boolean) => boolean;

/** Write access to some directories for one uid, until {@link WriteGrant.revoke}. */
export class WriteGrant {
  readonly #roots: GrantedRoot[];
  readonly #opts: GrantOptions;
  /**
   * The entries given an ACL entry, by device and inode: their file handle, and the granted
   * root whose held descriptor is on their file system (for `open_by_handle_at`).
   */
  readonly #granted = new Map<string, { handle: Uint8Array; root: GrantedRoot }>();
  /** The granted entries the take-back's walk met where they were. */
  #found = new Set<string>();
  /** A grant a dead server made (grant_journal.ts): which entries got an ACL entry is unknown. */
  readonly #recovered: boolean;
  /** Each granted root, held open since it was granted (see {@link revoke}). */
  #held = new Map<GrantedRoot, number>();
  #revoked = false;
  /** Entries the grant looked at. */
  #seen = 0;

  private constructor(roots: GrantedRoot[], opts: GrantOptions, recovered = false) {
    this.#roots = roots;
    this.#opts = opts;
    this.#recovered = recovered;
  }

  /**
   * Takes back a grant a server killed while it held it made (its record, grant_journal.ts):
   * as {@link revoke}, with the uid's ACL entry taken from every entry that has one. False when
   * some of it failed (logged).
   */
  static takeBack(roots: GrantedRoot[], opts: GrantOptions): boolean {
    return new WriteGrant(roots, opts, true).revoke();
  }

  /**
   * Grants `opts.uid` write access to `roots` as the module doc says; throws a
   * {@link GrantError} saying why when it cannot (and then grants nothing).
   */
  static grant(roots: GrantedRoot[], opts: GrantOptions): WriteGrant {
    const grant = new WriteGrant(roots, opts);
    try {
      for (const root of roots) {
        let top = true;
        const found = grant.#walkRoot(root, true, (fd, st) => {
          if (top && !grant.#reads(st, readAclOf(fd, "access"))) {
            throw new Error(
              `its uid cannot read ${root.path} (owner ${st.uid}:${st.gid}, mode ` +
                `${(st.mode & 0o7777).toString(8)}), and a write grant never widens what it reads`,
            );
          }
          top = false;
          return grant.#give(fd, st, root);
        });
        if (!found) throw new Error(`${root.path} is gone or is reached through a symlink`);
      }
    } catch (err) {
      throw new GrantError(
        `cannot grant write access to ${roots.map((r) => r.path).join(", ")}: ` +
          (err as Error).message,
        grant.revoke(),
      );
    }
    return grant;
  }

  /** How many entries were given an ACL entry. */
  get entries(): number {
    return this.#granted.size;
  }

  /**
   * Takes the uid's entries away again and takes back what the session made; call once its
   * processes are gone. False when some of it failed (logged): the uid must not be used again.
   */
  revoke(): boolean {
    if (this.#revoked) return true;
    this.#revoked = true;
    const errors: string[] = [];
    for (const root of this.#roots) {
      try {
        // The root's owner gets what the session made; the walk visits the root first.
        let keeper: Keeper | undefined;
        this.#walkRoot(root, false, (fd, st, inShared) => {
          const first = keeper === undefined;
          keeper ??= keeperOf(st, this.#opts.owners);
          const enter = this.#takeBack(fd, st, keeper, root.protected);
          // The root (the uid may have made entries in it, shared or not), where the grant
          // went, and whatever the uid made; in a shared directory only what the uid made.
          return enter &&
            (first || st.uid === this.#opts.uid || (!inShared && this.#enters(fd, st)));
        });
      } catch (err) {
        errors.push(`${root.path}: ${(err as Error).message}`);
      }
    }
    for (const [at, { handle, root }] of this.#granted) {
      if (this.#found.has(at)) continue;
      try {
        this.#takeBackMoved(handle, root);
      } catch (err) {
        errors.push(`an entry moved out of ${root.path}: ${(err as Error).message}`);
      }
    }
    for (const fd of this.#held.values()) closeFd(fd);
    this.#held.clear();
    if (errors.length > 0) {
      console.error(`uexec: taking back write access failed: ${errors.join("; ")}`);
    }
    return errors.length === 0;
  }

  /**
   * Calls `visit` with each entry of `root` the grant covers, top-down (a directory before what
   * it holds; `visit` returns whether to enter it, and is told whether the entry is in a sticky
   * world-writable directory). Directories with a protected name beneath the root are entered
   * only if the uid made them. The root is the one held since the grant, else opened by path
   * (then held on with `hold`). False when it is gone or reached through a symlink.
   */
  #walkRoot(root: GrantedRoot, hold: boolean, visit: Visit): boolean {
    const held = this.#held.get(root);
    const fd = held ?? openCanonical(root.path);
    if (fd === null) return false;
    if (hold) this.#held.set(root, fd);
    try {
      this.#walk(fd, statOf(fd), visit, false);
    } finally {
      if (!hold && held === undefined) closeFd(fd);
    }
    return true;
  }

  #walk(fd: number, st: Stat, visit: Visit, inShared: boolean): void {
    if (!visit(fd, st, inShared) || kind(st) !== S_IF.DIR) return;
    eachChild(fd, (name, cfd, cst) => {
      const named = kind(cst) === S_IF.DIR && this.#opts.protectedNames.has(name);
      if (!named || cst.uid === this.#opts.uid) this.#walk(cfd, cst, visit, shared(st));
    });
  }

  /** Another session's entry: never changed, never entered. */
  #foreign(st: Stat): boolean {
    return st.uid !== this.#opts.uid && this.#opts.owners.isUid(st.uid);
  }

  /** Whether the uid may read the entry with access ACL `acl` (a directory: read and search it). */
  #reads(st: Stat, acl: AclEntry[] | null): boolean {
    const owner = { uid: st.uid, gid: st.gid, mode: st.mode & 0o7777 };
    const read = kind(st) === S_IF.DIR ? PERM.R | PERM.X : PERM.R;
    return !this.#foreign(st) && permits(owner, acl, this.#opts.uid, this.#opts.gid, read);
  }

  /** Gives the uid write access to one entry it can read; returns whether to enter it. */
  #give(fd: number, st: Stat, root: GrantedRoot): boolean {
    const inProtected = root.protected;
    const max = this.#opts.maxEntries ?? MAX_ENTRIES;
    if (++this.#seen > max) throw new Error(`more than ${max} entries; grant a smaller directory`);
    const type = kind(st);
    if (this.#foreign(st) || (type !== S_IF.DIR && type !== S_IF.REG)) return false;
    if (type === S_IF.REG && (st.nlink > 1n || (st.mode & 0o6000) !== 0)) return false;
    // A script in a `.git` (a hook, a sample one can rename into place) runs as whoever runs git
    // next: the session may rename it, never change what it runs.
    if (type === S_IF.REG && inProtected && (st.mode & 0o111) !== 0) return false;
    // A sticky world-writable directory (/tmp) is every user's: the uid may already make its
    // own entries there, and the others' are theirs.
    if (shared(st)) return false;
    const { uid, gid } = this.#opts;
    const owner = { uid: st.uid, gid: st.gid, mode: st.mode & 0o7777 };
    const acl = readAclOf(fd, "access");
    if (!this.#reads(st, acl)) return false;
    const want = type === S_IF.DIR ? 7 : PERM.R | PERM.W | ((owner.mode >> 6) & PERM.X);
    if (permits(owner, acl, uid, gid, want) || maskHoldsBack(acl)) return true;
    // Without a handle it could not be found again once renamed away: no entry for it.
    const handle = handleOf(fd);
    if (handle === null) return true;
    this.#granted.set(key(st), { handle, root });
    writeAclOf(fd, "access", withGrant(acl ?? aclFromMode(owner.mode), TAG.USER, uid, want));
    return true;
  }

  /**
   * Takes the uid's ACL entry from a granted entry the walk did not meet (renamed out of the
   * granted directories), found by its file `handle` on the file system of `root`; nothing when
   * it is gone. Throws when it cannot be reached.
   */
  #takeBackMoved(handle: Uint8Array, root: GrantedRoot): void {
    const held = this.#held.get(root);
    if (held === undefined) {
      throw new Error(`${root.path} was not held: its file system is unknown`);
    }
    // open_by_handle_at takes no O_PATH descriptor: the held root, opened again for reading.
    const mountFd = openFile(`/proc/self/fd/${held}`, O.CLOEXEC);
    if (mountFd < 0) throw new OsError(`open(${root.path})`, errno());
    try {
      const fd = rawSyscall(SYS.open_by_handle_at, mountFd, handle, O.PATH | O.CLOEXEC);
      if (fd < 0) {
        const code = errno();
        if (code === ESTALE || code === E.ENOENT) return; // deleted meanwhile
        throw new OsError("open_by_handle_at", code);
      }
      try {
        const acl = readAclOf(fd, "access");
        const { uid } = this.#opts;
        if (acl?.some((e) => e.tag === TAG.USER && e.id === uid)) {
          writeAclOf(fd, "access", withoutUser(acl, uid));
        }
      } finally {
        closeFd(fd);
      }
    } finally {
      closeFd(mountFd);
    }
  }

  /**
   * Restores one entry's ACL, or gives it to `keeper` if the session made it; returns whether
   * to enter it.
   */
  #takeBack(fd: number, st: Stat, keeper: Keeper, inProtected: boolean): boolean {
    if (this.#foreign(st)) return false;
    const { uid } = this.#opts;
    const at = key(st);
    if (this.#granted.has(at)) this.#found.add(at);
    const acl = (this.#recovered || this.#granted.has(at)) && readAclOf(fd, "access");
    if (acl && acl.some((e) => e.tag === TAG.USER && e.id === uid)) {
      writeAclOf(fd, "access", withoutUser(acl, uid));
    }
    // A repository's shape the session made here would be the owner's, which git trusts: its
    // parts are handed over below (the walk is top-down), so it is taken apart first.
    if (!inProtected && kind(st) === S_IF.DIR) {
      unshape(fd, pathOf(fd) ?? "a granted directory", (part) => part.uid === uid);
    }
    if (st.uid === uid) {
      if (inProtected) adopt(fd, st, keeper);
      else handOver(fd, st, keeper);
    }
    return kind(st) === S_IF.DIR;
  }

  /** Whether the grant's walk enters the directory: not a shared one, and one the uid reads. */
  #enters(fd: number, st: Stat): boolean {
    return !shared(st) && this.#reads(st, readAclOf(fd, "access"));
  }
}

/**
 * Gives what the session made to `keeper`, with no write for group and others, no set-id or
 * sticky bits and no ACL entries of its own (its mode only): the keeper's, not everyone's.
 */
function handOver(fd: number, st: Stat, keeper: Keeper): void {
  chownOf(fd, keeper.uid, keeper.gid);
  if (kind(st) === S_IF.LNK) return;
  const mode = st.mode & ~0o7022 & 0o7777;
  writeAclOf(fd, "access", aclFromMode(mode));
  chmodOf(fd, mode); // an ACL write keeps the set-id and sticky bits
}

/** The file handle of the entry `fd` (`name_to_handle_at`); null where its file system has none. */
function handleOf(fd: number): Uint8Array | null {
  const handle = new Uint8Array(8 + MAX_HANDLE_SZ);
  new DataView(handle.buffer).setUint32(0, MAX_HANDLE_SZ, true);
  const rc = rawSyscall(
    SYS.name_to_handle_at,
    fd,
    cString(""),
    handle,
    new Uint8Array(4),
    AT.EMPTY_PATH,
  );
  if (rc < 0) {
    const code = errno();
    if (code === E.EOPNOTSUPP || code === EOVERFLOW) return null;
    throw new OsError("name_to_handle_at", code);
  }
  return handle.slice(0, 8 + new DataView(handle.buffer).getUint32(0, true));
}
