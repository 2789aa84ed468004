/**
 * Every setting uexec reads from its environment, in one table: its name, the flag that overrides
 * it (where there is one), its default and what it does, in one line. `serve --help` prints this
 * table, and `docs/configuration.md` holds the same rows (`tests/unit/config_docs_test.ts` compares
 * them, and fails on a `UEXEC_*` name read in `src/` that is missing here). It only describes:
 * parsing and validating the values is `config.ts`'s job, and nothing here reads the environment.
 *
 * @module
 */

/** One setting. Text may hold Markdown code spans (`` `x` ``); `--help` prints them plain. */
export interface Setting {
  /** The environment variable (`UEXEC_*`). */
  readonly name: string;
  /** Other names it is read under. */
  readonly aliases?: readonly string[];
  /** The command-line flag that takes precedence over it, without its dashes. */
  readonly flag?: string;
  /** The default, as a person reads it. */
  readonly default: string;
  /** What it does, in one line. */
  readonly description: string;
}

/** Every setting, in the order the docs list them. */
export const SETTINGS: readonly Setting[] = [
  {
    name: "UEXEC_HOST",
    flag: "host",
    default: "127.0.0.1",
    description: "listen address",
  },
  {
    name: "UEXEC_PORT",
    flag: "port",
    default: "8787",
    description: "port (0 picks one; the server prints `uexec listening on …`)",
  },
  {
    name: "UEXEC_LISTEN",
    default: "unset",
    description: "`unix:/path`: serve on a unix socket created 0600 instead of TCP",
  },
  {
    name: "UEXEC_STATE_DIR",
    default: "`$XDG_STATE_HOME/uexec` or `~/.local/state/uexec`",
    description: "tokens and agents; created 0700, refused if others can read it",
  },
  {
    name: "UEXEC_OPERATOR_TOKEN",
    default: "`operator.token`",
    description: "the operator's token (16+ printable characters) instead of the generated file",
  },
  {
    name: "UEXEC_AGENT_TOKEN",
    aliases: ["UEXEC_TOKEN"],
    default: "`agent.token`",
    description: "the `default` agent's token instead of the generated file",
  },
  {
    name: "UEXEC_ALLOWED_HOSTS",
    default: "unset",
    description: "comma-separated `Host` names accepted besides loopback ones",
  },
  {
    name: "UEXEC_ALLOWED_ORIGINS",
    default: "unset",
    description:
      "comma-separated origins accepted (and sent CORS headers) besides the server's own",
  },
  {
    name: "UEXEC_WORKSPACE",
    default: "the server's cwd",
    description: "base for relative workdirs; workdirs must lie inside it",
  },
  {
    name: "UEXEC_ALLOWED_ROOTS",
    default: "unset",
    description: "colon-separated directories workdirs may lie in besides the workspace",
  },
  {
    name: "UEXEC_MAX_SESSIONS",
    default: "64",
    description: "live sessions per agent before pruning (an agent's `max_sessions` overrides it)",
  },
  {
    name: "UEXEC_PROFILE",
    default: "workspace-write",
    description: "default profile",
  },
  {
    name: "UEXEC_PROFILES_DIR",
    default: "`sandbox-profiles/`",
    description: "where profiles are loaded from",
  },
  {
    name: "UEXEC_APPROVAL_POLICY",
    default: "on-request",
    description: "`never`, `on-failure`, `on-request` or `untrusted`: when the operator is asked",
  },
  {
    name: "UEXEC_APPROVAL_TIMEOUT_MS",
    default: "60000",
    description: "undecided approvals are denied after this",
  },
  {
    name: "UEXEC_UID_RANGE",
    default: "a free block of the default pool",
    description: "uids of sessions (one each; the first is the spawners') when the server is root",
  },
  {
    name: "UEXEC_SANDBOX_GID",
    default: "first of the range",
    description: "the group every session runs in; the workspace ACL grants it",
  },
  {
    name: "UEXEC_MAX_PTYS_PER_SESSION",
    default: "64",
    description: "pseudo-terminals one session may hold, its own included (root server; 1 to 4096)",
  },
  {
    name: "UEXEC_VIEW_MAX_AGE_S",
    default: "60",
    description:
      "a root server's sandbox domain gets a fresh mount view for new commands after this (1 to 86400)",
  },
  {
    name: "UEXEC_HEADER_TIMEOUT_MS",
    default: "10000",
    description: "a connection's first request head must be complete within this",
  },
  {
    name: "UEXEC_IDLE_TIMEOUT_MS",
    default: "30000",
    description: "a connection with nothing in flight is closed after this",
  },
  {
    name: "UEXEC_MAX_CONNECTIONS",
    default: "512",
    description: "connections served at once; more are answered 503 `overloaded`",
  },
  {
    name: "UEXEC_MAX_CONNECTIONS_PER_PEER",
    default: "half of `UEXEC_MAX_CONNECTIONS`",
    description: "connections at once from one peer (a local uid, a remote address); more are 503",
  },
  {
    name: "UEXEC_MCP_AGENT",
    default: "default",
    description: "the agent `deno task mcp` (MCP over stdio) acts as",
  },
  {
    name: "UEXEC_LOG",
    default: "json",
    description:
      "`json`: a JSON line per event on stderr; `pretty`: `key=value` text; `off`: nothing",
  },
  {
    name: "UEXEC_DASHBOARD",
    default: "on",
    description: "`off`: no dashboard at `/` and no sign-in link at start-up",
  },
  {
    name: "UEXEC_DASHBOARD_SESSION_HOURS",
    default: "12",
    description: "how long a dashboard browser session lasts (1 to 720)",
  },
  {
    name: "UEXEC_DASHBOARD_CODE_MINUTES",
    default: "5",
    description: "how long a one-time sign-in link works (1 to 60)",
  },
  {
    name: "UEXEC_CONTAINMENT",
    default: "auto",
    description: "`auto`: a cgroup per session where writable; `cgroup`: required; `process-group`",
  },
  {
    name: "UEXEC_CGROUP_ROOT",
    default: "`/sys/fs/cgroup` or `/sys/fs/cgroup/unified`",
    description: "the cgroup v2 hierarchy session cgroups are made in (beneath `uexec/`)",
  },
  {
    name: "UEXEC_HISTORY",
    default: "on",
    description: "`off`: no command history (its routes answer 404)",
  },
  {
    name: "UEXEC_HISTORY_DAYS",
    default: "30",
    description: "history rows older than this are deleted",
  },
  {
    name: "UEXEC_HISTORY_MAX_ROWS",
    default: "10000",
    description: "history rows kept per agent (newest first)",
  },
  {
    name: "UEXEC_HISTORY_MAX_BYTES",
    default: "268435456",
    description: "history bytes kept per agent (command and output tail, plus 512 a row)",
  },
  {
    name: "UEXEC_MEMORY_MAX",
    default: "¾ of the host's memory, at most all but 1 GiB",
    description: "bytes all sessions together may use (the instance's memory cgroup), min 16 MiB",
  },
  {
    name: "UEXEC_SESSION_MEMORY_MAX",
    default: "half of `UEXEC_MEMORY_MAX`",
    description: "bytes one session may use unless its agent has `max_memory_bytes`",
  },
  {
    name: "UEXEC_DISK_FLOOR_BYTES",
    default: "104857600 (100 MiB)",
    description:
      "below this free on the workspace's or state's file system, starts are 507; 0: off",
  },
  {
    name: "UEXEC_EGRESS_ALLOW",
    default: "unset (nothing)",
    description: "comma-separated host patterns egress profiles without their own list allow",
  },
  {
    name: "UEXEC_EGRESS_DENY",
    default: "unset",
    description: "comma-separated host patterns they refuse (deny wins)",
  },
  {
    name: "UEXEC_EGRESS_HOSTS",
    default: "unset",
    description: "a file in `/etc/hosts` form the egress proxy reads before DNS",
  },
  {
    name: "UEXEC_EGRESS_ALLOW_PRIVATE",
    default: "unset",
    description: "comma-separated CIDRs the egress proxy may dial although private or loopback",
  },
  {
    name: "UEXEC_STORE",
    default: "unset (one host: state dir and SQLite)",
    description: "`postgres://...`: the fleet's shared store (docs/fleet-store.md)",
  },
  {
    name: "UEXEC_STORE_RETRY_MS",
    default: "30000",
    description: "how long a write waits for a store that is away, then 503 `store_unavailable`",
  },
  {
    name: "UEXEC_NODE_ID",
    default: "the host name",
    description: "this node's id in the fleet; every session carries it as `node`",
  },
  {
    name: "UEXEC_NODE_URL",
    default: "its listening address",
    description: "`http(s)://host:port` other nodes forward calls for its sessions to",
  },
  {
    name: "UEXEC_NODE_LEASE_MS",
    default: "15000",
    description: "a node silent this long is lost: its sessions answer 410 `node_lost`",
  },
  {
    name: "UEXEC_FLEET_PORT",
    default: "8787",
    description: "`deno task fleet`: the router's port, 0 any free one (docs/fleet.md)",
  },
  {
    name: "UEXEC_FLEET_DIR",
    default: "a new temporary directory",
    description: "`deno task fleet`: where its PostgreSQL, nginx and nodes keep their files",
  },
];

/** The setting's first column in the docs' table: its flag, its name and its aliases. */
export function settingLabel(setting: Setting): string {
  const flag = setting.flag ? `\`--${setting.flag}\` / ` : "";
  const aliases = setting.aliases?.length
    ? ` (alias ${setting.aliases.map((alias) => `\`${alias}\``).join(", ")})`
    : "";
  return `${flag}\`${setting.name}\`${aliases}`;
}

/** Markdown code spans as plain text, for a terminal. */
function plain(text: string): string {
  return text.replaceAll("`", "");
}

/** The settings as `--help` prints them: each name with its default, then what it does. */
export function settingsHelp(): string {
  return SETTINGS.map((setting) =>
    `  ${plain(settingLabel(setting))}  (default: ${plain(setting.default)})\n` +
    `      ${plain(setting.description)}`
  ).join("\n");
}
