/**
 * File-system checks shared by tests.
 *
 * @module
 */

import { readAcl, TAG } from "../../src/sandbox/acl.ts";

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
