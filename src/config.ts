/**
 * Server configuration from flags and environment, validated up front: a bad value stops the
 * server with a message naming it. It must never start on a non-loopback address without a
 * token.
 *
 * @module
 */

import { type ApprovalPolicy, parseApprovalPolicy } from "./approvals/policy.ts";
import type { ConnectionLimits } from "./http/listener.ts";
import { loadProfiles, type Profile } from "./sandbox/profiles.ts";

/** The server's settings. */
export interface Config {
  host: string;
  port: number;
  token?: string;
  workspace: string;
  shell: string;
  maxSessions: number;
  /** Sandbox profiles, loaded and validated from `profilesDir`. */
  profiles: Map<string, Profile>;
  profilesDir: string;
  /** The profile used when a request names none (`UEXEC_PROFILE`). */
  defaultProfile: string;
  approvalPolicy: ApprovalPolicy;
  approvalTimeoutMs: number;
  /** HTTP connection limits (UEXEC_HEADER_TIMEOUT_MS, UEXEC_IDLE_TIMEOUT_MS, UEXEC_MAX_CONNECTIONS). */
  connections: ConnectionLimits;
}

const SHIPPED_PROFILES = new URL("../sandbox-profiles", import.meta.url).pathname;

/** A configuration problem; the message names the setting. */
export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ConfigError";
  }
}

/** True for loopback hosts (127.0.0.0/8, ::1, localhost). */
export function isLoopback(host: string): boolean {
  return host === "localhost" || host === "::1" || host === "[::1]" ||
    /^127(\.\d{1,3}){3}$/.test(host);
}

function flag(args: string[], name: string): string | undefined {
  for (let i = 0; i < args.length; i++) {
    if (args[i] === `--${name}`) {
      if (i + 1 >= args.length) throw new ConfigError(`--${name} needs a value`);
      return args[i + 1];
    }
    if (args[i].startsWith(`--${name}=`)) return args[i].slice(name.length + 3);
  }
  return undefined;
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

const KNOWN_FLAGS = ["host", "port"];

/** Read the configuration from `args` and `env`. */
export function loadConfig(
  args: string[],
  env: Record<string, string | undefined>,
  cwd: string,
): Config {
  for (const arg of args) {
    const name = /^--([^=]+)/.exec(arg)?.[1];
    if (arg.startsWith("--") && !KNOWN_FLAGS.includes(name ?? "")) {
      throw new ConfigError(`unknown flag ${arg}; known flags: --host, --port`);
    }
  }
  const host = flag(args, "host") ?? env.UEXEC_HOST ?? "127.0.0.1";
  const port = integer("port", flag(args, "port") ?? env.UEXEC_PORT ?? "8787", 0, 65535);
  const token = env.UEXEC_TOKEN || undefined;
  if (!isLoopback(host) && !token) {
    throw new ConfigError(`refusing to listen on non-loopback host ${host} without UEXEC_TOKEN`);
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
  try {
    profiles = loadProfiles(profilesDir);
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
  return {
    host,
    port,
    token,
    workspace: Deno.realPathSync(workspace),
    shell: env.SHELL || "/bin/bash",
    maxSessions: integer("UEXEC_MAX_SESSIONS", env.UEXEC_MAX_SESSIONS ?? "64", 1, 100_000),
    profiles,
    profilesDir,
    defaultProfile,
    approvalPolicy,
    approvalTimeoutMs: integer(
      "UEXEC_APPROVAL_TIMEOUT_MS",
      env.UEXEC_APPROVAL_TIMEOUT_MS ?? "60000",
      1,
      86_400_000,
    ),
    connections: {
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
      maxConnections: integer(
        "UEXEC_MAX_CONNECTIONS",
        env.UEXEC_MAX_CONNECTIONS ?? "512",
        1,
        1_000_000,
      ),
    },
  };
}
