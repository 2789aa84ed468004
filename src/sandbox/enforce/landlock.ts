/**
 * Landlock for one thread: detect the ABI, turn a {@link ResolvedPolicy} into a ruleset, and
 * restrict the calling thread (and every child it spawns afterwards) with it.
 *
 * Landlock only grants, so a path that must stay out of reach beneath a granted root is
 * excluded by granting its siblings instead of its parent. Rules are built from the file
 * system as it is when the ruleset is created. This module must never leave a thread
 * half-restricted without throwing, and never treat a failed rule as optional (only paths that
 * do not exist are skipped).
 *
 * @module
 */

import type { ResolvedPolicy } from "../policy/policy.ts";
import { SandboxUnavailableError } from "../errors.ts";
import { lstatOrNull, realPathOrSelf } from "../fs/fsinfo.ts";
import { E, OsError, rawSyscall } from "../../ffi/libc.ts";
import { checkedSyscall, closeFd, openPath, prctl, SYS } from "../syscalls.ts";

export { SandboxUnavailableError } from "../errors.ts";

/** Landlock filesystem access rights (`LANDLOCK_ACCESS_FS_*`). */
export const FS = {
  EXECUTE: 1n << 0n,
  WRITE_FILE: 1n << 1n,
  READ_FILE: 1n << 2n,
  READ_DIR: 1n << 3n,
  REMOVE_DIR: 1n << 4n,
  REMOVE_FILE: 1n << 5n,
  MAKE_CHAR: 1n << 6n,
  MAKE_DIR: 1n << 7n,
  MAKE_REG: 1n << 8n,
  MAKE_SOCK: 1n << 9n,
  MAKE_FIFO: 1n << 10n,
  MAKE_BLOCK: 1n << 11n,
  MAKE_SYM: 1n << 12n,
  REFER: 1n << 13n,
  TRUNCATE: 1n << 14n,
  IOCTL_DEV: 1n << 15n,
} as const;

const NET_BIND_TCP = 1n;
const NET_CONNECT_TCP = 2n;
const SCOPE_ABSTRACT_UNIX_SOCKET = 1n;
const SCOPE_SIGNAL = 2n;
const CREATE_RULESET_VERSION = 1;
const RULE_PATH_BENEATH = 1;
const RULE_NET_PORT = 2;
const PR_SET_NO_NEW_PRIVS = 38;

const READ = FS.EXECUTE | FS.READ_FILE | FS.READ_DIR;
const FILE_ONLY = FS.EXECUTE | FS.WRITE_FILE | FS.READ_FILE | FS.TRUNCATE | FS.IOCTL_DEV;
const DEVICE = FS.READ_FILE | FS.WRITE_FILE | FS.TRUNCATE | FS.IOCTL_DEV;
const TERMINALS = "/dev/pts";
const DEVICE_FILES = ["/dev/null", "/dev/zero", "/dev/urandom", "/dev/tty", "/dev/ptmx"];

/** The Landlock ABI version of the running kernel, or 0 when Landlock is unavailable. */
export function landlockAbi(): number {
  if (Deno.build.os !== "linux") return 0;
  const v = rawSyscall(SYS.landlock_create_ruleset, null, 0, CREATE_RULESET_VERSION);
  return v > 0 ? v : 0;
}

/** Every filesystem right that Landlock ABI `abi` knows. */
export function handledFsRights(abi: number): bigint {
  let rights = (1n << 13n) - 1n;
  if (abi >= 2) rights |= FS.REFER;
  if (abi >= 3) rights |= FS.TRUNCATE;
  if (abi >= 5) rights |= FS.IOCTL_DEV;
  return rights;
}

/** One path-beneath rule: `access` granted on `path` and everything beneath it. */
export interface PathRule {
  path: string;
  access: bigint;
}

/** Everything a ruleset will contain, computed before any system call is made. */
export interface RulesetPlan {
  abi: number;
  handledFs: bigint;
  handledNet: bigint;
  scoped: bigint;
  paths: PathRule[];
  tcpPorts: number[];
}

