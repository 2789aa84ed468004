/**
 * The account database a root server's sandboxed children see: the host's `/etc/passwd` and
 * `/etc/group`, plus an entry for each session uid of the domain (name `uexec-<uid>`, its private
 * HOME) and one for the sandbox group (`uexec`). The domain's worker bind-mounts both files over
 * the host's, read-only, in its private mount namespace (namespaces.ts), so `whoami`, `id`,
 * `ls -l`, Python's `pwd`, Node's `os.userInfo()` and `ssh`, which look the uid up, find it.
 *
 * A domain's sessions share its mount namespace, so its passwd file holds every live session of
 * the domain: each in a fixed-size slot, written in place when a session starts and blanked to
 * a comment when it ends. A slot's entry never moves, so a reader never misses a live session's
 * line while another session starts or ends, and the file stays as large as the most sessions
 * the domain had at once. The files are the server's (root, 0644, in the domain's root-owned
 * directory): this module must never let a sandboxed command change what another reads, nor
 * touch the host's own files.
 *
 * @module
 */

import { check, cString, libc, O } from "../../ffi/libc.ts";

/** The login name of session uid `uid`. */
export function accountName(uid: number): string {
  return `uexec-${uid}`;
}

/** `USER` and `LOGNAME` of session uid `uid` (the server's own would name another user). */
export function accountEnv(uid: number): Record<string, string> {
  return { USER: accountName(uid), LOGNAME: accountName(uid) };
}

/** The sandbox group's name. */
export const GROUP_NAME = "uexec";

/** A passwd and a group file. */
export interface AccountFiles {
  passwd: string;
  group: string;
}

/** The host's files, which the domain's cover. */
export const HOST_FILES: Readonly<AccountFiles> = { passwd: "/etc/passwd", group: "/etc/group" };
const GECOS = "uexec session";
const SHELL = "/bin/sh";
/** Room in a slot beyond the home path, for the entry's other fields and its padding line. */
const SLOT_SLACK = 192;

function withNewline(text: string): string {
  return text.length === 0 || text.endsWith("\n") ? text : `${text}\n`;
}

/** Whether the group file text already has a group of id `gid`. */
function hasGroup(text: string, gid: number): boolean {
  return text.split("\n").some((line) => line.split(":")[2] === String(gid));
}

/** The account files of one domain, and its sessions' slots in them. */
export class DomainAccounts {
  readonly files: AccountFiles;
  #gid: number;
  /** Where the slots begin: the length of the host's entries. */
  #base: number;
  #width: number;
  /** The uid in each slot; undefined for a free one. */
  #slots: (number | undefined)[] = [];
  #encoder = new TextEncoder();

  private constructor(files: AccountFiles, gid: number, base: number, width: number) {
    this.files = files;
    this.#gid = gid;
    this.#base = base;
    this.#width = width;
  }

  /**
   * Writes the account files of a domain into its directory `root` for sessions of group
   * `gid`, on this thread (a few kilobytes, once per domain); null when the host has no
   * `/etc/passwd` or `/etc/group` to cover, or when `root` (where the sessions' homes are)
   * cannot be written in an entry.
   */
  static create(root: string, gid: number): DomainAccounts | null {
    if (/[:\n]/.test(root)) return null;
    let passwd: string, group: string;
    try {
      passwd = Deno.readTextFileSync(HOST_FILES.passwd);
      group = Deno.readTextFileSync(HOST_FILES.group);
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return null;
      throw err;
    }
    passwd = withNewline(passwd);
    group = withNewline(group);
    if (!hasGroup(group, gid)) group += `${GROUP_NAME}:x:${gid}:\n`;
    const files = { passwd: `${root}/passwd`, group: `${root}/group` };
    Deno.writeTextFileSync(files.passwd, passwd, { mode: 0o644 });
    Deno.writeTextFileSync(files.group, group, { mode: 0o644 });
    const base = new TextEncoder().encode(passwd).length;
    return new DomainAccounts(files, gid, base, root.length + SLOT_SLACK);
  }

  /**
   * Lists session uid `uid` with HOME `home` until the returned function removes it again.
   * The entry is in the file on return, before anything can run as `uid`.
   */
  add(uid: number, home: string): () => void {
    const entry = `${accountName(uid)}:x:${uid}:${this.#gid}:${GECOS}:${home}:${SHELL}\n`;
    const slot = this.#take(uid);
    try {
      this.#write(slot, entry);
    } catch (err) {
      this.#slots[slot] = undefined;
      throw err;
    }
    let removed = false;
    return () => {
      if (removed) return;
      this.#write(slot, "");
      removed = true;
      this.#slots[slot] = undefined;
    };
  }

  /** The first free slot, now `uid`'s. */
  #take(uid: number): number {
    let slot = this.#slots.indexOf(undefined);
    if (slot === -1) slot = this.#slots.length;
    this.#slots[slot] = uid;
    return slot;
  }

  /**
   * Writes `entry` into `slot`, the rest of the slot a comment line (all of it when empty): one
   * `pwrite` of a few hundred bytes, on this thread (cheaper than a file's asynchronous calls).
   */
  #write(slot: number, entry: string): void {
    const bytes = new Uint8Array(this.#width).fill(0x20);
    const { read, written: used } = this.#encoder.encodeInto(entry, bytes);
    if (read < entry.length || used + 2 > this.#width) {
      throw new Error(`account entry for slot ${slot} is longer than its ${this.#width} bytes`);
    }
    bytes[used] = 0x23; // '#': the padding is a comment line
    bytes[this.#width - 1] = 0x0a;
    const path = this.files.passwd;
    const fd = check(`open(${path})`, libc().open(cString(path), O.WRONLY | O.CLOEXEC));
    try {
      const at = this.#base + slot * this.#width;
      const n = check(
        `pwrite(${path})`,
        libc().pwrite(fd, bytes, BigInt(bytes.length), BigInt(at)),
      );
      if (n !== bytes.length) throw new Error(`pwrite(${path}): ${n} of ${bytes.length} bytes`);
    } finally {
      libc().close(fd);
    }
  }
}
