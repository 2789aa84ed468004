/**
 * Sandbox profiles: the JSON data files in `sandbox-profiles/`, validated at start-up, and their
 * resolution into a {@link ResolvedPolicy} for one session.
 *
 * Path templates in a profile may start with `{workdir}` (the session's working directory),
 * `{tmp}` (its private temp dir), `{home}` or `~` (both: the home directory of the user the
 * SERVER runs as, e.g. `/root`, so `~/.ssh` protects the server's keys even when children run
 * as another uid), and may contain `{server_pid}` as a whole path component.
 *
 * This module only reads profile files and computes paths lexically (no symlink resolution: the
 * caller passes canonical context paths). It must never apply a sandbox, and it must never
 * return a profile that failed validation: a broken file is a {@link ProfileError}.
 *
 * @module
 */

import { z } from "zod";
import type { NetworkMode, ResolvedPolicy, ResourceLimits } from "./policy.ts";
import { type EgressRules, patternProblem } from "../../egress/rules.ts";

/** A deny-read entry that applies only in some situations. */
export interface ConditionalPath {
  path: string;
  /** `child-not-root`: only when the sandboxed child does not run as uid 0. */
  when: "child-not-root";
}

/** A validated profile, before resolution. Paths are still templates. */
export interface Profile {
  /** The file's base name without `.json`. */
  name: string;
  description: string;
  enforce: boolean;
  readableRoots: string[];
  writableRoots: string[];
  /** Relative paths, applied beneath every writable root. */
  readOnlySubpaths: string[];
  denyRead: (string | ConditionalPath)[];
  /**
   * Deny-read entries lifted by an approved widening (absolute, as resolved): never in a
   * profile file, only in a widened profile (widening.ts).
   */
  liftedDenyRead?: string[];
  network: NetworkMode;
  tcpPorts?: number[];
  /** Pathname unix sockets (or directories of them) that stay reachable; templates. */
  unixSockets?: string[];
  /**
   * The egress proxy's rules (network `loopback` only). A list the file leaves out is the
   * server's default (`UEXEC_EGRESS_ALLOW`, `UEXEC_EGRESS_DENY`), filled in by
   * {@link withEgressDefaults}.
   */
  egress?: EgressRules;
  limits: ResourceLimits;
}

/** What a profile is resolved against: one session on this server. */
export interface ResolveContext {
  workdir: string;
  tmp: string;
  /** Home of the user the server runs as (expands `{home}` and `~`). */
  home: string;
  serverPid: number;
  childIsRoot: boolean;
}

/** A profile file that cannot be used; names the file and, when known, the field. */
export class ProfileError extends Error {
  constructor(
    readonly file: string,
    readonly field: string | undefined,
    detail: string,
  ) {
    super(`invalid sandbox profile ${file}${field ? `: field "${field}"` : ""}: ${detail}`);
    this.name = "ProfileError";
  }
}

const PROFILE_NAME = /^[a-z0-9][a-z0-9_-]*$/;
const LEADING_PLACEHOLDER = /^(?:\{workdir\}|\{tmp\}|\{home\}|~)(?=\/|$)/;
const COMPONENT_PLACEHOLDER = "{server_pid}";

/** Why a root or deny-read template is unusable, or undefined when it is fine. */
function pathTemplateProblem(template: string): string | undefined {
  const rest = template.replace(LEADING_PLACEHOLDER, "");
  if (rest === template && !template.startsWith("/")) {
    return "must be absolute or start with {workdir}, {tmp}, {home} or ~";
  }
  return componentProblem(rest.split("/"), `only ${COMPONENT_PLACEHOLDER} may appear here`);
}

/** Why a read-only subpath is unusable, or undefined when it is fine. */
function subpathProblem(subpath: string): string | undefined {
  if (subpath === "" || subpath.startsWith("/")) {
    return "must be a non-empty path relative to each writable root";
  }
  return componentProblem(subpath.split("/"), "placeholders are not allowed in subpaths");
}

function componentProblem(parts: string[], placeholderHint: string): string | undefined {
  for (const part of parts) {
    if (part === "." || part === "..") return `"${part}" path components are not allowed`;
    if (/[{}]/.test(part) && part !== COMPONENT_PLACEHOLDER || part.startsWith("~")) {
      return `unknown or misplaced placeholder in "${part}" (${placeholderHint})`;
    }
  }
  return undefined;
}

function checked(problemOf: (value: string) => string | undefined) {
  return z.string().superRefine((value, ctx) => {
    const problem = problemOf(value);
    if (problem) ctx.addIssue({ code: "custom", message: problem });
  });
}

const pathTemplate = checked(pathTemplateProblem);

