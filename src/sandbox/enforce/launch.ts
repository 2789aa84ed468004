/**
 * How a session's shell command is started: the executable, argv and environment that
 * posix_spawn gets, with the cgroup gate and the resource limits in effect before the
 * command's first instruction.
 *
 * Where the command's shell is dash itself, not run as a login shell, the gate and the limits
 * are the first commands of its own script (no wrapper exec, which is most of what a gated or
 * limited spawn would cost); dash reads no startup file and imports no functions there, so
 * nothing of the command runs before them. Otherwise a dash (or prlimit) wrapper runs first
 * and execs the shell.
 *
 * It must never let the dynamic loader's variables (`LD_PRELOAD`, `LD_AUDIT`,
 * `LD_LIBRARY_PATH`, `GCONV_PATH`, …) act before the gate and the limits: they would load the
 * request's code into the wrapper, which could fork away uncontained and unlimited. The
 * wrapper starts without them and exports them just before its exec.
 *
 * @module
 */

import type { ResourceLimits } from "../policy/policy.ts";
import { DASH, type LimitWrapper, limitWrapper, preamble, withGate, withLimits } from "./limits.ts";

/** A session's command: its shell, whether that runs as a login shell, and the script. */
export interface ShellCommand {
  shell: string;
  login: boolean;
  cmd: string;
}

/** What posix_spawn is given: the file it executes, the argv and the `NAME=value` list. */
export interface Launch {
  file: string;
  argv: string[];
  env: string[];
}

/** What must be in effect before the command runs. */
export interface LaunchOptions {
  /** Resource limits (sandboxed profiles); none for an unenforced one. */
  limits?: ResourceLimits;
  /** Wait at the cgroup gate (see limits.ts) before anything of the command runs. */
  gate: boolean;
  /** Which limits wrapper to use (tests); the one this host has by default. */
  wrapper?: LimitWrapper | null;
}

/** Variables the dynamic loader (or glibc on its behalf) acts on at a program's start. */
const LOADER_VARIABLE = /^(?:LD_\w*|GCONV_PATH|GLIBC_TUNABLES)$/;

/** How to start `command` with `env` (see the module doc). */
export function launch(
  command: ShellCommand,
  env: Record<string, string>,
  opts: LaunchOptions,
): Launch {
  const argv = [command.shell, command.login ? "-lc" : "-c", command.cmd];
  const entries = Object.entries(env);
  if (!opts.gate && !opts.limits) return { file: command.shell, argv, env: assignments(entries) };
  const wrapper = opts.wrapper === undefined ? limitWrapper() : opts.wrapper;
  const loader = entries.filter(([name]) => LOADER_VARIABLE.test(name));
  const others = loader.length === 0
    ? entries
    : entries.filter(([name]) => !LOADER_VARIABLE.test(name));
  if (loader.length === 0 && !command.login && wrapper === "dash" && isDash(command.shell)) {
    const first = preamble(opts.limits, opts.gate).join("; ");
    return {
      // The checked binary, not the path again: what runs is the dash that was checked.
      file: DASH,
      argv: [command.shell, "-c", `${first}; ${command.cmd}`],
      env: assignments(entries),
    };
  }
  const exported = assignments(loader);
  const wrapped = opts.limits
    ? withLimits(argv, opts.limits, wrapper, opts.gate, exported)
    : withGate(argv, exported);
  return {
    file: wrapped[0],
    argv: wrapped,
    env: assignments(others),
  };
}

function assignments(entries: [string, string][]): string[] {
  return entries.map(([name, value]) => `${name}=${value}`);
}

let dashFile: string | null | undefined;

/**
 * True when `shell` is an absolute path to the very file {@link DASH} is (Debian's `/bin/sh`, a
 * link to it, or a hard link): the same device and inode, found with one `stat` that follows
 * links. A path that does not start with `/` is never taken: dash run under a name that starts
 * with `-` is a login shell.
 */
function isDash(shell: string): boolean {
  if (!shell.startsWith("/")) return false;
  dashFile ??= fileOf(DASH);
  return dashFile !== null && fileOf(shell) === dashFile;
}

/** The regular file `path` leads to, as `device:inode`; null when there is none. */
function fileOf(path: string): string | null {
  try {
    const info = Deno.statSync(path);
    return info.isFile ? `${info.dev}:${info.ino}` : null;
  } catch {
    return null;
  }
}
