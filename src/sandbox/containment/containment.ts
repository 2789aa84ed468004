/**
 * This server's containment, set up once at start-up: cgroups where the host lets it make them
 * (or where the operator requires them), else process groups with rlimits. It must never fail
 * open: with `UEXEC_CONTAINMENT=cgroup`, cgroups that cannot be made are an error.
 *
 * Flow at a glance (the `containment/` folder):
 * - `containment.ts` (this file): {@link openContainment} finds the v2 hierarchy
 *   (`hierarchy.ts`), kills and removes what dead instances left, and opens this instance's.
 * - `cgroups.ts`: {@link CgroupHost} hands each session its `SessionCgroup` (made ahead,
 *   reused for the same agent and limits, or removed), the session's child is put in it at its
 *   gate (enforce/limits.ts), and killing the session kills its whole tree.
 * - `cgroup_fs.ts`: the file operations on session cgroups, run on the main thread and by the
 *   janitor's (`cgroup_janitor.ts`, `cgroup_janitor_worker.ts`), which makes and removes
 *   cgroups off the request path.
 * - `screen_cpu.ts`: the screen worker's thread in a v1 `cpu` cgroup of its own, at the lowest
 *   weight while no call waits on a screen (the host's {@link CgroupHost.screenCpu}).
 *
 * @module
 */

import type { DescriptorReserve } from "../../io/descriptor_reserve.ts";
import type { Reactor } from "../../io/reactor.ts";
import { SandboxUnavailableError } from "../errors.ts";
import { CgroupHost, type ContainmentReport } from "./cgroups.ts";
import { reapDeadInstances } from "./dead_instances.ts";
import { cgroupRoot } from "./hierarchy.ts";

/** This server's containment: cgroups where possible (or required), else process groups. */
export interface Containment {
  host?: CgroupHost;
  report: ContainmentReport;
  /** Session cgroups of dead instances that still held processes, killed at start-up. */
  reaped: number;
}

/**
 * Set up containment for this server: reap what dead instances left, then open this
 * instance's cgroups under `root` (see {@link cgroupRoot}); `mode` `cgroup` makes their absence
 * an error, `process-group` skips them. `descriptors`: see {@link CgroupHost.open}.
 */
export async function openContainment(
  reactor: Reactor,
  mode: "auto" | "cgroup" | "process-group",
  configuredRoot: string | undefined,
  descriptors?: DescriptorReserve,
  memoryMax?: number,
): Promise<Containment> {
  const fallback = (reason: string): Containment => ({
    reaped: 0,
    report: {
      containment: "process-group",
      reason,
      limits: { pids: "rlimit", memory: "rlimit", cpu: "rlimit" },
    },
  });
  if (mode === "process-group") return fallback("UEXEC_CONTAINMENT=process-group");
  const root = cgroupRoot(configuredRoot);
  try {
    if (root === undefined) throw new Error("no cgroup v2 hierarchy is mounted");
    const reaped = await reapDeadInstances(reactor, root);
    const host = CgroupHost.open(reactor, root, descriptors, memoryMax);
    return {
      host,
      reaped,
      report: { containment: "cgroup", cgroup: host.dir, limits: host.limits() },
    };
  } catch (err) {
    const reason = `no writable cgroup v2 hierarchy: ${(err as Error).message}`;
    if (mode === "cgroup") throw new SandboxUnavailableError(reason, { cause: err });
    return fallback(reason);
  }
}