const profileFileSchema = z.strictObject({
  description: z.string().min(1),
  enforce: z.boolean(),
  readable_roots: z.array(pathTemplate),
  writable_roots: z.array(pathTemplate),
  read_only_subpaths: z.array(checked(subpathProblem)),
  deny_read: z.array(
    z.union([
      pathTemplate,
      z.strictObject({ path: pathTemplate, when: z.literal("child-not-root") }),
    ]),
  ),
  network: z.enum(["none", "loopback", "all"]),
  tcp_ports: z.array(z.number().int().min(1).max(65535)).min(1).optional(),
  unix_sockets: z.array(pathTemplate).min(1).optional(),
  egress: z.strictObject({
    allow: z.array(checked(patternProblem)).optional(),
    deny: z.array(checked(patternProblem)).optional(),
    methods: z.enum(["all", "read-only"]).default("all"),
  }).optional(),
  limits: z.strictObject({
    max_processes: z.number().int().positive().optional(),
    max_file_size_bytes: z.number().int().positive().optional(),
    cpu_seconds: z.number().int().positive().optional(),
    address_space_bytes: z.number().int().positive().optional(),
  }),
}).superRefine((profile, ctx) => {
  if (profile.tcp_ports && profile.network === "none") {
    ctx.addIssue({
      code: "custom",
      path: ["tcp_ports"],
      message: 'a port list needs network "loopback" or "all"',
    });
  }
  if (profile.egress && profile.network !== "loopback") {
    ctx.addIssue({
      code: "custom",
      path: ["egress"],
      message: 'egress needs network "loopback" (the proxy is the namespace\'s only way out)',
    });
  }
});

type ZodIssue = z.core.$ZodIssue;

function fieldOf(issue: ZodIssue): string {
  const path = issue.code === "unrecognized_keys" ? [...issue.path, issue.keys[0]] : issue.path;
  return path.reduce<string>(
    (field, key) =>
      typeof key === "number"
        ? `${field}[${key}]`
        : field
        ? `${field}.${String(key)}`
        : String(key),
    "",
  );
}

function withoutUndefined<T extends object>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;
}

