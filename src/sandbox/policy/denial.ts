/**
 * Sandbox denial detection: decides, on evidence, whether a failed command failed because of the
 * sandbox rather than for its own reasons.
 *
 * Unlike a keyword scan, a message counts only when it can be tied to the policy: an
 * EACCES/EPERM/EROFS message naming a path the policy does not allow for that access, or one in
 * a protected directory (`.git`) at any depth, which git_guard.ts keeps read-only wherever it is
 * (and that the supervisor, outside the sandbox, could access), a network error for a
 * destination the policy forbids, a refused signal (enforced policies scope signals), or exit
 * 159 (SIGSYS).
 * Policies read "the most specific entry wins", as {@link policyAllows} spells out.
 *
 * This module only reads text and, through the default {@link supervisorCanAccess}, file
 * metadata. It must never modify anything, and it must never report a denial for exit code 0 or
 * for a policy that is not enforced.
 *
 * @module
 */

import type { ResolvedPolicy } from "./policy.ts";
import { isWithin, normalizeAbsolutePath } from "./profiles.ts";

/** What the sandbox refused. */
export type DenialKind = "fs-read" | "fs-write" | "network" | "signal" | "syscall";

/** A filesystem access, as the policy and the supervisor see it. */
export type Access = "read" | "write";

/** Could the supervisor (outside the sandbox) perform this access without a permission error? */
export type CanAccess = (path: string, access: Access) => boolean;

/** One detected denial. `evidence` is the output line (or exit status) it rests on. */
export interface Denial {
  kind: DenialKind;
  path?: string;
  /** For network denials: the TCP port the command tried to reach, when the message names it. */
  port?: number;
  /** For network denials: the host the command tried to reach or look up, when named. */
  host?: string;
  /** For a connection the egress proxy refused: the rule that refused it (`not-allowed`...). */
  rule?: string;
  evidence: string;
}

/** The verdict for one finished command. */
export interface DenialResult {
  denied: boolean;
  denial?: Denial;
}

/** What {@link detectDenial} looks at. */
export interface DenialInput {
  policy: ResolvedPolicy;
  /** Shell convention: 128 + N when killed by signal N; null when unknown (never a denial). */
  exitCode: number | null;
  /** The command's output (PTY text; ANSI sequences are ignored). */
  output: string;
  /** Absolute directory the command ran in; without it, relative paths in messages are ignored. */
  cwd?: string;
  /** Defaults to {@link supervisorCanAccess}; injected by tests. */
  canAccess?: CanAccess;
}

const SIGSYS_EXIT = 128 + 31;
const EVIDENCE_MAX = 300;
const NOT_DENIED: DenialResult = { denied: false };

/** Length of the deepest entry that contains `path`, or -1. */
function deepest(path: string, entries: string[]): number {
  return entries.reduce((best, e) => isWithin(path, e) ? Math.max(best, e.length) : best, -1);
}

/**
 * Whether the policy lets the child perform `access` on `path` (absolute, normalised). The most
 * specific matching entry wins, and on a tie the restriction wins: a read is allowed beneath a
 * readable or writable root unless a deeper deny-read path covers it; a write is allowed beneath
 * a writable root unless a deeper or equal read-only subpath or deny-read path covers it.
 */
export function policyAllows(policy: ResolvedPolicy, path: string, access: Access): boolean {
  if (!policy.enforce) return true;
  const allowed = access === "read"
    ? Math.max(deepest(path, policy.readableRoots), deepest(path, policy.writableRoots))
    : deepest(path, policy.writableRoots);
  const restricted = access === "read"
    ? deepest(path, policy.denyRead)
    : Math.max(deepest(path, policy.denyRead), deepest(path, policy.readOnlySubpaths));
  return allowed >= 0 && allowed > restricted;
}

function parentOf(path: string): string {
  return path.slice(0, path.lastIndexOf("/")) || "/";
}

/**
 * Default {@link CanAccess}: DAC mode bits of the path (or, when it does not exist, of its
 * nearest existing ancestor, where a missing file would give ENOENT, not EACCES) for the
 * server's uid and primary gid; root passes. A relative path or any error counts as "cannot".
 */
