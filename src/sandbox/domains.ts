/**
 * Sandbox domains: a profile resolved for a workdir and uid, the unit one spawner worker is
 * restricted to and shared by. A domain owns a private directory (the profile's `{tmp}`, owned
 * by the sandbox uid); each session gets its own HOME and TMPDIR beneath it. The workspace is
 * made usable for the sandbox uid once per domain.
 *
 * Sessions of one domain share a Landlock domain, so they can reach each other's temp
 * directories; sessions of different domains cannot. This module must never hand out an
 * enforcing choice whose preparation failed: it throws `SandboxUnavailableError` instead.
 *
 * @module
 */

import { InvalidRequestError } from "../sessions/errors.ts";
import type { Restriction } from "../workers/pool.ts";
import { existingPaths } from "./fsinfo.ts";
import {
  assertReachable,
  createPrivateDir,
  prepareWorkdir,
  type PrivateDir,
  privateEnv,
  removePrivateDir,
  type SandboxIdentity,
  sandboxIdentity,
} from "./identity.ts";
import { withLimits } from "./limits.ts";
import type { ResolvedPolicy } from "./policy.ts";
import { isWithin, type Profile, resolveProfile } from "./profiles.ts";

/** The profile that means "no sandbox". */
export const FULL_ACCESS = "full-access";

/** How one session is sandboxed. */
export interface SandboxChoice {
  profile: string;
  policy: ResolvedPolicy;
  /** The spawner worker domain key. */
  domain: string;
  /** How that worker restricts itself; undefined when nothing is enforced. */
  restriction?: Restriction;
  /** Wrap the argv (resource limits). */
  wrap(argv: string[]): string[];
  /** Per-session environment (HOME, TMPDIR); call `release` when the session ends. */
  session(): { env: Record<string, string>; release(): void };
}

/** Settings of the domain registry. */
export interface DomainOptions {
  profiles: Map<string, Profile>;
  /** Home of the server's user: what `~` means in profiles. */
  home: string;
  serverPid: number;
  /** The server's workspace: prepared as a whole for workdirs inside it. */
  workspace: string;
}

interface Domain {
  root: PrivateDir;
  policy: ResolvedPolicy;
  /** A session directory made ahead of time, so the next session does not wait for it. */
  spare?: PrivateDir;
}

const NO_SESSION_DIR = { env: {}, release() {} };

/** Resolves profiles into domains and owns their private directories. */
export class SandboxDomains {
  #opts: DomainOptions;
  #identity?: SandboxIdentity | null;
  #domains = new Map<string, Domain>();
  #prepared = false;
  #closed = false;

  constructor(opts: DomainOptions) {
    this.#opts = opts;
  }

  /** Names of the loaded profiles. */
  get names(): string[] {
    return [...this.#opts.profiles.keys()];
  }

  /** The sandbox for a session of profile `name` in `workdir`. */
  choose(name: string, workdir: string): SandboxChoice {
    const profile = this.#opts.profiles.get(name);
    if (!profile) {
      throw new InvalidRequestError(
        `profile: unknown profile ${JSON.stringify(name)}; known: ${this.names.join(", ")}`,
      );
    }
    if (!profile.enforce) return this.#unenforced(name, profile, workdir);
    const identity = this.#sandboxIdentity();
    const key = JSON.stringify([name, workdir, identity?.uid ?? null]);
    const domain = this.#domains.get(key) ?? this.#create(key, profile, workdir, identity);
    const protectedNow = existingPaths(domain.policy.readOnlySubpaths);
    return {
      profile: name,
      policy: domain.policy,
      domain: JSON.stringify([key, protectedNow]),
      restriction: { policy: domain.policy, uid: identity?.uid, gid: identity?.gid },
      wrap: (argv) => withLimits(argv, domain.policy.limits),
      session: () => {
        const dir = domain.spare ?? createPrivateDir(identity, domain.root.dir);
        domain.spare = undefined;
        later(() =>
          domain.spare ??= this.#closed ? undefined : createPrivateDir(identity, domain.root.dir)
        );
        return {
          env: privateEnv(dir),
          release: () => later(() => this.#closed || removePrivateDir(dir)),
        };
      },
    };
  }

  /** Remove every domain's private directory (server shutdown). */
  close(): void {
    this.#closed = true;
    for (const domain of this.#domains.values()) removePrivateDir(domain.root);
    this.#domains.clear();
  }

  #unenforced(name: string, profile: Profile, workdir: string): SandboxChoice {
    const policy = resolveProfile(profile, this.#context(workdir, "/tmp", true));
    return {
      profile: name,
      policy,
      domain: FULL_ACCESS,
      wrap: (argv) => argv,
      session: () => NO_SESSION_DIR,
    };
  }

  #sandboxIdentity(): SandboxIdentity | null {
    this.#identity ??= sandboxIdentity();
    return this.#identity;
  }

  #create(
    key: string,
    profile: Profile,
    workdir: string,
    identity: SandboxIdentity | null,
  ): Domain {
    if (identity) this.#makeReachable(workdir, identity, profile);
    const root = createPrivateDir(identity);
    const policy = resolveProfile(profile, this.#context(workdir, root.dir, false));
    const domain = { root, policy };
    this.#domains.set(key, domain);
    return domain;
  }

  /**
   * Make the workdir usable by the sandbox uid. Inside the server's workspace, the whole
   * workspace is granted once (so ancestors up to it are searchable too, and new files inherit
   * the grant). Outside it nothing is changed: the workdir must already be reachable.
   */
  #makeReachable(workdir: string, identity: SandboxIdentity, profile: Profile): void {
    const workspace = this.#opts.workspace;
    if (!isWithin(workdir, workspace)) return assertReachable(workdir, identity, true);
    if (this.#prepared) return;
    prepareWorkdir(
      workspace,
      identity,
      profile.readOnlySubpaths.map((sub) => `${workspace}/${sub}`),
    );
    this.#prepared = true;
  }

  #context(workdir: string, tmp: string, childIsRoot: boolean) {
    return { workdir, tmp, home: this.#opts.home, serverPid: this.#opts.serverPid, childIsRoot };
  }
}

/** Run `work` after the current request, off its critical path; failures are logged. */
function later(work: () => unknown): void {
  setTimeout(() => {
    try {
      work();
    } catch (err) {
      console.error("uexec: private directory upkeep failed:", err);
    }
  });
}
