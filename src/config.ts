/**
 * Server configuration from flags and environment, validated up front: a bad value stops the server
 * with a message naming it. What each setting means and its default: `settings.ts`. Authentication
 * is always on: the tokens come from the environment or the state directory, never from a flag
 * (flags show in `ps`).
 *
 * @module
 */

import { type ApprovalPolicy, parseApprovalPolicy } from "./approvals/policy.ts";
import { loadProfiles, type Profile, withEgressDefaults } from "./sandbox/policy/profiles.ts";
import { DEFAULT_MAX_PTYS } from "./sandbox/enforce/terminal_slots.ts";
import { type Cidr, parseCidr, patternProblem } from "./egress/rules.ts";
import { DEFAULT_AGENT } from "./service/agents.ts";
import { stateDirFrom } from "./service/state_dir.ts";
import { LINEAR_ENGINE, LINEAR_ENGINE_FLAG } from "./sessions/until.ts";
import { LOG_FORMATS, type LogFormat } from "./log.ts";

/** What one connection may hold, and how many there may be. */
export interface ConnectionLimits {
  /** A new connection must complete its first request head within this. */
  headerTimeoutMs: number;
  /** A connection with nothing in flight must complete its next request head within this. */
  idleTimeoutMs: number;
  /**
   * Connections served at once; more are answered 503 and closed (and while as many refusals
   * are under way, closed unanswered).
   */
  maxConnections: number;
  /**
   * Connections served at once for one peer (a local uid or a remote address; `Peer` in
   * http/listener.ts); more are answered 503.
   */
  maxPerPeer: number;
}

/** The server's settings. */
export interface Config {
  host: string;
  port: number;
  /** `UEXEC_LISTEN=unix:PATH`: serve on this unix socket (0600) instead of TCP. */
  unixSocket?: string;
  /** Where tokens and agents are kept (`UEXEC_STATE_DIR`, ...). */
  stateDir: string;
  /** `UEXEC_OPERATOR_TOKEN`: the operator's token instead of `operator.token`. */
  operatorToken?: string;
  /** `UEXEC_AGENT_TOKEN` (alias `UEXEC_TOKEN`): the default agent's token. */
  agentToken?: string;
  /** `UEXEC_ALLOWED_HOSTS` (comma-separated). */
  allowedHosts: string[];
  /** `UEXEC_ALLOWED_ORIGINS` (comma-separated). */
  allowedOrigins: string[];
  /** `UEXEC_ALLOWED_ROOTS` (colon-separated, resolved): workdirs may lie there too. */
  allowedRoots: string[];
  workspace: string;
  shell: string;
  maxSessions: number;
  /** `UEXEC_MAX_PTYS_PER_SESSION`: terminals one session may hold (default 64; a root server). */
  maxPtysPerSession: number;
  /** `UEXEC_VIEW_MAX_AGE_S`, in ms: how stale a domain's read-only view may get (default 60 s). */
  viewMaxAgeMs: number;
  /** Sandbox profiles, loaded and validated from `profilesDir`. */
  profiles: Map<string, Profile>;
  profilesDir: string;
  /** The egress proxy's settings (`UEXEC_EGRESS_*`). */
  egress: EgressSettings;
  /** The profile used when a request names none (`UEXEC_PROFILE`). */
  defaultProfile: string;
  approvalPolicy: ApprovalPolicy;
  approvalTimeoutMs: number;
  /** HTTP connection limits (UEXEC_HEADER_TIMEOUT_MS, UEXEC_IDLE_TIMEOUT_MS, UEXEC_MAX_CONNECTIONS). */
  connections: ConnectionLimits;