export function supervisorCanAccess(path: string, access: Access): boolean {
  if (!path.startsWith("/") || path.includes("\0")) return false;
  try {
    const uid = Deno.uid();
    const gid = Deno.gid();
    if (uid === null || gid === null) return false;
    let target = path;
    let info = statOrNull(target);
    const exists = info !== null;
    while (info === null && target !== "/") {
      target = parentOf(target);
      info = statOrNull(target);
    }
    if (info === null || info.mode === null) return false;
    if (uid === 0) return true;
    const R = 4, W = 2, X = 1;
    const need = exists ? (access === "read" ? R : W) : (access === "read" ? X : W | X);
    const shift = info.uid === uid ? 6 : info.gid === gid ? 3 : 0;
    return ((info.mode >> shift) & need) === need;
  } catch {
    return false;
  }
}

function statOrNull(path: string): Deno.FileInfo | null {
  try {
    return Deno.statSync(path);
  } catch {
    return null;
  }
}

// ---------------------------------------------------------------------------------------------
// Network evidence

/** How much a network message proves on its own. */
type NetworkStrength = "strong" | "weak" | "dns";

interface NetworkEvidence {
  strength: NetworkStrength;
  host?: string;
  port?: number;
}

const ERRNO_PERM = "(?:Permission denied|Operation not permitted)";
const STRONG_NETWORK = [
  new RegExp(`\\b(?:connect|socket|bind)(?:\\(\\))?: ${ERRNO_PERM}`, "i"),
  new RegExp(`connect to (?:host )?\\S+ port \\d+.*${ERRNO_PERM}`, "i"),
  new RegExp(`Failed to connect to \\S+ port \\d+.*${ERRNO_PERM}`, "i"),
  new RegExp(`\\.\\.\\. failed: ${ERRNO_PERM}`, "i"),
  new RegExp(`/dev/(?:tcp|udp)/[^/\\s]+/\\d+: ${ERRNO_PERM}`, "i"),
  /(?:urlopen error|URLError|NewConnectionError|Failed to establish a new connection|socket\.).*\[Errno (?:1|13)\]/,
];
const WEAK_NETWORK = [/Couldn't connect to server/i, /Network is unreachable/i];
/** Failed name lookups; the first group, where there is one, is the host the message names. */
const DNS_NETWORK = [
  /Could not resolve host(?:name)?(?::? ([^\s:'"]+))?/i, // curl, git, ssh
  /Temporary failure in name resolution/i,
  /unable to resolve host address(?: ['‘"]?([^\s'’"]+))?/i, // wget
  /getaddrinfo EAI_AGAIN(?: ([^\s:]+))?/, // Node: the resolver could not be reached
  // Without any network an IPv4-only lookup of a name that exists fails like one of a name that
  // does not (glibc's EAI_NONAME: Python's [Errno -2], pip; Node's ENOTFOUND with family 4), so
  // these count where the policy has no network at all (see networkForbids).
  /Name or service not known/i,
  /getaddrinfo ENOTFOUND(?: ([^\s:]+))?/,
];

/**
 * Node's (libuv's) shape, `connect EPERM 1.1.1.1:80` or `listen EACCES: permission denied
 * 0.0.0.0:3000`: call, error, then the address.
 */
const LIBUV_NETWORK = /\b(connect|listen|bind) (EPERM|EACCES)\b(?:: [a-z ]+)? (\S+):(\d+)\b/;

function libuvEvidence(line: string): NetworkEvidence | undefined {
  const match = LIBUV_NETWORK.exec(line);
  if (!match) return undefined;
  const [, call, code, host, port] = match;
  if (call === "connect") return { strength: "strong", host, port: Number(port) };
  // A local port: below 1024, EACCES is the kernel's rule for every unprivileged user, not the
  // sandbox's. Node reports a TCP server's failed bind as `listen`; `bind` is a datagram
  // socket's, whose port no TCP widening opens.
  if (code === "EACCES" && Number(port) < 1024) return undefined;
  return call === "listen" ? { strength: "strong", port: Number(port) } : { strength: "strong" };
}

const DESTINATIONS = [
  /(?:connect to|Connecting to)(?: host)? (\S+) port (\d+)/i,
  /\|([^|\s]+)\|:(\d+)\.\.\./,
  /Connecting to ([^\s|()]+):(\d+)\.\.\./,
  /\/dev\/(?:tcp|udp)\/([^/\s]+)\/(\d+)/,
];

function networkEvidence(line: string): NetworkEvidence | undefined {
  const libuv = libuvEvidence(line);
  if (libuv) return libuv;
  const strength: NetworkStrength | undefined = STRONG_NETWORK.some((re) => re.test(line))
    ? "strong"
    : WEAK_NETWORK.some((re) => re.test(line))
    ? "weak"
    : DNS_NETWORK.some((re) => re.test(line))
    ? "dns"
    : undefined;
  if (!strength) return undefined;
  for (const re of DESTINATIONS) {
    const match = re.exec(line);
    if (match) return { strength, host: match[1], port: Number(match[2]) };
  }
  // A URL (npm and git name the one they fetched) or urllib3's connection class (pip) gives the
  // port; a failed name lookup names at least the host.
  const [url] = urlDestinations(line);
  if (url) return { strength, ...url };
  const web = URLLIB3_CONNECTION.exec(line);
  if (web) return { strength, port: DEFAULT_PORTS[web[1] === "HTTPS" ? "https" : "http"] };
  for (const re of DNS_NETWORK) {
    const host = re.exec(line)?.[1];
    if (host !== undefined) return { strength, host };
  }
  return { strength };
}

/** The TCP port of each URL scheme a command line or an error message may name. */
const DEFAULT_PORTS: Record<string, number> = {
  http: 80,
  https: 443,
  ws: 80,
  wss: 443,
  ftp: 21,
  ssh: 22,
  git: 9418,
};
/**
 * A URL: scheme (any case), optional user info, host (a name or a bracketed IPv6 literal), port;
 * what follows may not go on as a host or port (`example.com|jq` is `example.com`).
 */
const URL_DESTINATION =
  /\b(https?|wss?|ftp|ssh|git):\/\/(?:[^/\s@'"]*@)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~-]+)(?::(\d{1,5}))?(?![A-Za-z0-9._~:-])/gi;
const URLLIB3_CONNECTION = /\b(HTTPS?)Connection object\b/;
/** Where the URLs in `text` lead: host (lower case) and port, in order, each valid port once. */
export function urlDestinations(text: string): { host: string; port: number }[] {
  const found: { host: string; port: number }[] = [];
  for (const [, scheme, host, port] of text.matchAll(URL_DESTINATION)) {
    const number = Number(port ?? DEFAULT_PORTS[scheme.toLowerCase()]);
    // A name's trailing dot ends a sentence more often than it roots a name.
    const name = host.toLowerCase().replace(/\.+$/, "");
    if (number >= 1 && number <= 65535) found.push({ host: name, port: number });
  }
  return found;
}

/** Python's last traceback line for a refused socket() names no socket; its source line does. */
const PYTHON_ERRNO_PERM = /^(?:PermissionError|OSError): \[Errno (?:1|13)\] /;

function pythonSocketDenial(
  previous: string,
  line: string,
  policy: ResolvedPolicy,
): Denial | undefined {
  if (!PYTHON_ERRNO_PERM.test(line) || !/\bsocket\b/.test(previous)) return undefined;
  if (!networkForbids(policy, { strength: "strong" })) return undefined;
  return { kind: "network", evidence: `${previous.trim()} / ${line}` };
}

function isLoopbackHost(host: string): boolean {
  const bare = host.replace(/^\[(.*)\]$/, "$1").toLowerCase();
  return bare === "localhost" || bare === "::1" || bare === "ip6-localhost" ||
    /^127(?:\.\d{1,3}){3}$/.test(bare);
}

/** Whether the policy forbids the network use this evidence shows. */
function networkForbids(policy: ResolvedPolicy, evidence: NetworkEvidence): boolean {
  if (policy.network === "none") return true;
  if (policy.network === "all" && !policy.tcpPorts) return false;
  // Partial network: DNS itself is not restricted, and an unknown destination proves nothing
  // unless the error is the EACCES/EPERM a sandbox gives.
  if (evidence.strength === "dns") return false;
  if (evidence.host === undefined) return evidence.strength === "strong";
  const hostAllowed = policy.network === "all" || isLoopbackHost(evidence.host);
  const portAllowed = !policy.tcpPorts || policy.tcpPorts.includes(evidence.port!);
  return !(hostAllowed && portAllowed);
}

// ---------------------------------------------------------------------------------------------
// Signal evidence

const SIGNAL_REFUSED = /(?:^|: )(?:p?kill|killall)\b.*operation not permitted/i;

// ---------------------------------------------------------------------------------------------
// Filesystem evidence

const FS_ERRNO = /Permission denied|Operation not permitted|Read-only file system/i;

/** Which access a message reports; `either` when its shape does not say. */
type MessageAccess = Access | "either";

const WRITE_MESSAGE =
  /Read-only file system|\[Errno 30\]|for writing|cannot (?:create|touch|remove|move|overwrite|mkdir|make|link|unlink|rename|change)|can't (?:create|write|remove)|could ?n[o']t (?:create|lock|write|remove|mkdir|rename)|failed to (?:create|remove|write|rename|link)|unable to (?:create|write|remove|unlink|rename)/i;
const READ_MESSAGE =
  /cannot (?:open|access|read|stat)|can't (?:open|read|stat|access)|could ?n[o']t (?:open|read|access|stat)|unable to (?:access|open|read)|failed to (?:open|read|access|stat)|(?:^|: )(?:cat|head|tail|less|more|grep|find|ls|du|wc|stat|file|cd|tree|diff|sort|rg|source|\.): /i;

function messageAccess(line: string): MessageAccess {
  if (WRITE_MESSAGE.test(line)) return "write";
  if (READ_MESSAGE.test(line)) return "read";
  return "either";
}

const QUOTED = [/'([^']+)'/g, /‘([^’]+)’/g, /"([^"]+)"/g, /`([^'`]+)'/g];
const NOT_PATHS = new Set(["standard input", "standard output", "standard error"]);
const VERB_PHRASE =
  /^(?:cannot|can't|could ?n[o']t|unable to|failed to) (?:create|touch|remove|mkdir|open|access|stat|read|write|lock)\b.* (\S+)$/i;

/** The unquoted path just before `: <errno message>`, as sh, bash and cat print it. */
function barePath(line: string, errnoAt: number): string | undefined {
  const prefix = line.slice(0, errnoAt);
  if (!/:\s*$/.test(prefix)) return undefined;
  const before = prefix.replace(/:\s*$/, "");
  const segment = before.slice(before.lastIndexOf(": ") + 1).trim();
  if (segment === "" || /['"‘’`]/.test(segment)) return undefined;
  if (segment.startsWith("/") || !segment.includes(" ")) return segment;
  const slash = segment.indexOf(" /");
  return slash >= 0 ? segment.slice(slash + 1) : VERB_PHRASE.exec(segment)?.[1];
}

/** Paths a message names, absolute and normalised, in the order they appear. */
function pathsIn(line: string, errnoAt: number, cwd: string | undefined): string[] {
  const quoted = QUOTED.flatMap((re) => [...line.matchAll(re)].map((m) => [m.index, m[1]] as const))
    .sort((a, b) => a[0] - b[0])
    .map(([, text]) => text);
  const bare = barePath(line, errnoAt);
  const raw = bare === undefined ? quoted : [...quoted, bare];
  return raw
    .filter((p) => !NOT_PATHS.has(p) && !p.includes("://") && !p.startsWith("-"))
    .flatMap((p) => {
      if (p.startsWith("/")) return [normalizeAbsolutePath(p)];
      if (cwd?.startsWith("/") && !p.startsWith("~")) {
        return [normalizeAbsolutePath(`${cwd}/${p}`)];
      }
      return [];
    });
}

/**
 * Whether `path` lies in (or is) a directory with a protected name (`.git`: a one-component
 * read-only subpath) beneath a writable root, where no writable root at or beneath that
 * directory grants it: such directories stay read-only at any depth (git_guard.ts), not only
 * where the policy lists them.
 */
function inProtectedDir(policy: ResolvedPolicy, path: string): boolean {
  const names = new Set<string>();
  for (const sub of policy.readOnlySubpaths) {
    const slash = sub.lastIndexOf("/");
    if (policy.writableRoots.includes(sub.slice(0, slash) || "/")) names.add(sub.slice(slash + 1));
  }
  if (names.size === 0) return false;
  return policy.writableRoots.some((root) => {
    if (!isWithin(path, root)) return false;
    const parts = path.slice(root.length).split("/").filter(Boolean);
    return parts.some((part, i) => {
      if (!names.has(part)) return false;
      const dir = normalizeAbsolutePath(`${root}/${parts.slice(0, i + 1).join("/")}`);
      return !policy.writableRoots.some((w) => isWithin(path, w) && isWithin(w, dir));
    });
  });
}

function fsDenialKind(
  policy: ResolvedPolicy,
  path: string,
  access: MessageAccess,
  canAccess: CanAccess,
): DenialKind | undefined {
  if (access !== "write" && !policyAllows(policy, path, "read") && canAccess(path, "read")) {
    return "fs-read";
  }
  const writable = policyAllows(policy, path, "write") && !inProtectedDir(policy, path);
  if (access !== "read" && !writable && canAccess(path, "write")) {
    return "fs-write";
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------

function evidenceOf(line: string): string {
  const trimmed = line.trim();
  return trimmed.length > EVIDENCE_MAX ? `${trimmed.slice(0, EVIDENCE_MAX)}…` : trimmed;
}

const ESC = "\u001b";
const ANSI = new RegExp(
  `${ESC}\\[[0-9;?]*[ -/]*[@-~]|${ESC}\\][^\\u0007${ESC}]*(?:\\u0007|${ESC}\\\\)`,
  "g",
);

function lineDenial(
  line: string,
  policy: ResolvedPolicy,
  cwd: string | undefined,
  canAccess: CanAccess,
): Denial | undefined {
  const network = networkEvidence(line);
  if (network) {
    if (!networkForbids(policy, network)) return undefined;
    return {
      kind: "network",
      ...(network.port === undefined ? {} : { port: network.port }),
      ...(network.host === undefined ? {} : { host: network.host }),
      evidence: evidenceOf(line),
    };
  }
  if (SIGNAL_REFUSED.test(line)) return { kind: "signal", evidence: evidenceOf(line) };
  const errno = FS_ERRNO.exec(line);
  if (!errno) return undefined;
  const access = messageAccess(line);
  for (const path of pathsIn(line, errno.index, cwd)) {
    const kind = fsDenialKind(policy, path, access, canAccess);
    if (kind) return { kind, path, evidence: evidenceOf(line) };
  }
  return undefined;
}

/** Decides whether a finished command was stopped by the sandbox; see the module doc. */
export function detectDenial(input: DenialInput): DenialResult {
  const { policy, exitCode, output, cwd } = input;
  if (!policy.enforce || exitCode === null || exitCode === 0) return NOT_DENIED;
  const canAccess = input.canAccess ?? supervisorCanAccess;
  let previous = "";
  for (const line of output.replace(ANSI, "").split(/\r?\n|\r/)) {
    const denial = lineDenial(line, policy, cwd, canAccess) ??
      pythonSocketDenial(previous, line, policy);
    if (denial) return { denied: true, denial };
    previous = line;
  }
  if (exitCode === SIGSYS_EXIT) {
    return {
      denied: true,
      denial: {
        kind: "syscall",
        evidence: "exit code 159: killed by SIGSYS (refused system call)",
      },
    };
  }
  return NOT_DENIED;
}
