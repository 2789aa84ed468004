/**
 * What server instances that no longer run left in the cgroup hierarchies: their session
 * cgroups are killed (`cgroup.kill`) and removed, with their v1 twins wherever the dead
 * instance recorded them (`instance_records.ts`) or where they would be beneath our own v1
 * cgroups, and their records are forgotten; so are their screen workers' v1 `cpu` cgroups. Run
 * at a server's start, before it makes its own.
 * It must never touch an instance that still runs (even one whose pid was reused: the name
 * records the start time too).
 *
 * @module
 */

import { listDir } from "../../ffi/libc.ts";
import type { Reactor } from "../../io/reactor.ts";
import { INSTANCE_NAME, instanceRuns } from "../instance.ts";
import { removeDirs } from "./cgroup_fs.ts";
import { killAndRemove, PARENT, v1Own } from "./hierarchy.ts";
import { deadInstances, forgetInstance } from "./instance_records.ts";
import { screenCpuDirs } from "./screen_cpu.ts";

/**
 * Kill and remove what instances that no longer run left beneath `root`; resolves to how
 * many of their session cgroups still held processes (empty ones are removed too).
 */
export async function reapDeadInstances(reactor: Reactor, root: string): Promise<number> {
  const parent = `${root}/${PARENT}`;
  let instances: string[];
  try {
    instances = listDir(parent).filter((n) => INSTANCE_NAME.test(n));
  } catch {
    instances = [];
  }
  // Where each dead instance said its v1 cgroups are (beneath the cgroup its server ran in),
  // and where they would be beneath ours (an instance of a server that kept no record).
  const recorded = deadInstances();
  const own = (["pids", "memory"] as const).map(v1Own).filter((d) => d !== undefined);
  const v1Of = (instance: string) => [
    ...new Set([
      ...(recorded.get(instance) ?? []),
      ...own.map((d) => `${d}/${PARENT}/${instance}`),
    ]),
  ];
  // The screen workers' cgroups of instances that no longer run (their threads died with them).
  const cpu = v1Own("cpu");
  for (const { instance, dir } of cpu === undefined ? [] : screenCpuDirs(cpu)) {
    if (INSTANCE_NAME.test(instance) && !instanceRuns(instance)) removeDirs([dir]);
  }
  let count = 0;
  for (const instance of instances) {
    if (instanceRuns(instance)) continue;
    const dir = `${parent}/${instance}`;
    const sessions = listDir(dir).filter((n) => /^s\d+$/.test(n));
    const v1 = v1Of(instance);
    for (const s of sessions) {
      if (await killAndRemove(reactor, `${dir}/${s}`, v1.map((d) => `${d}/${s}`))) count++;
    }
    removeDirs([dir, ...v1]);
    recorded.delete(instance);
    forgetInstance(instance);
  }
  // Dead instances whose v2 directory is gone but whose v1 ones were left (a reaper that did
  // not know where they were): their processes died with the v2 cgroup; the directories go.
  for (const [instance, dirs] of recorded) {
    removeDirs(dirs);
    forgetInstance(instance);
  }
  return count;
}