  // MCP front door (issue 12)
  /** `UEXEC_MCP_AGENT`: the agent `deno task mcp` acts as (default: the default agent). */
  mcpAgent: string;
  // History, metrics and logs:
  /** `UEXEC_HISTORY=off` turns the command history off (default on). */
  history: boolean;
  /** `UEXEC_HISTORY_DAYS`: history rows older than this many days are deleted (default 30). */
  historyDays: number;
  /** `UEXEC_HISTORY_MAX_ROWS`: the newest this many rows of each agent are kept (default 10000). */
  historyMaxRows: number;
  /**
   * `UEXEC_HISTORY_MAX_BYTES`: the newest rows of each agent up to this many bytes (command and
   * output tail, plus 512 a row) are kept (default 268435456, 256 MiB).
   */
  historyMaxBytes: number;
  /** `UEXEC_LOG`: json (default), pretty or off. */
  log: LogFormat;
  // Dashboard settings.
  /** `UEXEC_DASHBOARD` (`on`, the default, or `off`): serve the web dashboard at `/`. */
  dashboard: boolean;
  /** `UEXEC_DASHBOARD_SESSION_HOURS` (default 12): how long a browser sign-in lasts. */
  dashboardSessionMs: number;
  /** `UEXEC_DASHBOARD_CODE_MINUTES` (default 5): how long a one-time sign-in link works. */
  dashboardCodeMs: number;
  // Containment settings (issue 11).
  /** `UEXEC_CGROUP_ROOT`: the cgroup v2 hierarchy for session cgroups (default: this host's). */
  cgroupRoot?: string;
  /**
   * `UEXEC_CONTAINMENT`: `auto` (default: cgroups where writable, else process groups, as
   * `/healthz` says), `cgroup` (refuse to start without them) or `process-group`.
   */
  containment: "auto" | "cgroup" | "process-group";
  // Memory and disk bounds (issue 29).
  /** `UEXEC_MEMORY_MAX`: bytes all sessions together may use (default: see {@link memoryShare}). */
  memoryMax: number;
  /** `UEXEC_SESSION_MEMORY_MAX`: a session's memory unless its agent has its own (default half). */
  sessionMemoryMax: number;
  /**
   * `UEXEC_DISK_FLOOR_BYTES`: below this much free space on the workspace's or the state
   * directory's file system, a start is refused with 507 (default 100 MiB; 0 turns it off).
   */
  diskFloorBytes: number;
  // The fleet (issue 33).
  /** This node: `UEXEC_NODE_ID` (default the host name) and `UEXEC_NODE_URL`. */
  node: FleetNodeSettings;
  /** `UEXEC_STORE=postgres://...`: the fleet's shared store; absent: one host, as ever. */
  store?: { url: string; retryMs: number };
}

/** This node's identity in a fleet. */
export interface FleetNodeSettings {
  id: string;
  /** Where the other nodes reach it; absent: its listening address. */
  url?: string;
  /** `UEXEC_NODE_LEASE_MS`: a node silent this long is lost (default 15000). */
  leaseMs: number;
}

const SHIPPED_PROFILES = new URL("../sandbox-profiles", import.meta.url).pathname;

/** A configuration problem; the message names the setting. */
export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ConfigError";
  }
}

/** The command line's settings (`cli.ts` parses them), which take precedence over the environment. */
export interface Flags {
  host?: string;
  port?: string;
}

function integer(name: string, raw: string, min: number, max: number): number {
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || n < min || n > max) {
    throw new ConfigError(
      `${name} must be an integer from ${min} to ${max}, got ${JSON.stringify(raw)}`,
    );
  }
  return n;
}

function list(raw: string | undefined, separator: string): string[] {
  return (raw ?? "").split(separator).map((s) => s.trim()).filter(Boolean);
}

/** A token from the environment: at least 16 printable characters without spaces. */
function secret(name: string, raw: string | undefined): string | undefined {
  if (raw === undefined || raw === "") return undefined;
  if (!/^[\x21-\x7e]{16,4096}$/.test(raw)) {
    throw new ConfigError(`${name} must be 16 to 4096 printable characters without spaces`);
  }
  return raw;
}

