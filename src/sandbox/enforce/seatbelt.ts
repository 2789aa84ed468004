/**
 * macOS Seatbelt (SBPL) enforcement: turns a {@link ResolvedPolicy} into a `sandbox-exec`
 * command line.
 *
 * The policy text is fixed per policy shape; every path goes in as a `-D KEY=VALUE` parameter
 * and is referenced with `(param "KEY")`, so no path is ever interpolated into SBPL. Paths under
 * macOS's `/tmp`, `/var` and `/etc` symlinks are rewritten to their `/private/...` targets,
 * because Seatbelt matches real paths; other paths must already be canonical.
 *
 * This module only builds strings: it must never run anything, and it must never produce a
 * command that runs an enforced policy without `sandbox-exec`, nor one weaker than the policy: a
 * policy whose network is uexec's egress proxy (a Linux network namespace with the proxy inside)
 * has no Seatbelt form, and is refused. It is untested at runtime (the project's machines are
 * Linux); golden files pin its output.
 *
 * @module
 */

import type { ResolvedPolicy } from "../policy/policy.ts";
import { isWithin } from "../policy/profiles.ts";
import { SandboxUnavailableError } from "../errors.ts";

/** Absolute path of the Seatbelt launcher; never looked up on PATH. */
export const SANDBOX_EXEC = "/usr/bin/sandbox-exec";

/** A generated Seatbelt profile: SBPL text plus the `-D` parameters it references. */
export interface SeatbeltProfile {
  text: string;
  /** Parameter name to value, in the order the `-D` flags are emitted. */
  params: Map<string, string>;
}

const DARWIN_SYMLINKED_ROOTS = ["/tmp", "/var", "/etc"];

/** Maps `/tmp`, `/var` and `/etc` (and paths beneath them) to their `/private` targets. */
export function darwinRealPath(path: string): string {
  const root = DARWIN_SYMLINKED_ROOTS.find((r) => isWithin(path, r));
  return root ? `/private${path}` : path;
}

const BASE_RULES = `(version 1)
(deny default)

; processes: only within this sandbox
(allow process-exec)
(allow process-fork)
(allow signal (target same-sandbox))
(allow process-info* (target same-sandbox))
(allow sysctl-read)
(allow user-preference-read)
(allow mach-lookup (global-name "com.apple.system.opendirectoryd.libinfo"))

; terminal: the inherited PTY slave, /dev/tty, and PTYs opened inside the sandbox
(allow pseudo-tty)
(allow file-read* file-write* file-ioctl (literal "/dev/ptmx") (literal "/dev/tty"))
(allow file-ioctl (regex #"^/dev/ttys[0-9]+$"))
(allow file-read* file-write*
  (require-all (regex #"^/dev/ttys[0-9]+$") (extension "com.apple.sandbox.pty")))

; devices
(allow file-read* file-write-data (literal "/dev/null") (literal "/dev/zero"))
(allow file-read* (literal "/dev/random") (literal "/dev/urandom"))
`;

/** A `-D` parameter: its SBPL reference and the path it stands for. */
type Param = { ref: string; path: string };

/** Collects `-D` parameters and hands back their SBPL references. */
class ParamTable {
  readonly params = new Map<string, string>();

  add(prefix: string, values: string[]): Param[] {
    return values.map((path, i) => {
      const key = `${prefix}_${i}`;
      this.params.set(key, path);
      return { ref: `(param "${key}")`, path };
    });
  }
}

/** One allow rule: everything beneath `root` except the `excluded` entries beneath it. */
function allowBeneath(
  operation: string,
  root: Param | undefined,
  excluded: { filter: "literal" | "subpath"; param: Param }[],
): string {
  const within = excluded.filter((e) => !root || isWithin(e.param.path, root.path));
  const filters = [
    ...(root ? [`(subpath ${root.ref})`] : []),
    ...within.map((e) => `(require-not (${e.filter} ${e.param.ref}))`),
  ];
  if (filters.length === 0) return `(allow ${operation})`;
  if (filters.length === 1) return `(allow ${operation} ${filters[0]})`;
  return `(allow ${operation}\n  (require-all\n    ${filters.join("\n    ")}))`;
}

