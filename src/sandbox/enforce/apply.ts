/**
 * The one entry point of Linux enforcement: {@link applySandbox} restricts the calling thread
 * (the core's spawning worker) so that every child it spawns afterwards runs under the policy;
 * {@link probeSandbox} reports what this machine can enforce, for `/healthz`.
 *
 * Order matters: namespaces need root, the Landlock rules are opened while the thread can
 * still see every path, the identity drop removes root and its capabilities, then
 * NO_NEW_PRIVS + Landlock, and seccomp last. This module must never return normally from
 * {@link applySandbox} unless every step held; after it throws, the thread is in an unknown
 * state and must not spawn anything (terminate the worker).
 *
 * Flow at a glance (the `enforce/` folder: what the spawner thread applies, and how a child is
 * launched under it):
 * - `apply.ts` (this file): the order above; `namespaces.ts` (mount, IPC, network, pid),
 *   `mount_view.ts` (the tree a root server's domain sees: host sockets out of reach),
 *   `accounts.ts` (the passwd and group files children see), `terminal_slots.ts` (a devpts per
 *   session), `unix_sockets.ts` (a non-root server's check of bound sockets), `landlock.ts`,
 *   `seccomp.ts`; `confinement.ts` reports the same tables for `/healthz`.
 * - `launch.ts` and `limits.ts`: the argv a child starts with (its rlimits, its gate).
 * - `seatbelt.ts`: the same profile as a macOS Seatbelt policy (generated, not applied here).
 *
 * @module
 */

import type { ResolvedPolicy } from "../policy/policy.ts";
import { sandboxStep, SandboxUnavailableError } from "../errors.ts";
import {
  addTerminalRules,
  createRuleset,
  landlockAbi,
  planRuleset,
  restrictThread,
} from "./landlock.ts";
import { enterNamespaces } from "./namespaces.ts";
import type { AccountFiles } from "./accounts.ts";
import { installFilter, seccompSupported } from "./seccomp.ts";
import { enterSpawnerIdentity, sandboxIdentity, sandboxIds } from "../identity/identity.ts";
import { DASH, limitWrapper, PRLIMIT } from "./limits.ts";
import { existingPaths } from "../fs/fsinfo.ts";
import { boundUnixSockets, socketsToHide } from "./unix_sockets.ts";
import type { LivePath } from "./mount_view.ts";
import { isWithin } from "../policy/profiles.ts";
import { checkedSyscall, closeFd, SYS, threadEuid } from "../syscalls.ts";
import { AT_FDCWD, cString, O } from "../../ffi/libc.ts";
import { makeTerminalSlots, type TerminalPlan } from "./terminal_slots.ts";

export { SandboxUnavailableError } from "../errors.ts";

/** Landlock ABI needed for signal and abstract-unix-socket scoping (Linux 6.12+). */
export const MIN_LANDLOCK_ABI = 6;

/** Options of {@link applySandbox}. */
export interface ApplyOptions {
  /** Uid the thread rests as between spawns when the server is root (default: the range's first). */
  uid?: number;
  /** Gid children run as when the server is root (default: `UEXEC_SANDBOX_GID`). */
  gid?: number;
  /** The account files children see over `/etc/passwd` and `/etc/group` (a root server). */
  accounts?: AccountFiles;
  /** The terminal slots to make, one per concurrent session (a root server). */
  terminals?: TerminalPlan;
  /**
   * Where a root server builds the domain's mount view (mount_view.ts), and the workdir it
   * shows live: required on a root server, which fails closed without it.
   */
  view?: ViewSite;
}

/** The places {@link ApplyOptions.view} names. */
export interface ViewSite {
  /** An empty directory of the server's own to mount the staging tmpfs over, in its namespace. */
  staging: string;
  /** The session's workdir, shown live (read-only unless a writable root holds it). */
  workdir: string;
}

/**
 * The places a domain's view shows live: its writable roots, the workdir, the listed sockets.
 * Every other host socket is behind an overlay, out of reach.
 */
export function livePlaces(policy: ResolvedPolicy, workdir: string): LivePath[] {
  const writable = policy.writableRoots;
  return [
    ...writable.map((path) => ({ path, writable: true })),
    ...writable.some((root) => isWithin(workdir, root)) ? [] : [{ path: workdir, writable: false }],
    ...(policy.unixSockets ?? []).map((path) => ({ path, writable: false })),
  ];
}

/** How a domain's spawner worker restricts itself: {@link applySandbox}'s policy and options. */
export interface Restriction extends ApplyOptions {
  policy: ResolvedPolicy;
}

/** What {@link applySandbox} leaves the caller: a root server's terminal slots, egress netns. */
export interface Applied {
  /**
   * A descriptor of the thread's private network namespace (close-on-exec), for a policy with
   * egress rules: the server opens the egress proxy's listener in it (src/egress/gateway.ts).
   */
  netns?: number;
  /** The domain's mount namespace, which the thread returns to after each spawn in a slot. */
  domainNs?: number;
  /** Each terminal slot's mount namespace (terminal_slots.ts). */
  slots?: number[];
}

/**
 * Restricts the calling thread, and every child it spawns from now on, to `policy`.
 * Does nothing when `policy.enforce` is false. Throws {@link SandboxUnavailableError} when any
 * part cannot be enforced. The caller owns the descriptors it returns ({@link Applied}).
 */