/** Read the configuration from the command line's `flags` and `env`. */
export function loadConfig(
  flags: Flags,
  env: Record<string, string | undefined>,
  cwd: string,
): Config {
  if (!LINEAR_ENGINE) {
    throw new ConfigError(`run with --v8-flags=${LINEAR_ENGINE_FLAG} (until patterns need it)`);
  }
  const host = flags.host ?? env.UEXEC_HOST ?? "127.0.0.1";
  const port = integer("port", flags.port ?? env.UEXEC_PORT ?? "8787", 0, 65535);
  const listen = env.UEXEC_LISTEN;
  if (listen !== undefined && listen !== "" && !/^unix:\/./.test(listen)) {
    throw new ConfigError(
      `UEXEC_LISTEN must be unix:/absolute/path, got ${JSON.stringify(listen)}`,
    );
  }
  const workspace = env.UEXEC_WORKSPACE ?? cwd;
  try {
    if (!Deno.statSync(workspace).isDirectory) throw new Error();
  } catch {
    throw new ConfigError(`UEXEC_WORKSPACE ${workspace} is not an existing directory`);
  }
  const profilesDir = env.UEXEC_PROFILES_DIR || SHIPPED_PROFILES;
  let profiles: Map<string, Profile>;
  let approvalPolicy: ApprovalPolicy;
  const egress = egressSettings(env);
  try {
    profiles = withEgressDefaults(loadProfiles(profilesDir), egress);
    approvalPolicy = parseApprovalPolicy(env.UEXEC_APPROVAL_POLICY);
  } catch (err) {
    throw new ConfigError((err as Error).message);
  }
  const defaultProfile = env.UEXEC_PROFILE || "workspace-write";
  for (
    const [setting, name] of [["UEXEC_PROFILE", defaultProfile], ["the profile set", "full-access"]]
  ) {
    if (!profiles.has(name)) {
      throw new ConfigError(`${setting}: profile ${name} not found in ${profilesDir}`);
    }
  }
  const operatorToken = secret("UEXEC_OPERATOR_TOKEN", env.UEXEC_OPERATOR_TOKEN);
  const agentToken = secret("UEXEC_AGENT_TOKEN", env.UEXEC_AGENT_TOKEN || env.UEXEC_TOKEN);
  if (operatorToken !== undefined && operatorToken === agentToken) {
    throw new ConfigError("UEXEC_OPERATOR_TOKEN and UEXEC_AGENT_TOKEN must differ");
  }
  return {
    host,
    port,
    ...(listen ? { unixSocket: listen.slice("unix:".length) } : {}),
    stateDir: stateDirFrom(env, env.HOME || "/root"),
    operatorToken,
    agentToken,
    // A fleet node's own URL is a name its peers call it by.
    allowedHosts: [...list(env.UEXEC_ALLOWED_HOSTS, ","), ...urlHost(env.UEXEC_NODE_URL)],
    allowedOrigins: list(env.UEXEC_ALLOWED_ORIGINS, ","),
    allowedRoots: list(env.UEXEC_ALLOWED_ROOTS, ":").map((root) => {
      try {
        if (!root.startsWith("/") || !Deno.statSync(root).isDirectory) throw new Error();
        return Deno.realPathSync(root);
      } catch {
        throw new ConfigError(`UEXEC_ALLOWED_ROOTS: ${root} is not an existing absolute directory`);
      }
    }),
    workspace: Deno.realPathSync(workspace),
    shell: env.SHELL || "/bin/bash",
    maxSessions: integer("UEXEC_MAX_SESSIONS", env.UEXEC_MAX_SESSIONS ?? "64", 1, 100_000),
    maxPtysPerSession: integer(
      "UEXEC_MAX_PTYS_PER_SESSION",
      env.UEXEC_MAX_PTYS_PER_SESSION ?? String(DEFAULT_MAX_PTYS),
      1,
      4096,
    ),
    viewMaxAgeMs: 1000 *
      integer("UEXEC_VIEW_MAX_AGE_S", env.UEXEC_VIEW_MAX_AGE_S ?? "60", 1, 86_400),
    profiles,
    profilesDir,
    egress,
    defaultProfile,
    approvalPolicy,
    approvalTimeoutMs: integer(
      "UEXEC_APPROVAL_TIMEOUT_MS",
      env.UEXEC_APPROVAL_TIMEOUT_MS ?? "60000",
      1,
      86_400_000,
    ),
    connections: connectionLimits(env),

    // MCP front door (issue 12)
    mcpAgent: env.UEXEC_MCP_AGENT || DEFAULT_AGENT,
    ...observability(env),
    ...dashboardSettings(env),
    ...containmentSettings(env),
    ...boundsSettings(env),
    ...fleetSettings(env),
  };
}

/** The host (with its port) of `url`, when it is one. */
function urlHost(url: string | undefined): string[] {
  try {
    return url ? [new URL(url).host] : [];
  } catch {
    return []; // fleetSettings says what is wrong with it.
  }
}

const NODE_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/;

