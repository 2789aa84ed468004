/**
 * Terminal slots: each session of a root server's domain runs in a mount namespace of its slot,
 * a copy of the domain's (the same view: read-only subpaths, hidden sockets, account files,
 * hidden processes) with a devpts instance of its own over /dev/pts holding at most `maxPtys`
 * terminals: the session's own terminal and whatever its processes open through `/dev/ptmx`. At
 * the cap, opening one more fails with ENOSPC for that session only; other sessions, of its
 * domain or any other, keep getting terminals. A slot is held by one live session at a time
 * (the worker pool hands them out with its leases); a domain has {@link DEFAULT_SLOTS}, and
 * sessions past them share the domain's own devpts instance, which has the same cap.
 *
 * Why slots made ahead: the spawning thread may not mount once restricted (Landlock forbids it,
 * and so does its seccomp filter), and a Landlock rule names an inode, so a devpts instance made
 * after the ruleset could not be granted. So {@link makeTerminalSlots} makes every slot while
 * the thread is still root and unrestricted (`unshare(CLONE_NEWNS)` from the domain's namespace,
 * a devpts mount, a descriptor of each), and returns their /dev/pts directories for the
 * ruleset; {@link inSlot} then joins a slot's namespace just around one spawn (`setns`, which
 * the filter allows for mount namespaces alone) and returns to the domain's.
 *
 * This module must never change the host's mount table nor the domain's: each slot's namespace
 * is a private copy (the domain's was made private before anything was mounted in it).
 *
 * @module
 */

import { AT_FDCWD, cString, O } from "../../ffi/libc.ts";
import { checkedSyscall, closeFd, SYS } from "../syscalls.ts";
import { mountTerminals } from "./namespaces.ts";

const CLONE_NEWNS = 0x00020000;
const SYS_SETNS = 308;

/** Terminals a session may hold, by default (`UEXEC_MAX_PTYS_PER_SESSION`). */
export const DEFAULT_MAX_PTYS = 64;

/**
 * Slots a domain makes, by default. Each holds a descriptor for the life of the domain's worker,
 * so not one per session an agent may hold (UEXEC_MAX_SESSIONS, up to 100,000): sessions past
 * the slots share the domain's own devpts instance, capped at the same `maxPtys` (namespaces.ts).
 */
export const DEFAULT_SLOTS = 16;

/** How many slots a domain makes, and how many terminals each holds. */
export interface TerminalPlan {
  slots: number;
  maxPtys: number;
}

/** A domain's slots, made by {@link makeTerminalSlots}. */
export interface TerminalSlots {
  /** The domain's own mount namespace, which the thread returns to after each spawn. */
  domainNs: number;
  /** Each slot's mount namespace. */
  slots: number[];
  /** Each slot's /dev/pts (O_PATH), for a Landlock rule; the caller closes them. */
  roots: number[];
}

function openNs(): number {
  return checkedSyscall(
    "open(/proc/thread-self/ns/mnt)",
    SYS.openat,
    AT_FDCWD,
    cString("/proc/thread-self/ns/mnt"),
    O.CLOEXEC,
    0,
  );
}

function setns(fd: number, what: string): void {
  checkedSyscall(`setns(${what})`, SYS_SETNS, fd, CLONE_NEWNS);
}

/**
 * Makes `plan.slots` slots from the calling thread's mount namespace (the domain's, private, on
 * a root thread that does not share its file system information); the thread is back in the
 * domain's namespace when it returns. Throws on any failure, having closed what it opened.
 */
export function makeTerminalSlots(plan: TerminalPlan): TerminalSlots {
  const made: TerminalSlots = { domainNs: openNs(), slots: [], roots: [] };
  try {
    for (let i = 0; i < plan.slots; i++) {
      checkedSyscall("unshare(CLONE_NEWNS)", SYS.unshare, CLONE_NEWNS);
      try {
        mountTerminals(plan.maxPtys);
        made.slots.push(openNs());
        made.roots.push(
          checkedSyscall(
            "open(/dev/pts)",
            SYS.openat,
            AT_FDCWD,
            cString("/dev/pts"),
            O.PATH | O.DIRECTORY | O.CLOEXEC,
            0,
          ),
        );
      } finally {
        setns(made.domainNs, "domain");
      }
    }
  } catch (err) {
    for (const fd of [made.domainNs, ...made.slots, ...made.roots]) closeFd(fd);
    throw err;
  }
  return made;
}

/**
 * Runs `fn` on the calling spawner thread inside the mount namespace `slotNs`, then returns the
 * thread to `domainNs`; `raise` makes the capabilities setns needs effective for one call.
 * Throws {@link StuckError} when the thread could not return: it must never spawn again.
 */
export function inSlot<T>(
  slotNs: number,
  domainNs: number,
  raise: <R>(call: () => R) => R,
  fn: () => T,
): T {
  raise(() => setns(slotNs, "slot"));
  try {
    return fn();
  } finally {
    try {
      raise(() => setns(domainNs, "domain"));
    } catch (err) {
      // deno-lint-ignore no-unsafe-finally
      throw new StuckError(String(err));
    }
  }
}

/** The spawning thread could not return to its domain's mount namespace. */
export class StuckError extends Error {
  constructor(why: string) {
    super(`the spawner cannot return to its domain's mount namespace: ${why}`);
    this.name = "StuckError";
  }
}