export function applySandbox(policy: ResolvedPolicy, opts: ApplyOptions = {}): Applied {
  if (!policy.enforce) return {};
  const abi = landlockAbi();
  if (abi < MIN_LANDLOCK_ABI) {
    throw new SandboxUnavailableError(
      `Landlock ABI ${abi} found, ${MIN_LANDLOCK_ABI}+ needed (signal and abstract socket scoping, Linux 6.12+)`,
    );
  }
  if (!seccompSupported()) {
    throw new SandboxUnavailableError(`seccomp filtering is not available on ${Deno.build.arch}`);
  }
  const root = threadEuid() === 0;
  if (policy.network === "loopback" && !root) {
    throw new SandboxUnavailableError(
      "the loopback network mode needs a root server (private network namespace)",
    );
  }
  const identity = sandboxStep("sandbox identity", () => sandboxIdentity(opts));
  const readOnlyMounts = root
    ? sandboxStep("read-only subpaths", () => existingPaths(policy.readOnlySubpaths))
    : [];
  const hidden = root
    ? []
    : sandboxStep("unix sockets", () => socketsToHide(policy, boundUnixSockets()));
  if (hidden.length > 0) {
    throw new SandboxUnavailableError(
      `unix sockets outside the writable roots (${hidden[0].path} and ${hidden.length - 1} ` +
        "more) can only be kept out of reach by a root server; list them in the profile's " +
        "unix_sockets",
    );
  }
  if (root && !opts.view) {
    throw new SandboxUnavailableError("no staging directory for the domain's mount view");
  }
  sandboxStep(
    "namespaces",
    () =>
      enterNamespaces({
        privateNetwork: policy.network === "loopback",
        readOnlyPaths: readOnlyMounts,
        hideProcesses: root,
        privateTerminals: root,
        maxTerminals: opts.terminals?.maxPtys,
        accounts: opts.accounts,
        ...(root
          ? { view: { staging: opts.view!.staging, live: livePlaces(policy, opts.view!.workdir) } }
          : {}),
      }),
  );
  const slots = root && opts.terminals
    ? sandboxStep("terminal slots", () => makeTerminalSlots(opts.terminals!))
    : undefined;
  // Opened while the thread is still root and unrestricted; it closes on any failure below.
  let netns: number | undefined;
  try {
    netns = policy.egress && policy.network === "loopback"
      ? sandboxStep("egress namespace", () =>
        checkedSyscall(
          "open(/proc/thread-self/ns/net)",
          SYS.openat,
          AT_FDCWD,
          cString("/proc/thread-self/ns/net"),
          O.CLOEXEC,
          0,
        ))
      : undefined;
  } catch (e) {
    for (const fd of slots ? [slots.domainNs, ...slots.slots, ...slots.roots] : []) closeFd(fd);
    throw e;
  }
  try {
    const rulesetFd = sandboxStep("Landlock ruleset", () => {
      const plan = planRuleset(policy, abi, { readOnlyEnforcedElsewhere: root });
      const fd = createRuleset(plan);
      try {
        if (slots) addTerminalRules(fd, plan, slots.roots);
      } catch (err) {
        closeFd(fd);
        throw err;
      }
      return fd;
    });
    try {
      if (identity) sandboxStep("identity drop", () => enterSpawnerIdentity(identity));
    } catch (e) {
      closeFd(rulesetFd);
      throw e;
    }
    sandboxStep("Landlock restrict", () => restrictThread(rulesetFd));
    sandboxStep("seccomp", () => installFilter(policy.network));
  } catch (e) {
    for (const fd of slots ? [slots.domainNs, ...slots.slots] : []) closeFd(fd);
    if (netns !== undefined) closeFd(netns);
    throw e;
  } finally {
    for (const dir of slots?.roots ?? []) closeFd(dir);
  }
  return {
    ...(slots ? { domainNs: slots.domainNs, slots: slots.slots } : {}),
    ...(netns === undefined ? {} : { netns }),
  };
}

/** What this machine can enforce, as reported by `/healthz`. */
export interface SandboxProbe {
  landlock_abi: number;
  seccomp: boolean;
  /** True when children drop to an unprivileged uid (the server runs as root). */
  drops_uid: boolean;
  /** The uids sessions run as, one each, when they drop ("first-last"). */
  uid_range?: string;
  /** The group every session runs in, when they drop. */
  gid?: number;
  /** The `loopback` network mode needs a root server. */
  loopback: boolean;
  /** Whether `applySandbox` can enforce an ordinary profile here. */
  enforceable: boolean;
  /** Why not, when it cannot. */
  error?: string;
}

/** Probes the kernel and configuration without changing anything. */
export function probeSandbox(): SandboxProbe {
  const abi = landlockAbi();
  const seccomp = seccompSupported();
  const root = threadEuid() === 0;
  const probe: SandboxProbe = {
    landlock_abi: abi,
    seccomp,
    drops_uid: root,
    loopback: root,
    enforceable: false,
  };
  try {
    const ids = sandboxIds();
    if (ids) Object.assign(probe, { uid_range: `${ids.first}-${ids.last}`, gid: ids.gid });
  } catch (e) {
    probe.error = (e as Error).message;
    return probe;
  }
  if (abi < MIN_LANDLOCK_ABI) probe.error = `Landlock ABI ${abi}, ${MIN_LANDLOCK_ABI}+ needed`;
  else if (!seccomp) probe.error = "seccomp filtering unavailable";
  else if (limitWrapper() === null) probe.error = `neither ${DASH} nor ${PRLIMIT} found`;
  probe.enforceable = probe.error === undefined;
  return probe;
}