/** The fleet's settings: the store and this node. */
function fleetSettings(env: Record<string, string | undefined>) {
  const id = env.UEXEC_NODE_ID || Deno.hostname();
  if (!NODE_ID.test(id)) {
    throw new ConfigError(`UEXEC_NODE_ID must match ${NODE_ID}, got ${JSON.stringify(id)}`);
  }
  const url = env.UEXEC_NODE_URL || undefined;
  if (url !== undefined && !/^https?:\/\/[^/\s]+\/?$/.test(url)) {
    throw new ConfigError(
      `UEXEC_NODE_URL must be http(s)://host:port with no path, got ${JSON.stringify(url)}`,
    );
  }
  const store = env.UEXEC_STORE || undefined;
  if (store !== undefined && !/^postgres(ql)?:\/\//.test(store)) {
    // Never echo it: it may hold a password.
    throw new ConfigError("UEXEC_STORE must be a postgres:// or postgresql:// URL");
  }
  if (store !== undefined && env.UEXEC_LISTEN && url === undefined) {
    throw new ConfigError(
      "UEXEC_NODE_URL: a fleet node on a unix socket must say where its peers reach it",
    );
  }
  return {
    node: {
      id,
      ...(url ? { url: url.replace(/\/$/, "") } : {}),
      leaseMs: integer("UEXEC_NODE_LEASE_MS", env.UEXEC_NODE_LEASE_MS ?? "15000", 300, 3_600_000),
    },
    ...(store
      ? {
        store: {
          url: store,
          retryMs: integer(
            "UEXEC_STORE_RETRY_MS",
            env.UEXEC_STORE_RETRY_MS ?? "30000",
            0,
            3_600_000,
          ),
        },
      }
      : {}),
  };
}

/** The egress proxy's settings. */
export interface EgressSettings {
  /** `UEXEC_EGRESS_ALLOW`: the allow list of egress profiles that name none. */
  allow: string[];
  /** `UEXEC_EGRESS_DENY`: the deny list of egress profiles that name none. */
  deny: string[];
  /** `UEXEC_EGRESS_HOSTS`: a file in /etc/hosts form the proxy reads before DNS. */
  hostsFile?: string;
  /** `UEXEC_EGRESS_ALLOW_PRIVATE`: private ranges the proxy may dial after all. */
  allowPrivate: Cidr[];
}

function egressSettings(env: Record<string, string | undefined>): EgressSettings {
  const patterns = (name: string) =>
    list(env[name], ",").map((pattern) => {
      const problem = patternProblem(pattern);
      if (problem) throw new ConfigError(`${name}: ${problem}`);
      return pattern;
    });
  const hostsFile = env.UEXEC_EGRESS_HOSTS || undefined;
  if (hostsFile !== undefined) {
    try {
      Deno.readTextFileSync(hostsFile);
    } catch (err) {
      throw new ConfigError(`UEXEC_EGRESS_HOSTS: cannot read ${hostsFile}: ${err}`);
    }
  }
  return {
    allow: patterns("UEXEC_EGRESS_ALLOW"),
    deny: patterns("UEXEC_EGRESS_DENY"),
    hostsFile,
    allowPrivate: list(env.UEXEC_EGRESS_ALLOW_PRIVATE, ",").map((cidr) => {
      try {
        return parseCidr(cidr);
      } catch (err) {
        throw new ConfigError(`UEXEC_EGRESS_ALLOW_PRIVATE: ${(err as Error).message}`);
      }
    }),
  };
}

/** The history, metrics and logs settings. */
function observability(env: Record<string, string | undefined>) {
  const history = env.UEXEC_HISTORY ?? "on";
  if (history !== "on" && history !== "off") {
    throw new ConfigError(`UEXEC_HISTORY must be on or off, got ${JSON.stringify(history)}`);
  }
  const log = env.UEXEC_LOG || "json";
  if (!(LOG_FORMATS as readonly string[]).includes(log)) {
    throw new ConfigError(
      `UEXEC_LOG must be one of ${LOG_FORMATS.join(", ")}, got ${JSON.stringify(log)}`,
    );
  }
  return {
    history: history === "on",
    historyDays: integer("UEXEC_HISTORY_DAYS", env.UEXEC_HISTORY_DAYS ?? "30", 1, 36_500),
    historyMaxRows: integer(
      "UEXEC_HISTORY_MAX_ROWS",
      env.UEXEC_HISTORY_MAX_ROWS ?? "10000",
      1,
      100_000_000,
    ),
    historyMaxBytes: integer(
      "UEXEC_HISTORY_MAX_BYTES",
      env.UEXEC_HISTORY_MAX_BYTES ?? String(256 * 1024 * 1024),
      4096,
      Number.MAX_SAFE_INTEGER,
    ),
    log: log as LogFormat,
  };
}