/** Validates one profile file's text. `file` is used for the name and in errors. */
export function parseProfile(file: string, text: string): Profile {
  const name = file.split("/").pop()!.replace(/\.json$/, "");
  if (!PROFILE_NAME.test(name)) {
    throw new ProfileError(file, undefined, `profile name "${name}" must match ${PROFILE_NAME}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new ProfileError(file, undefined, `not valid JSON: ${(err as Error).message}`);
  }
  const parsed = profileFileSchema.safeParse(json);
  if (!parsed.success) {
    const [first] = parsed.error.issues;
    const detail = parsed.error.issues.map((i) => `${fieldOf(i) || "(root)"}: ${i.message}`);
    throw new ProfileError(file, fieldOf(first) || "(root)", detail.join("; "));
  }
  const p = parsed.data;
  return {
    name,
    description: p.description,
    enforce: p.enforce,
    readableRoots: p.readable_roots,
    writableRoots: p.writable_roots,
    readOnlySubpaths: p.read_only_subpaths,
    denyRead: p.deny_read,
    network: p.network,
    ...(p.tcp_ports ? { tcpPorts: p.tcp_ports } : {}),
    ...(p.unix_sockets ? { unixSockets: p.unix_sockets } : {}),
    ...(p.egress
      ? {
        egress: {
          allow: p.egress.allow ?? UNSET,
          deny: p.egress.deny ?? UNSET,
          methods: p.egress.methods,
        },
      }
      : {}),
    limits: withoutUndefined({
      maxProcesses: p.limits.max_processes,
      maxFileSizeBytes: p.limits.max_file_size_bytes,
      cpuSeconds: p.limits.cpu_seconds,
      addressSpaceBytes: p.limits.address_space_bytes,
    }),
  };
}

/** A list a profile file left out: the server's default list until filled in. */
const UNSET: string[] = Object.freeze([]) as unknown as string[];

/**
 * The profiles with the server's default allow and deny lists in place of the lists their
 * files leave out (`UEXEC_EGRESS_ALLOW`, `UEXEC_EGRESS_DENY`).
 */
export function withEgressDefaults(
  profiles: Map<string, Profile>,
  defaults: { allow: string[]; deny: string[] },
): Map<string, Profile> {
  return new Map(
    [...profiles].map(([name, p]) => {
      if (!p.egress) return [name, p];
      const allow = p.egress.allow === UNSET ? [...defaults.allow] : p.egress.allow;
      const deny = p.egress.deny === UNSET ? [...defaults.deny] : p.egress.deny;
      return [name, { ...p, egress: { ...p.egress, allow, deny } }];
    }),
  );
}

/**
 * Loads and validates every `*.json` file in `dir`, keyed by profile name. Throws a
 * {@link ProfileError} for the first broken file, or when the directory holds no profile.
 */
export function loadProfiles(dir: string): Map<string, Profile> {
  let names: string[];
  try {
    names = [...Deno.readDirSync(dir)]
      .filter((entry) => entry.isFile && entry.name.endsWith(".json"))
      .map((entry) => entry.name.slice(0, -".json".length))
      .sort();
  } catch (err) {
    throw new ProfileError(dir, undefined, `cannot read the profile directory: ${err}`);
  }
  if (names.length === 0) throw new ProfileError(dir, undefined, "no *.json profile found");
  const profiles = new Map<string, Profile>();
  for (const name of names) {
    const file = `${dir.replace(/\/+$/, "")}/${name}.json`;
    const profile = parseProfile(file, Deno.readTextFileSync(file));
    profiles.set(profile.name, profile);
  }
  return profiles;
}

/** Normalises an absolute path lexically: no `.`, `..`, repeated or trailing slashes. */
export function normalizeAbsolutePath(path: string): string {
  if (!path.startsWith("/")) throw new Error(`not an absolute path: ${JSON.stringify(path)}`);
  const parts: string[] = [];
  for (const part of path.split("/")) {
    if (part === "" || part === ".") continue;
    if (part === "..") parts.pop();
    else parts.push(part);
  }
  return `/${parts.join("/")}`;
}

/** True when `path` is `root` itself or lies beneath it (both normalised). */
export function isWithin(path: string, root: string): boolean {
  return path === root || path.startsWith(root === "/" ? "/" : `${root}/`);
}

function unique(paths: string[]): string[] {
  return [...new Set(paths)];
}

function expandTemplate(template: string, ctx: ResolveContext): string {
  const expanded = template
    .replace(LEADING_PLACEHOLDER, (placeholder) => {
      if (placeholder === "{workdir}") return ctx.workdir;
      if (placeholder === "{tmp}") return ctx.tmp;
      return ctx.home;
    })
    .replaceAll(COMPONENT_PLACEHOLDER, String(ctx.serverPid));
  return normalizeAbsolutePath(expanded);
}

function checkContext(ctx: ResolveContext): void {
  for (const key of ["workdir", "tmp", "home"] as const) {
    if (!ctx[key].startsWith("/")) {
      throw new Error(`resolveProfile: ${key} must be absolute, got ${JSON.stringify(ctx[key])}`);
    }
  }
  if (!Number.isInteger(ctx.serverPid) || ctx.serverPid <= 0) {
    throw new Error(`resolveProfile: serverPid must be a positive integer, got ${ctx.serverPid}`);
  }
}

/**
 * Resolves a profile for one session: placeholders expanded, paths absolute and normalised,
 * exact duplicates dropped, order kept. Nested entries are kept on purpose: the policy reads
 * "the most specific entry wins" (a writable root beneath a deny-read path stays usable; a
 * deny-read path beneath a root stays hidden), so pruning would change its meaning.
 */
export function resolveProfile(profile: Profile, ctx: ResolveContext): ResolvedPolicy {
  checkContext(ctx);
  const expand = (template: string) => expandTemplate(template, ctx);
  const writable = profile.writableRoots.map(expand);
  // A writable root named exactly (an approved `.git`) is the most specific grant for itself.
  const readOnly = writable.flatMap((root) =>
    profile.readOnlySubpaths.map((sub) => normalizeAbsolutePath(`${root}/${sub}`))
  ).filter((path) => !writable.includes(path));
  const denyRead = profile.denyRead
    .filter((entry) => typeof entry === "string" || !ctx.childIsRoot)
    .map((entry) => expand(typeof entry === "string" ? entry : entry.path))
    .filter((path) => !profile.liftedDenyRead?.includes(path));
  return {
    profile: profile.name,
    enforce: profile.enforce,
    readableRoots: unique(profile.readableRoots.map(expand)),
    writableRoots: unique(writable),
    readOnlySubpaths: unique(readOnly),
    denyRead: unique(denyRead),
    network: profile.network,
    ...(profile.tcpPorts ? { tcpPorts: [...profile.tcpPorts] } : {}),
    ...(profile.unixSockets ? { unixSockets: unique(profile.unixSockets.map(expand)) } : {}),
    ...(profile.egress
      ? {
        egress: {
          allow: unique(profile.egress.allow),
          deny: unique(profile.egress.deny),
          methods: profile.egress.methods,
          ...(profile.egress.cap ? { cap: unique(profile.egress.cap) } : {}),
        },
      }
      : {}),
    limits: { ...profile.limits },
  };
}
