/**
 * The wrappers that run before a child's command: resource limits for a sandboxed child, set
 * by a wrapper on itself before it execs the command, so they are in place before the
 * command's first instruction and nothing can race them (rlimits are per process, so setting
 * them on the server's spawning thread would limit the whole server), and the cgroup gate. The
 * wrapper is dash (`ulimit` builtin; one small exec) where /bin/dash exists, else util-linux
 * `prlimit`. Core dumps are always disabled. Variables a wrapper must not run under (see
 * launch.ts) are passed as arguments and exported only after the gate and the limits.
 *
 * This module must never change the server's own limits.
 *
 * @module
 */

import { SandboxUnavailableError } from "../errors.ts";
import { lstatOrNull } from "../fs/fsinfo.ts";
import type { ResourceLimits } from "../policy/policy.ts";

/** Where util-linux prlimit lives on the supported systems. */
export const PRLIMIT = "/usr/bin/prlimit";
/** Debian's /bin/sh; its `ulimit` sets soft and hard limits with one letter per call. */
export const DASH = "/bin/dash";
/** coreutils env, which sets variables after prlimit when dash is missing. */
const ENV = "/usr/bin/env";

/**
 * The descriptor a gated child waits on: the wrapper reads one line from it before anything
 * else runs, so the server can put the child into its cgroup first; end of file without that
 * line (the server died or refused it) ends the child with 125.
 */
export const GATE_FD = 3;
/** The gate as a dash command (one line, no trailing separator). */
export const GATE = `IFS= read -r _ <&${GATE_FD} || exit 125; exec ${GATE_FD}<&-`;

/**
 * Marks the end of the assignments a wrapper exports before it execs (see `exported`); no
 * assignment can be it, as it has no `=`.
 */
const END_OF_EXPORTS = "--";

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
 * The dash command that sets `limits` (soft = hard; sizes rounded down to dash's units), or
 * ends the shell with 126 before anything else runs when one cannot be set (one line, no
 * trailing separator).
 */
export function ulimitCommand(limits: ResourceLimits): string {
  const steps = [
    "ulimit -c 0",
    ...values(limits).map(([, letter, v, unit]) => `ulimit -${letter} ${Math.floor(v / unit)}`),
  ];
  return `${steps.join(" && ")} || exit 126`;
}

/**
 * The dash commands that run before anything of a command: the gate (when `gate`), then
 * `limits` (when given); one line each, no trailing separator.
 */
export function preamble(limits: ResourceLimits | undefined, gate: boolean): string[] {
  return [...(gate ? [GATE] : []), ...(limits ? [ulimitCommand(limits)] : [])];
}

/**
 * The dash script of a wrapper: its {@link preamble}, then the exports of the assignments
 * between its arguments' start and {@link END_OF_EXPORTS} (when `exporting`), then exec its
 * remaining arguments.
 */
export function dashScript(limits?: ResourceLimits, gate = false, exporting = false): string {
  return [
    ...preamble(limits, gate),
    ...(exporting
      ? [`while [ "$1" != ${END_OF_EXPORTS} ]; do export "$1"; shift; done; shift`]
      : []),
    'exec "$@"',
  ].join("\n");
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

/**
 * `argv` wrapped so that it first waits at the gate on {@link GATE_FD} (one dash exec), and
 * `exported` (`NAME=value` assignments) are set only after it, just before `argv` runs.
 */
export function withGate(argv: string[], exported: string[] = []): string[] {
  if (argv.length === 0) throw new RangeError("argv must not be empty");
  if (!exists(DASH)) {
    throw new SandboxUnavailableError(`cannot gate a child into its cgroup: ${DASH} is missing`);
  }
  return dashWrapper(
    "uexec-gate",
    dashScript(undefined, true, exported.length > 0),
    exported,
    argv,
  );
}

/**
 * `argv` wrapped so that it runs under `limits` (after the gate, when `gate`), with `exported`
 * (`NAME=value` assignments) set only once the limits are, just before `argv` runs.
 */
export function withLimits(
  argv: string[],
  limits: ResourceLimits,
  wrapper: LimitWrapper | null = limitWrapper(),
  gate = false,
  exported: string[] = [],
): string[] {
  if (argv.length === 0) throw new RangeError("argv must not be empty");
  if (wrapper === "dash") {
    return dashWrapper(
      "uexec-limits",
      dashScript(limits, gate, exported.length > 0),
      exported,
      argv,
    );
  }
  if (wrapper === "prlimit") {
    if (exported.length > 0 && argv[0].includes("=")) {
      throw new SandboxUnavailableError(
        `cannot run ${argv[0]} through env(1) after prlimit: its path contains "="`,
      );
    }
    const limited = [
      PRLIMIT,
      ...prlimitOptions(limits),
      "--",
      ...(exported.length > 0 ? [ENV, ...exported] : []),
      ...argv,
    ];
    return gate ? withGate(limited) : limited;
  }
  throw new SandboxUnavailableError(
    `cannot apply resource limits: neither ${DASH} nor ${PRLIMIT} exists (install dash or util-linux)`,
  );
}

/** dash running `script` as `name`, with `exported` (then the end mark) before `argv`. */
function dashWrapper(name: string, script: string, exported: string[], argv: string[]): string[] {
  const exports = exported.length > 0 ? [...exported, END_OF_EXPORTS] : [];
  return [DASH, "-c", script, name, ...exports, ...argv];
}
