/**
 * Where each running instance keeps its v1 cgroups, written down so that whichever server
 * starts next can remove them once the instance is dead. A v1 instance directory lies beneath
 * the cgroup its server was started in (`<mount><own cgroup>/uexec/<instance>`), which differs
 * between servers started from different login sessions, services or jobs; without a record, a
 * server reaping a dead instance only found the v1 directories beneath its own cgroup and left
 * the rest for good (each still counts against the host's 65,535 memory cgroups: on this
 * project's machine, 56,000 of them had piled up and every server's next session failed).
 *
 * A record is a file `/run/uexec/cgroups/<instance>` (the directory root-only, 0700) holding one
 * absolute path per line. It is only ever read back for a dead instance, and a path is used only
 * when it lies beneath a mounted v1 cgroup hierarchy and ends in `/uexec/<instance>`: a record
 * can never make anyone remove a directory that is not such an instance's. Recording is best
 * effort (a non-root server, whose v1 cgroups are not its own to make, writes none).
 *
 * @module
 */

import { listDir, readSmallFile } from "../../ffi/libc.ts";
import { INSTANCE_NAME, instanceRuns } from "../instance.ts";
import { PARENT, v1Mounts } from "./hierarchy.ts";

const RECORD_DIR = "/run/uexec/cgroups";

/** Write down `dirs` as instance `instance`'s v1 cgroup directories (best effort). */
export function recordInstance(instance: string, dirs: string[], recordDir = RECORD_DIR): void {
  if (dirs.length === 0) return;
  try {
    Deno.mkdirSync(recordDir, { recursive: true, mode: 0o700 });
    Deno.writeTextFileSync(`${recordDir}/${instance}`, dirs.map((d) => `${d}\n`).join(""), {
      mode: 0o600,
    });
  } catch {
    // Not root: no v1 cgroups of ours to find again; reaping falls back to our own cgroup's.
  }
}

/** Forget instance `instance`'s record (its directories are gone). */
export function forgetInstance(instance: string, recordDir = RECORD_DIR): void {
  try {
    Deno.removeSync(`${recordDir}/${instance}`);
  } catch {
    // Never written, or already forgotten.
  }
}

/** Whether `dir` can be instance `instance`'s v1 directory: nothing else is ever touched. */
function plausible(dir: string, instance: string, mounts: string[]): boolean {
  return !dir.split("/").includes("..") && dir.endsWith(`/${PARENT}/${instance}`) &&
    mounts.some((m) => dir.startsWith(`${m}/`));
}

/** The recorded v1 directories of every instance that no longer runs, by instance name. */
export function deadInstances(recordDir = RECORD_DIR): Map<string, string[]> {
  const dead = new Map<string, string[]>();
  let names: string[];
  try {
    names = listDir(recordDir).filter((n) => INSTANCE_NAME.test(n));
  } catch {
    return dead;
  }
  const mounts = v1Mounts().map((m) => m.path);
  for (const instance of names) {
    if (instanceRuns(instance)) continue;
    const text = readSmallFile(`${recordDir}/${instance}`) ?? "";
    dead.set(
      instance,
      text.split("\n").filter((d) => d !== "" && plausible(d, instance, mounts)),
    );
  }
  return dead;
}