/** How {@link planRuleset} treats read-only subpaths and the terminal. */
export interface PlanOptions {
  /**
   * True when read-only subpaths are already enforced another way (read-only bind mounts);
   * then writable roots are granted whole. Otherwise write rights skip those subpaths.
   */
  readOnlyEnforcedElsewhere?: boolean;
}

function isBeneath(path: string, root: string): boolean {
  return path === root || root === "/" || path.startsWith(`${root}/`);
}

function join(dir: string, name: string): string {
  return dir === "/" ? `/${name}` : `${dir}/${name}`;
}

function isProcPid(path: string): boolean {
  return /^\/proc\/\d+(\/|$)/.test(path);
}

/**
 * The existing paths to exclude, resolved through symlinks. Paths beneath `/proc/<pid>` are
 * not returned: the kernel's ptrace access check (which Landlock narrows to the sandbox's own
 * domain) guards them, and excluding them with rules would break `/proc/self` for every new
 * process. Any other path beneath `/proc` is refused for the same reason.
 */
function existingExclusions(paths: string[]): string[] {
  const out = new Set<string>();
  for (const p of paths) {
    if (isProcPid(p)) continue;
    if (isBeneath(p, "/proc")) {
      throw new SandboxUnavailableError(
        `cannot exclude ${p}: Landlock rules beneath /proc would break /proc/self for new processes`,
      );
    }
    if (lstatOrNull(p) === null) continue;
    out.add(p);
    out.add(realPathOrSelf(p));
  }
  return [...out];
}

/**
 * Grants `rights` beneath `root` except beneath any of `excluded`. Where an excluded path lies
 * below, `root` itself only gets READ_DIR (and only when no excluded path beneath it is a
 * directory, since READ_DIR would reach it) and each entry is granted recursively. Symlink
 * entries are skipped: their targets are covered where they really live.
 */
function grantExcluding(root: string, rights: bigint, excluded: string[], out: PathRule[]): void {
  const inside = excluded.filter((e) => isBeneath(e, root));
  if (inside.length === 0) {
    out.push({ path: root, access: rights });
    return;
  }
  if (inside.includes(root)) return;
  const hidesDir = inside.some((e) => lstatOrNull(e)?.isDirectory);
  if (!hidesDir && (rights & FS.READ_DIR)) out.push({ path: root, access: FS.READ_DIR });
  for (const entry of Deno.readDirSync(root)) {
    if (entry.isSymlink) continue;
    grantExcluding(join(root, entry.name), rights, inside, out);
  }
}

function grantRoots(
  roots: string[],
  rights: bigint,
  excluded: string[],
  out: PathRule[],
): void {
  for (const root of roots) {
    if (lstatOrNull(root) === null) continue;
    grantExcluding(root, rights, excluded, out);
  }
}

/** Computes the ruleset for `policy` on Landlock ABI `abi` (reads the file system). */
export function planRuleset(
  policy: ResolvedPolicy,
  abi: number,
  opts: PlanOptions = {},
): RulesetPlan {
  if (abi < 1) throw new SandboxUnavailableError("Landlock is not available on this kernel");
  const handledFs = handledFsRights(abi);
  const ports = policy.network === "none" ? [] : policy.tcpPorts;
  const limitsTcp = policy.network === "none" || ports !== undefined;
  if (limitsTcp && abi < 4) {
    throw new SandboxUnavailableError(
      `Landlock ABI ${abi} cannot restrict TCP ports (needs ABI 4, Linux 6.7+)`,
    );
  }
  const denied = existingExclusions(policy.denyRead);
  const readOnly = opts.readOnlyEnforcedElsewhere
    ? []
    : existingExclusions(policy.readOnlySubpaths);
  const write = handledFs & ~(FS.MAKE_CHAR | FS.MAKE_BLOCK | READ);
  const paths: PathRule[] = [];
  grantRoots(policy.readableRoots, READ, denied, paths);
  grantRoots(policy.writableRoots, READ, denied, paths);
  grantRoots(policy.writableRoots, write, [...denied, ...readOnly], paths);
  // Terminals: beneath /dev/pts, which is the domain's own devpts instance when root.
  for (const path of [TERMINALS, ...DEVICE_FILES]) {
    if (lstatOrNull(path) !== null) {
      paths.push({
        path,
        access: (path === TERMINALS ? DEVICE | FS.READ_DIR : DEVICE) & handledFs,
      });
    }
  }
  return {
    abi,
    handledFs,
    handledNet: limitsTcp ? NET_BIND_TCP | NET_CONNECT_TCP : 0n,
    scoped: abi >= 6 ? SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL : 0n,
    paths,
    tcpPorts: ports ?? [],
  };
}

