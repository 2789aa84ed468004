/**
 * Where sessions keep their files: the server instance's directory (a tmpfs on a root server),
 * a directory per sandbox domain in it, and in that a private directory per session, owned by
 * its uid (mode 0700), holding its HOME (with a login `.profile` and a `.gitconfig`) and TMPDIR.
 * It must never hand one private directory to two sessions, nor remove the directory of an
 * instance that still runs.
 *
 * @module
 */

import { SandboxUnavailableError } from "../errors.ts";
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
import { checkedSyscall, mount, MS, SYS } from "../syscalls.ts";
import { deadInstanceDirs, instanceName, tempRoot } from "../instance.ts";
import { gitConfigText } from "./git_config.ts";
import type { SandboxIdentity } from "./identity.ts";

/**
 * Beside PATH in every child: the PATH it was started with, which a sandboxed session's
 * `~/.profile` puts back after a login shell's `/etc/profile` reset it (sessions/env.ts sets it).
 */
export const LOGIN_PATH = "UEXEC_LOGIN_PATH";

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

const INSTANCE_DIR_PREFIX = "uexec-";
/** An instance's directory, its instance's name the first group. */
const DEAD_INSTANCE_DIR = /^uexec-(i\d+-\d+)$/;

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
      mount(`mount(tmpfs, ${dir})`, "tmpfs", dir, "tmpfs", MS.NOSUID | MS.NODEV, options);
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
  let removed = 0;
  for await (const path of deadInstanceDirs(tempRoot(), DEAD_INSTANCE_DIR)) {
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
