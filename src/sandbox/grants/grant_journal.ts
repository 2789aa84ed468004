/**
 * A record of the write grants (write_grant.ts) a server holds, kept in its state directory so
 * that the next start takes back what a server killed while holding them (SIGKILL, the OOM
 * killer) left: its session uids' ACL entries on directories outside the workspace, and what
 * those sessions made there, still theirs, hooks with their execute bits. Without it those
 * would stay for good, and a later session given the same uid would inherit them.
 *
 * One file per grant, `<uid>.json` (uids are leased to one server at a time, uid_lease.ts),
 * written (atomically, mode 0600) before the grant changes anything and removed once it is
 * taken back in full. Records go to the page cache, not through fsync: a killed process loses
 * none, a power cut may. This module only reads and writes its own directory; it must never
 * act on a record of an instance that still runs.
 *
 * @module
 */

import { INSTANCE_NAME, instanceName, instanceRuns } from "../instance.ts";
import type { GrantedRoot } from "./write_grant.ts";

/** A record being written: `<uid>.json.<instance>.part`. */
const PARTIAL = /^\d+\.json\.(i\d+-\d+)\.part$/;

/** One grant held by a server instance. */
export interface GrantRecord {
  /** The instance that holds it (instance.ts). */
  instance: string;
  uid: number;
  roots: GrantedRoot[];
}

/**
 * A record found on disk: what it says, or why it cannot be used (with the uid its name gives,
 * when it gives one).
 */
export type FoundRecord =
  | { file: string; uid: number; record: GrantRecord }
  | { file: string; uid?: number; error: string };

/** A record's name: `<uid>.json`. */
const RECORD = /^(\d+)\.json$/;

function isRoot(value: unknown): value is GrantedRoot {
  const root = value as GrantedRoot;
  return typeof root === "object" && root !== null && typeof root.path === "string" &&
    root.path.startsWith("/") && typeof root.protected === "boolean";
}

function parse(text: string): GrantRecord | undefined {
  const record = JSON.parse(text) as GrantRecord;
  const valid = typeof record === "object" && record !== null &&
    typeof record.instance === "string" && INSTANCE_NAME.test(record.instance) &&
    Number.isSafeInteger(record.uid) && record.uid > 0 &&
    Array.isArray(record.roots) && record.roots.every(isRoot);
  return valid ? record : undefined;
}

/** The grant records in one directory. */
export class GrantJournal {
  readonly dir: string;

  /** The journal in `dir`, made (mode 0700) if missing. */
  constructor(dir: string) {
    Deno.mkdirSync(dir, { recursive: true, mode: 0o700 });
    this.dir = dir;
  }

  /** Records that this instance grants `roots` to `uid`; returns what removes the record. */
  add(uid: number, roots: GrantedRoot[]): () => void {
    const file = `${this.dir}/${uid}.json`;
    const instance = instanceName();
    const partial = `${file}.${instance}.part`;
    const record: GrantRecord = { instance, uid, roots };
    Deno.writeTextFileSync(partial, JSON.stringify(record), { mode: 0o600 });
    Deno.renameSync(partial, file);
    return () => this.remove(file);
  }

  /** Removes the record in `file` (one {@link add} wrote, or {@link dead} found). */
  remove(file: string): void {
    Deno.removeSync(file);
  }

  /**
   * The records of instances that no longer run, and the files that hold no usable record
   * (a `.part` a dead instance left while writing one is removed: its grant never began).
   */
  dead(): FoundRecord[] {
    const found: FoundRecord[] = [];
    for (const entry of Deno.readDirSync(this.dir)) {
      const file = `${this.dir}/${entry.name}`;
      if (!entry.isFile) continue;
      const partial = PARTIAL.exec(entry.name);
      if (partial) {
        if (!instanceRuns(partial[1])) Deno.removeSync(file);
        continue;
      }
      const named = RECORD.exec(entry.name);
      const uid = named ? Number(named[1]) : undefined;
      let record: GrantRecord | undefined;
      try {
        record = parse(Deno.readTextFileSync(file));
      } catch {
        record = undefined;
      }
      if (!record || record.uid !== uid) found.push({ file, uid, error: "not a grant record" });
      else if (!instanceRuns(record.instance)) found.push({ file, uid, record });
    }
    return found;
  }
}