function subpaths(params: Param[]): { filter: "subpath"; param: Param }[] {
  return params.map((param) => ({ filter: "subpath", param }));
}

function checkedPorts(ports: number[]): number[] {
  for (const port of ports) {
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      throw new Error(`seatbelt: invalid TCP port ${port}`);
    }
  }
  return ports;
}

function networkRules(policy: ResolvedPolicy): string {
  if (policy.network === "none") return "; network: none\n";
  const host = policy.network === "loopback" ? "localhost" : "*";
  const outbound = policy.tcpPorts
    ? checkedPorts(policy.tcpPorts).map((port) => `(remote tcp "${host}:${port}")`).join(" ")
    : `(remote ip "${host}:*")`;
  const lines = [`; network: ${policy.network}${policy.tcpPorts ? " (listed TCP ports)" : ""}`];
  if (policy.network === "loopback") {
    lines.push(
      `(allow network-outbound ${outbound})`,
      `(allow network-inbound (local ip "localhost:*"))`,
      `(allow network-bind (local ip "localhost:*"))`,
    );
  } else {
    lines.push(
      policy.tcpPorts ? `(allow network-outbound ${outbound})` : "(allow network-outbound)",
      "(allow network-inbound)",
      "(allow network-bind)",
      "(allow system-socket)",
      "; name resolution and TLS trust",
      '(allow network-outbound (literal "/private/var/run/mDNSResponder"))',
      '(allow mach-lookup (global-name "com.apple.dnssd.service")',
      '  (global-name "com.apple.trustd") (global-name "com.apple.trustd.agent")',
      '  (global-name "com.apple.SystemConfiguration.configd"))',
    );
  }
  return `${lines.join("\n")}\n`;
}

/** Generates the SBPL text and parameters for an enforced policy. */
export function seatbeltProfile(policy: ResolvedPolicy): SeatbeltProfile {
  const table = new ParamTable();
  const fullRead = policy.readableRoots.includes("/");
  const readable = table.add(
    "READABLE_ROOT",
    policy.readableRoots.filter((root) => root !== "/").map(darwinRealPath),
  );
  const writable = table.add("WRITABLE_ROOT", policy.writableRoots.map(darwinRealPath));
  const readOnly = table.add("READ_ONLY", policy.readOnlySubpaths.map(darwinRealPath));
  const denied = subpaths(table.add("DENY_READ", policy.denyRead.map(darwinRealPath)));

  const readRules = [
    ...(fullRead ? [allowBeneath("file-read*", undefined, denied)] : []),
    ...[...readable, ...writable].map((root) => allowBeneath("file-read*", root, denied)),
  ];
  const writeExclusions = [
    ...readOnly.flatMap((param) => [
      { filter: "literal" as const, param },
      { filter: "subpath" as const, param },
    ]),
    ...denied,
  ];
  const writeRules = writable.map((root) => allowBeneath("file-write*", root, writeExclusions));

  const text = [
    BASE_RULES,
    `; read: ${fullRead ? "everything" : "readable and writable roots"}, minus deny-read paths`,
    ...readRules,
    "",
    "; write: writable roots, minus read-only subpaths and deny-read paths",
    ...writeRules,
    "",
    networkRules(policy),
  ].join("\n");
  return { text, params: table.params };
}

/**
 * The command that runs `argv` under the policy: `sandbox-exec -p <text> -DKEY=VALUE... -- argv`.
 * A policy that is not enforced (`full-access`) runs `argv` as is.
 */
export function seatbeltCommand(policy: ResolvedPolicy, argv: string[]): string[] {
  if (argv.length === 0) throw new Error("seatbelt: empty argv");
  if (!policy.enforce) return [...argv];
  if (policy.egress) {
    // Its "loopback" would reach every service on the host's loopback, not the proxy alone.
    throw new SandboxUnavailableError(
      "egress through uexec's proxy needs a Linux network namespace; Seatbelt cannot enforce it",
    );
  }
  const { text, params } = seatbeltProfile(policy);
  const defines = [...params].map(([key, value]) => `-D${key}=${value}`);
  return [SANDBOX_EXEC, "-p", text, ...defines, "--", ...argv];
}
