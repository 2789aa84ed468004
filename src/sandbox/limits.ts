/**
 * Resource limits for a sandboxed child, applied by a wrapper that sets them on itself and then
 * execs the command, so they are in place before the command's first instruction and nothing
 * can race them. (rlimits are per process, so setting them on the server's spawning thread
 * would limit the whole server.) The wrapper is dash's `ulimit` builtin where /bin/dash exists
 * (one small exec), else util-linux `prlimit`. Core dumps are always disabled. This module
 * must never change the server's own limits.
 *
 * @module
 */

import { SandboxUnavailableError } from "./errors.ts";
import { lstatOrNull } from "./fsinfo.ts";
import type { ResourceLimits } from "./policy.ts";

/** Where util-linux prlimit lives on the supported systems. */
export const PRLIMIT = "/usr/bin/prlimit";
/** Debian's /bin/sh; its `ulimit` sets soft and hard limits with one letter per call. */
export const DASH = "/bin/dash";

/**
 * The descriptor a gated child waits on: the wrapper reads one line from it before anything
 * else runs, so the server can put the child into its cgroup first; end of file without that
 * line (the server died) ends the child with 125.
 */
export const GATE_FD = 3;
const GATE = `IFS= read -r _ <&${GATE_FD} || exit 125; exec ${GATE_FD}<&-`;

/** Which program applies the limits. */
export type LimitWrapper = "dash" | "prlimit";

/** Each limit: its prlimit name, its dash `ulimit` letter and the unit dash counts in. */
const LIMITS: [keyof ResourceLimits, string, string, number][] = [
  ["maxProcesses", "nproc", "p", 1],
  ["maxFileSizeBytes", "fsize", "f", 512],
  ["cpuSeconds", "cpu", "t", 1],
  ["addressSpaceBytes", "as", "v", 1024],
];

function values(limits: ResourceLimits): [string, string, number, number][] {
  const out: [string, string, number, number][] = [];
  for (const [key, name, letter, unit] of LIMITS) {
    const value = limits[key];
    if (value === undefined) continue;
    if (!Number.isSafeInteger(value) || value < 0) {
      throw new RangeError(`limit ${key} must be a whole number, got ${value}`);
    }
    out.push([name, letter, value, unit]);
  }
  return out;
}

/** The prlimit options (soft = hard) for `limits`, always including `--core=0`. */
export function prlimitOptions(limits: ResourceLimits): string[] {
  return ["--core=0:0", ...values(limits).map(([name, , v]) => `--${name}=${v}:${v}`)];
}

/**
 * The dash script that sets `limits` (soft = hard; sizes rounded down to dash's units) and
 * execs its arguments; a limit it cannot set ends it with 126 before anything runs.
 */
export function dashScript(limits: ResourceLimits, gate = false): string {
  const steps = [
    ...(gate ? [GATE] : []),
    "ulimit -c 0",
    ...values(limits).map(([, letter, v, unit]) => `ulimit -${letter} ${Math.floor(v / unit)}`),
  ];
  const [first, ...more] = steps;
  return gate
    ? `${first}\n${more.join(" && ")} || exit 126\nexec "$@"`
    : `${steps.join(" && ")} || exit 126\nexec "$@"`;
}

function exists(path: string): boolean {
  const info = lstatOrNull(path, true);
  return info !== null && !info.isDirectory;
}

let chosen: LimitWrapper | null | undefined;

/** The wrapper available here (dash preferred), or null when there is neither. */
export function limitWrapper(): LimitWrapper | null {
  chosen ??= exists(DASH) ? "dash" : exists(PRLIMIT) ? "prlimit" : null;
  return chosen;
}

/** `argv` wrapped so that it first waits at the gate on {@link GATE_FD} (one dash exec). */
export function withGate(argv: string[]): string[] {
  if (argv.length === 0) throw new RangeError("argv must not be empty");
  if (!exists(DASH)) {
    throw new SandboxUnavailableError(`cannot gate a child into its cgroup: ${DASH} is missing`);
  }
  return [DASH, "-c", `${GATE}\nexec "$@"`, "uexec-gate", ...argv];
}

/** `argv` wrapped so that it runs under `limits` (after the gate, when `gate`). */
export function withLimits(
  argv: string[],
  limits: ResourceLimits,
  wrapper: LimitWrapper | null = limitWrapper(),
  gate = false,
): string[] {
  if (argv.length === 0) throw new RangeError("argv must not be empty");
  if (wrapper === "dash") {
    return [DASH, "-c", dashScript(limits, gate), "uexec-limits", ...argv];
  }
  if (wrapper === "prlimit") {
    const limited = [PRLIMIT, ...prlimitOptions(limits), "--", ...argv];
    return gate ? withGate(limited) : limited;
  }
  throw new SandboxUnavailableError(
    `cannot apply resource limits: neither ${DASH} nor ${PRLIMIT} exists (install dash or util-linux)`,
  );
}
