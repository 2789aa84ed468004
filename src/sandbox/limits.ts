/**
 * Resource limits for a sandboxed child, applied by prefixing its argv with util-linux
 * `prlimit ... --`: prlimit sets the limits on itself and then execs the command, so they are
 * in place before the command's first instruction and nothing can race them. (rlimits are
 * per process, so setting them on the server's spawning thread would limit the whole server.)
 * Core dumps are always disabled. This module must never change the server's own limits.
 *
 * @module
 */

import type { ResourceLimits } from "./policy.ts";

/** Where util-linux prlimit lives on the supported systems. */
export const PRLIMIT = "/usr/bin/prlimit";

const OPTIONS: [keyof ResourceLimits, string][] = [
  ["maxProcesses", "nproc"],
  ["maxFileSizeBytes", "fsize"],
  ["cpuSeconds", "cpu"],
  ["addressSpaceBytes", "as"],
];

/** The prlimit options (soft = hard) for `limits`, always including `--core=0`. */
export function prlimitOptions(limits: ResourceLimits): string[] {
  const options = ["--core=0:0"];
  for (const [key, name] of OPTIONS) {
    const value = limits[key];
    if (value === undefined) continue;
    if (!Number.isSafeInteger(value) || value < 0) {
      throw new RangeError(`limit ${key} must be a whole number, got ${value}`);
    }
    options.push(`--${name}=${value}:${value}`);
  }
  return options;
}

/** `argv` wrapped so that it runs under `limits`: `[prlimit, ...options, "--", ...argv]`. */
export function withLimits(argv: string[], limits: ResourceLimits): string[] {
  if (argv.length === 0) throw new RangeError("argv must not be empty");
  return [PRLIMIT, ...prlimitOptions(limits), "--", ...argv];
}
