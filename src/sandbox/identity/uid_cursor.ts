/**
 * Where a range of session uids is handed out from, kept on disk for the host: the file
 * `/var/lib/uexec/uid-cursors/<first>-<last>` holds the next uid to consider and whether the
 * range was gone round once (`<next> <wrapped 0|1>`). It is host-wide, not in a server's state
 * directory: a block of the default pool goes to whichever server leases it next, and the files
 * a uid left in one server's workspace are readable through another's read-only profile. Files
 * on disk outlive a reboot, so the cursor lives on disk too (not under /run).
 *
 * The range's lease (uid_lease.ts) makes its holder the only writer. A file that cannot be
 * parsed, or names a uid outside the range, counts as "every uid was used" (so each is cleared
 * before its use); a file that cannot be written stops the pool from handing out uids. Written
 * by rename, without fsync: a host crash may lose the last position, a server crash does not.
 *
 * This module must never write anything but the one cursor file of the range it is given.
 *
 * @module
 */

import type { UidCursor } from "./uids.ts";
import { SandboxUnavailableError } from "../errors.ts";

/** Where the cursors are kept. */
export const CURSOR_DIR = "/var/lib/uexec/uid-cursors";

const LINE = /^(\d+) ([01])\n?$/;

/** The cursor of uids `first..last`, read from `dir` (a fresh range: its start, none used). */
export function loadCursor(first: number, last: number, dir = CURSOR_DIR): UidCursor {
  const path = `${dir}/${first}-${last}`;
  let text: string | undefined;
  try {
    text = Deno.readTextFileSync(path);
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) {
      throw new SandboxUnavailableError(`cannot read the uid cursor ${path}: ${err}`);
    }
  }
  const m = text === undefined ? null : LINE.exec(text);
  const cursor: UidCursor = {
    next: text === undefined ? first : m ? Number(m[1]) : -1,
    wrapped: m?.[2] === "1",
    save(next, wrapped) {
      Deno.mkdirSync(dir, { recursive: true, mode: 0o700 });
      const tmp = `${path}.new`;
      Deno.writeTextFileSync(tmp, `${next} ${wrapped ? 1 : 0}\n`, { mode: 0o600 });
      Deno.renameSync(tmp, path);
    },
  };
  return cursor;
}
