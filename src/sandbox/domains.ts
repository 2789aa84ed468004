/**
 * Sandbox domains: a profile resolved for a workdir and uid, the unit one spawner worker is
 * restricted to and shared by. A domain owns a private directory (the profile's `{tmp}`, owned
 * by the sandbox uid); each session gets its own HOME and TMPDIR beneath it. The workspace is
 * made usable for the sandbox uid once per domain.
 *
 * A domain is keyed by profile, approved widening, agent, workdir and uid: agents never share
 * one. Sessions of one domain share a Landlock domain, so they can reach each other's temp
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
import { canonical, widen, type Widening } from "./widening.ts";
import { SocketListing, socketsToHide } from "./unix_sockets.ts";

/** The profile that means "no sandbox". */
export const FULL_ACCESS = "full-access";

/** A session's private environment (HOME, TMPDIR); `release` it when the session ends. */
export interface SessionDir {
  env: Record<string, string>;
  release(): void;
}

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
  /** The session's private directory. */
  session(): Promise<SessionDir>;
}

/** Who a sandbox is for and what it adds to its profile. */
export interface ChooseOptions {
  /** The agent whose session it is: agents never share a domain. */
  agent?: string;
  /** An approved widening of the profile. */
  widening?: Widening;
}

/** Settings of the domain registry. */
export interface DomainOptions {
  profiles: Map<string, Profile>;
  /** Home of the server's user: what `~` means in profiles. */
  home: string;
  serverPid: number;
  /** The server's workspace: prepared as a whole for workdirs inside it. */
  workspace: string;
  /** Paths no sandboxed command may read, under any profile (the server's state directory). */
  hidden?: string[];
  /** Where the bound unix sockets come from (default: `/proc/net/unix`, at most 1 s old). */
  sockets?: SocketListing;
}

interface Domain {
  root: PrivateDir;
  policy: ResolvedPolicy;
  /** A session directory being made ahead of time, so the next session need not wait for it. */
  spare?: Promise<PrivateDir | undefined>;
}

const NO_SESSION_DIR: SessionDir = { env: {}, release() {} };

/** Resolves profiles into domains and owns their private directories. */
export class SandboxDomains {
  #opts: DomainOptions;
  #sockets: SocketListing;
  #identity?: SandboxIdentity | null;
  #domains = new Map<string, Promise<Domain>>();
  #prepared = false;
  #closed = false;

  constructor(opts: DomainOptions) {
    this.#opts = opts;
    this.#sockets = opts.sockets ?? new SocketListing();
  }

  /** Names of the loaded profiles. */
  get names(): string[] {
    return [...this.#opts.profiles.keys()];
  }

  /** The loaded profile `name`; an unknown name is the request's error. */
  profile(name: string): Profile {
    const profile = this.#opts.profiles.get(name);
    if (!profile) {
      throw new InvalidRequestError(
        `profile: unknown profile ${JSON.stringify(name)}; known: ${this.names.join(", ")}`,
      );
    }
    return profile;
  }

  /**
   * The sandbox for a session of profile `name` in `workdir`, for `agent`, widened by an
   * approved `widening` (reported under the name of the profile it widens, or of the wider
   * profile it names).
   */
  async choose(name: string, workdir: string, opts: ChooseOptions = {}): Promise<SandboxChoice> {
    const widening = canonical(opts.widening ?? {});
    const base = this.profile(name);
    const profile = widen(base, widening, (n) => this.profile(n), FULL_ACCESS);
    name = widening.unsandboxed ? FULL_ACCESS : widening.profile ?? name;
    if (!profile.enforce) return this.#unenforced(name, profile, workdir);
    const identity = this.#sandboxIdentity();
    const key = JSON.stringify([
      name,
      widening,
      opts.agent ?? null,
      workdir,
      identity?.uid ?? null,
    ]);
    let pending = this.#domains.get(key);
    if (!pending) {
      pending = this.#create(profile, workdir, identity);
      this.#domains.set(key, pending);
      pending.catch(() => this.#domains.delete(key));
    }
    const domain = await pending;
    const protectedNow = existingPaths(domain.policy.readOnlySubpaths);
    // A socket bound (or bound again) since the worker hid the others needs a fresh worker.
    const hiddenNow = socketsToHide(domain.policy, this.#sockets.current())
      .map((s) => `${s.inode} ${s.path}`);
    return {
      profile: name,
      policy: domain.policy,
      domain: JSON.stringify([key, protectedNow, hiddenNow]),
      restriction: { policy: domain.policy, uid: identity?.uid, gid: identity?.gid },
      wrap: (argv) => withLimits(argv, domain.policy.limits),
      session: () => this.#sessionDir(domain, identity),
    };
  }

  /** Remove every domain's private directory (server shutdown). */
  async close(): Promise<void> {
    this.#closed = true;
    const domains = await Promise.allSettled(this.#domains.values());
    this.#domains.clear();
    for (const d of domains) if (d.status === "fulfilled") await removePrivateDir(d.value.root);
  }

  /** A session directory: the spare made ahead if there is one; then the next spare is made. */
  async #sessionDir(domain: Domain, identity: SandboxIdentity | null): Promise<SessionDir> {
    const spare = await domain.spare;
    const dir = spare ?? await createPrivateDir(identity, domain.root.dir);
    domain.spare = this.#closed
      ? undefined
      : createPrivateDir(identity, domain.root.dir).catch(logged);
    return {
      env: privateEnv(dir),
      release: () => {
        if (!this.#closed) removePrivateDir(dir).catch(logged);
      },
    };
  }

  #unenforced(name: string, profile: Profile, workdir: string): SandboxChoice {
    const policy = resolveProfile(profile, this.#context(workdir, "/tmp", true));
    return {
      profile: name,
      policy,
      domain: FULL_ACCESS,
      wrap: (argv) => argv,
      session: () => Promise.resolve(NO_SESSION_DIR),
    };
  }

  #sandboxIdentity(): SandboxIdentity | null {
    this.#identity ??= sandboxIdentity();
    return this.#identity;
  }

  async #create(
    profile: Profile,
    workdir: string,
    identity: SandboxIdentity | null,
  ): Promise<Domain> {
    if (identity) this.#makeReachable(workdir, identity, profile);
    const root = await createPrivateDir(identity);
    const policy = this.#resolve(profile, workdir, root.dir);
    return { root, policy };
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

  /** `profile` resolved for a domain, with the server's hidden paths denied too. */
  #resolve(profile: Profile, workdir: string, tmp: string): ResolvedPolicy {
    const policy = resolveProfile(profile, this.#context(workdir, tmp, false));
    return {
      ...policy,
      denyRead: [...new Set([...policy.denyRead, ...(this.#opts.hidden ?? [])])],
    };
  }
}

/**
 * Log a failed background upkeep step; the next session makes its directory itself. Logged as
 * one string: formatting the error's stack may need descriptors, and may fail without them.
 */
function logged(err: unknown): undefined {
  console.error(`uexec: private directory upkeep failed: ${err}`);
  return undefined;
}