/** The dashboard's settings. */
function dashboardSettings(
  env: Record<string, string | undefined>,
): Pick<Config, "dashboard" | "dashboardSessionMs" | "dashboardCodeMs"> {
  const dashboard = env.UEXEC_DASHBOARD || "on";
  if (dashboard !== "on" && dashboard !== "off") {
    throw new ConfigError(`UEXEC_DASHBOARD must be on or off, got ${JSON.stringify(dashboard)}`);
  }
  const hours = integer(
    "UEXEC_DASHBOARD_SESSION_HOURS",
    env.UEXEC_DASHBOARD_SESSION_HOURS ?? "12",
    1,
    720,
  );
  const minutes = integer(
    "UEXEC_DASHBOARD_CODE_MINUTES",
    env.UEXEC_DASHBOARD_CODE_MINUTES ?? "5",
    1,
    60,
  );
  return {
    dashboard: dashboard === "on",
    dashboardSessionMs: hours * 3_600_000,
    dashboardCodeMs: minutes * 60_000,
  };
}

/** The containment settings. */
function containmentSettings(
  env: Record<string, string | undefined>,
): Pick<Config, "cgroupRoot" | "containment"> {
  const containment = env.UEXEC_CONTAINMENT || "auto";
  if (containment !== "auto" && containment !== "cgroup" && containment !== "process-group") {
    throw new ConfigError(
      `UEXEC_CONTAINMENT must be auto, cgroup or process-group, got ${JSON.stringify(containment)}`,
    );
  }
  return { cgroupRoot: env.UEXEC_CGROUP_ROOT || undefined, containment };
}

/** The largest byte count a setting takes (2^53 - 1: exact in a double). */
const MAX_BYTES = Number.MAX_SAFE_INTEGER;
/** The smallest memory cap: a shell and a few tools. */
const MIN_MEMORY = 16 << 20;
/** What the host and the server keep out of the sessions' share at the least. */
const HOST_RESERVE = 1 << 30;

/**
 * The default memory cap of all sessions together: three quarters of the host's memory, but
 * never more than all of it less {@link HOST_RESERVE}, so that the server, the history and the
 * host keep room whatever the sessions do (at least {@link MIN_MEMORY}).
 */
export function memoryShare(memTotal: number): number {
  return Math.max(MIN_MEMORY, Math.min(Math.floor(memTotal * 0.75), memTotal - HOST_RESERVE));
}

/** The memory and disk bounds. */
function boundsSettings(
  env: Record<string, string | undefined>,
): Pick<Config, "memoryMax" | "sessionMemoryMax" | "diskFloorBytes"> {
  const memoryMax = env.UEXEC_MEMORY_MAX
    ? integer("UEXEC_MEMORY_MAX", env.UEXEC_MEMORY_MAX, MIN_MEMORY, MAX_BYTES)
    : memoryShare(Deno.systemMemoryInfo().total);
  const sessionMemoryMax = env.UEXEC_SESSION_MEMORY_MAX
    ? integer("UEXEC_SESSION_MEMORY_MAX", env.UEXEC_SESSION_MEMORY_MAX, MIN_MEMORY, memoryMax)
    : Math.max(MIN_MEMORY, Math.floor(memoryMax / 2));
  return {
    memoryMax,
    sessionMemoryMax,
    diskFloorBytes: integer(
      "UEXEC_DISK_FLOOR_BYTES",
      env.UEXEC_DISK_FLOOR_BYTES ?? `${100 << 20}`,
      0,
      MAX_BYTES,
    ),
  };
}

/**
 * The HTTP connection limits (UEXEC_HEADER_TIMEOUT_MS, UEXEC_IDLE_TIMEOUT_MS,
 * UEXEC_MAX_CONNECTIONS, UEXEC_MAX_CONNECTIONS_PER_PEER: by default half the cap, so that no one
 * peer can take it all).
 */
function connectionLimits(env: Record<string, string | undefined>): ConnectionLimits {
  const maxConnections = integer(
    "UEXEC_MAX_CONNECTIONS",
    env.UEXEC_MAX_CONNECTIONS ?? "512",
    1,
    1_000_000,
  );
  return {
    headerTimeoutMs: integer(
      "UEXEC_HEADER_TIMEOUT_MS",
      env.UEXEC_HEADER_TIMEOUT_MS ?? "10000",
      1,
      3_600_000,
    ),
    idleTimeoutMs: integer(
      "UEXEC_IDLE_TIMEOUT_MS",
      env.UEXEC_IDLE_TIMEOUT_MS ?? "30000",
      1,
      3_600_000,
    ),
    maxConnections,
    maxPerPeer: integer(
      "UEXEC_MAX_CONNECTIONS_PER_PEER",
      env.UEXEC_MAX_CONNECTIONS_PER_PEER ?? String(Math.max(1, Math.floor(maxConnections / 2))),
      1,
      1_000_000,
    ),
  };
}
