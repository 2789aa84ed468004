/**
 * The resolved sandbox policy: what one session's child may read, write and reach.
 *
 * Profiles (data files in `sandbox-profiles/`) are resolved into this shape for one session:
 * absolute paths, no placeholders. Enforcement (Landlock, seccomp, Seatbelt) and denial
 * detection consume it. This module holds types only; it must never touch the OS.
 *
 * Flow at a glance (the `policy/` folder: what a sandbox allows, as data; nothing here touches
 * the OS, which is why it is the bottom layer every other folder may import):
 * - `profiles.ts` loads and validates `sandbox-profiles/` and resolves a profile into this
 *   shape for one session; `widening.ts` widens a profile by an approved widening.
 * - `policy.ts` (this file) is the resolved shape that enforce/ applies.
 * - `denial.ts` reads a failed command's output back against the policy (what was refused).
 *
 * @module
 */

import type { EgressRules } from "../../egress/rules.ts";

/** Which network the child may use. */
export type NetworkMode = "none" | "loopback" | "all";

/** Resource limits applied to the child and everything it starts. */
export interface ResourceLimits {
  /** RLIMIT_NPROC: processes for the child's uid. */
  maxProcesses?: number;
  /** RLIMIT_FSIZE in bytes: the largest file the child may write. */
  maxFileSizeBytes?: number;
  /** RLIMIT_CPU in seconds. */
  cpuSeconds?: number;
  /** RLIMIT_AS in bytes (with cgroups, also a bound on the tree's memory). */
  addressSpaceBytes?: number;
  /**
   * With cgroups: the memory of the whole tree (resident memory, page cache and the tmpfs
   * pages its HOME and TMPDIR hold), in bytes; the agent's `max_memory_bytes` or the
   * per-session default, set per session by the service, never by a profile.
   */
  memoryBytes?: number;
}

/** A profile resolved for one session. All paths are absolute and normalised. */
export interface ResolvedPolicy {
  /** Name of the profile this came from, e.g. `workspace-write`. */
  profile: string;
  /** False only for `full-access`: then nothing below is enforced. */
  enforce: boolean;
  /** Roots the child may read and execute beneath; `/` means everything. */
  readableRoots: string[];
  /** Roots the child may write beneath (also readable). */
  writableRoots: string[];
  /** Paths beneath writable roots that stay read-only (`.git`, `.uexec`). */
  readOnlySubpaths: string[];
  /** Paths that must be neither readable nor listable, even beneath a readable root. */
  denyRead: string[];
  /** Network access. */
  network: NetworkMode;
  /** When set and the network is not `none`: the only TCP ports the child may connect to. */
  tcpPorts?: number[];
  /**
   * Pathname unix sockets (or directories of them) outside the writable roots that the child
   * may still connect to, e.g. `/run/docker.sock`; every other one is hidden.
   */
  unixSockets?: string[];
  /**
   * When set (network `loopback`): the only way out is uexec's egress proxy inside the
   * namespace, which lets through what these rules allow (see src/egress/).
   */
  egress?: EgressRules;
  /** Resource limits. */
  limits: ResourceLimits;
}
