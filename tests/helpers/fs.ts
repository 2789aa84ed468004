/**
 * File-system checks shared by tests.
 *
 * @module
 */

import { readAcl, TAG } from "../../src/sandbox/fs/acl.ts";
import { closeAll, cString, errno, OsError, rawSyscall } from "../../src/ffi/libc.ts";

/** Whether `path` exists (a symbolic link counts when its target does). */
export function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}

/** The ACL entries naming a session uid or the sandbox group on `path` and beneath it. */
export function sandboxAclEntries(path: string): string[] {
  const found: string[] = [];
  const info = Deno.lstatSync(path);
  for (const kind of info.isDirectory ? ["access", "default"] as const : ["access"] as const) {
    for (const e of readAcl(path, kind) ?? []) {
      if ((e.tag === TAG.USER || e.tag === TAG.GROUP) && e.id >= 2000000000) {
        found.push(`${path} ${kind} ${e.tag === TAG.USER ? "user" : "group"}:${e.id}`);
      }
    }
  }
  if (info.isDirectory) {
    for (const entry of Deno.readDirSync(path)) {
      found.push(...sandboxAclEntries(`${path}/${entry.name}`));
    }
  }
  return found;
}

const SYS_POLL = 7;
const SYS_INOTIFY_ADD_WATCH = 254;
const SYS_INOTIFY_INIT1 = 294;
const IN_ATTRIB = 0x4;
const IN_CLOEXEC = 0o2000000;
const POLLIN = 1;

/**
 * Watches the inode at `path` (a directory: its entries too) for attribute changes, wherever it
 * is renamed meanwhile (inotify follows the inode; `Deno.watchFs` follows paths and loses it).
 * `changed(ms)` blocks this thread until one came since the watch began, and throws when none
 * came within `ms`.
 */
export function watchAttributes(path: string): { changed(ms: number): void; close(): void } {
  const fd = rawSyscall(SYS_INOTIFY_INIT1, IN_CLOEXEC);
  if (fd < 0) throw new OsError("inotify_init1", errno());
  if (rawSyscall(SYS_INOTIFY_ADD_WATCH, fd, cString(path), IN_ATTRIB) < 0) {
    const code = errno();
    closeAll([fd]);
    throw new OsError(`inotify_add_watch(${path})`, code);
  }
  return {
    changed(ms: number) {
      const pollfd = new Uint8Array(8);
      new DataView(pollfd.buffer).setInt32(0, fd, true);
      new DataView(pollfd.buffer).setInt16(4, POLLIN, true);
      const ready = rawSyscall(SYS_POLL, pollfd, 1, ms);
      if (ready < 0) throw new OsError("poll(inotify)", errno());
      if (ready === 0) throw new Error(`no attribute of ${path} changed within ${ms} ms`);
    },
    close: () => closeAll([fd]),
  };
}

/**
 * Mounts a fresh tmpfs on a new directory under /var/tmp (where no default ACL is left) for a
 * test's workspaces: the `.git` guards of servers that other test runs on this host started
 * (perhaps older ones) watch the file systems of their own workspaces, and must not act on
 * what this test checks. Its size (1 GiB, taken only as files are written) leaves it above the
 * servers' free-space floor (UEXEC_DISK_FLOOR_BYTES). `close` unmounts it and removes the
 * directory.
 */
export async function privateFs(): Promise<{ path: string; close(): Promise<void> }> {
  const path = await Deno.makeTempDir({ dir: "/var/tmp", prefix: "uexec-fs-" });
  const run = (args: string[]) => new Deno.Command(args[0], { args: args.slice(1) }).output();
  const mounted = await run(["mount", "-t", "tmpfs", "-o", "mode=0755,size=1g", "none", path]);
  if (mounted.code !== 0) {
    await Deno.remove(path);
    throw new Error(`mount tmpfs: ${new TextDecoder().decode(mounted.stderr)}`);
  }
  return {
    path,
    close: async () => {
      await run(["umount", path]);
      await Deno.remove(path);
    },
  };
}