function rulesetAttr(plan: RulesetPlan): Uint8Array {
  const size = plan.abi >= 6 ? 24 : plan.abi >= 4 ? 16 : 8;
  const buf = new Uint8Array(size);
  const view = new DataView(buf.buffer);
  view.setBigUint64(0, plan.handledFs, true);
  if (size >= 16) view.setBigUint64(8, plan.handledNet, true);
  if (size >= 24) view.setBigUint64(16, plan.scoped, true);
  return buf;
}

function addPathRule(rulesetFd: number, rule: PathRule): void {
  let fd: number;
  try {
    fd = openPath(rule.path);
  } catch (e) {
    if (e instanceof OsError && e.errno === E.ENOENT) return;
    throw e;
  }
  try {
    const isDir = lstatOrNull(rule.path, true)?.isDirectory ?? false;
    addFdRule(rulesetFd, fd, isDir ? rule.access : rule.access & FILE_ONLY, rule.path);
  } finally {
    closeFd(fd);
  }
}

/** Adds a rule granting `access` beneath the directory open as `fd` (not closed here). */
function addFdRule(rulesetFd: number, fd: number, access: bigint, what: string): void {
  const attr = new Uint8Array(12);
  const view = new DataView(attr.buffer);
  view.setBigUint64(0, access, true);
  view.setInt32(8, fd, true);
  checkedSyscall(
    `landlock_add_rule(${what})`,
    SYS.landlock_add_rule,
    rulesetFd,
    RULE_PATH_BENEATH,
    attr,
    0,
  );
}

/**
 * Grants terminal rights beneath each directory of `dirFds`: the devpts instances of a domain's
 * terminal slots (terminal_slots.ts), which no path reaches from the domain's own view.
 */
export function addTerminalRules(rulesetFd: number, plan: RulesetPlan, dirFds: number[]): void {
  for (const fd of dirFds) {
    addFdRule(rulesetFd, fd, (DEVICE | FS.READ_DIR) & plan.handledFs, "a slot's /dev/pts");
  }
}

function addPortRule(rulesetFd: number, port: number): void {
  const attr = new Uint8Array(16);
  const view = new DataView(attr.buffer);
  view.setBigUint64(0, NET_BIND_TCP | NET_CONNECT_TCP, true);
  view.setBigUint64(8, BigInt(port), true);
  checkedSyscall(
    `landlock_add_rule(port ${port})`,
    SYS.landlock_add_rule,
    rulesetFd,
    RULE_NET_PORT,
    attr,
    0,
  );
}

/** Creates a ruleset file descriptor holding every rule of `plan`. The caller owns the fd. */
export function createRuleset(plan: RulesetPlan): number {
  const attr = rulesetAttr(plan);
  const fd = checkedSyscall(
    "landlock_create_ruleset",
    SYS.landlock_create_ruleset,
    attr,
    attr.length,
    0,
  );
  try {
    for (const rule of plan.paths) addPathRule(fd, rule);
    for (const port of plan.tcpPorts) addPortRule(fd, port);
  } catch (e) {
    closeFd(fd);
    throw e;
  }
  return fd;
}

/**
 * Sets NO_NEW_PRIVS and restricts the calling thread with the ruleset, then closes it.
 * Children spawned from this thread afterwards inherit the domain.
 */
export function restrictThread(rulesetFd: number): void {
  try {
    prctl("prctl(PR_SET_NO_NEW_PRIVS)", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    checkedSyscall("landlock_restrict_self", SYS.landlock_restrict_self, rulesetFd, 0);
  } finally {
    closeFd(rulesetFd);
  }
}
