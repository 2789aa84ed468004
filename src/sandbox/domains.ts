/**
 * Sandbox domains: a profile resolved for a workdir, the unit one spawner worker is restricted
 * to and shared by. A domain owns a directory (the profile's `{tmp}`), and each session gets a
 * private directory of its own beneath it for HOME and TMPDIR, created for it and removed after
 * it ended. When the server is root each session also gets a uid of its own (identity/uids.ts):
 * its private directory is 0700 and owned by that uid, the domain's account files name it
 * (enforce/accounts.ts), and the workspace is granted once to the group all session uids share;
 * an approved writable directory beyond what that group may write is granted to the session's
 * own uid while it runs (grants/session_grant.ts).
 *
 * A domain is keyed by profile, approved widening, agent and workdir: agents never share one.
 * Sessions of one domain share a Landlock domain; their own uids keep them from signalling,
 * tracing or reading each other. This module must never hand out an enforcing choice whose
 * preparation failed (it throws `SandboxUnavailableError` instead), nor one private directory
 * or uid to two live sessions.
 *
 * This is the one facade of `sandbox/`: the rest of the server chooses sandboxes here and
 * imports from the folders only the types and pure helpers it names. Its folders stand in
 * layers, each importing only from those above it in this list (and `errors.ts`, `instance.ts`,
 * `syscalls.ts` at the root, imported by all):
 * - `policy/`: profiles, widenings, the resolved policy, denials (pure data and checks).
 * - `fs/`: file primitives by descriptor (ACLs, entries, file info) for grants and the guard.
 * - `identity/`: who children run as (ids, the uid pool and its reaper, private HOMEs).
 * - `containment/`: a cgroup per session (`containment.ts` is the folder's entry).
 * - `enforce/`: what the spawner thread applies to itself (`apply.ts`: namespaces, Landlock,
 *   identity drop, seccomp) and how a child is launched under limits.
 * - `git_guard/`: keeping `.git` directories read-only to the sandbox (`git_guard.ts`).
 * - `grants/`: the workspace grant and each session's write grant (`workspace.ts`).
 *
 * Flow at a glance: `choose()` widens the profile, resolves it into a domain (made once per
 * profile, widening, agent and workdir: its directory, the workspace grant, the guard), and
 * returns the domain's `restriction` (for the spawner worker, enforce/apply.ts) and `session()`
 * (a uid and private directory, made ahead as the domain's spare, plus its write grant);
 * `release()` gives them back, and the uid is reaped before its next use.
 *
 * @module
 */

import { InvalidRequestError } from "../errors.ts";
import { accountEnv, DomainAccounts } from "./enforce/accounts.ts";
import type { Restriction } from "./enforce/apply.ts";
import type { Reaper } from "./identity/reaper.ts";
import { SessionUids, type Uids } from "./identity/session_uids.ts";
import type { Reactor } from "../io/reactor.ts";
import { existingPaths } from "./fs/fsinfo.ts";
import { GitGuard } from "./git_guard/git_guard.ts";
import {
  assertNotInsideProtected,
  protectedAncestor,
  protectedNames,
} from "./git_guard/protected.ts";
import { type SandboxIds, sandboxOwners } from "./identity/identity.ts";
import {
  createDomainDir,
  createInstanceDir,
  createPrivateDir,
  type PrivateDir,
  privateEnv,
  removeDeadInstanceDirs,
  removeInstanceDir,
  removePrivateDir,
} from "./identity/home.ts";
import { assertReachable, prepareWorkdir } from "./grants/workspace.ts";
import { type Launch, launch, type ShellCommand } from "./enforce/launch.ts";
import type { ResolvedPolicy } from "./policy/policy.ts";
import { isWithin, type Profile, resolveProfile } from "./policy/profiles.ts";
import { type UidCursor } from "./identity/uids.ts";
import { DEFAULT_MAX_PTYS, DEFAULT_SLOTS, type TerminalPlan } from "./enforce/terminal_slots.ts";
import { canonical, widen, type Widening } from "./policy/widening.ts";
import { type DomainViewOptions, DomainViews, type ViewAge } from "./enforce/view_keys.ts";
import { type GrantedRoot, GrantError } from "./grants/write_grant.ts";
import { type HeldGrant, SessionGrants } from "./grants/session_grant.ts";
import type { GrantJournal } from "./grants/grant_journal.ts";
import { gitConfigText, type GitIdentity } from "./identity/git_config.ts";
import { proxyEnv } from "../egress/gateway.ts";

/**
 * Sandboxed git trusts repositories whatever their owner: every session runs as its own uid,
 * so without this a repository the operator or an earlier session made is "dubious ownership"
 * to git. Git's check protects a user from another user's repository configuration; inside the
 * sandbox that configuration can do no more than the command itself (and `.git` directories the
 * sandbox did not make are read-only to it, see git_guard.ts). Unsandboxed runs keep git's
 * check. Each private HOME's `.gitconfig` says the same (git_config.ts), for git's local
 * transports, which drop the environment's configuration; this covers a command that moves HOME.
 */
const GIT_TRUSTS_EVERY_OWNER = {
  GIT_CONFIG_COUNT: "1",
  GIT_CONFIG_KEY_0: "safe.directory",
  GIT_CONFIG_VALUE_0: "*",
};

/** The profile that means "no sandbox". */
export const FULL_ACCESS = "full-access";

/** A session's private environment (HOME, TMPDIR) and uid; `release` it when the session ends. */
export interface SessionDir {
  env: Record<string, string>;
  /** The uid the session's child must run as (a root server only). */
  uid?: number;
  /** Whether it holds write access granted to its uid, which `release` takes back. */
  granted?: boolean;
  /** Gives it all back; settles once a grant is taken back (at once without one). */
  release(): void | Promise<void>;
}

/** How one session is sandboxed. */
export interface SandboxChoice {
  profile: string;
  policy: ResolvedPolicy;
  /** The spawner worker domain key. */
  domain: string;
  /**
   * How that worker restricts itself; undefined when nothing is enforced. Its first call for a
   * domain writes the domain's account files, which needs file descriptors (and throws without).
   */
  restriction?: () => Restriction;
  /** How to start `command` with `env` under this sandbox's limits (after the gate, when `gate`). */
  launch(command: ShellCommand, env: Record<string, string>, gate: boolean): Launch;
  /** The session's private directory and uid. */
  session(): Promise<SessionDir>;
}

/** Who a sandbox is for and what it adds to its profile. */
export interface ChooseOptions {
  /** The agent whose session it is: agents never share a domain. */
  agent?: string;
  /** An approved widening of the profile. */
  widening?: Widening;
  /** The agent's `max_egress`: what its egress proxy may ever let through (no cap: undefined). */
  egressCap?: string[];
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
  /** The mount views' ages and the socket listing (enforce/view_keys.ts). */
  views?: DomainViewOptions;
  /** Domains that keep a spare for their next session; the least recently used lose it (64). */
  maxSpares?: number;
  /** Wakes the guard that keeps `.git` directories read-only (git_guard.ts). */
  reactor: Reactor;
  /** Who sessions' commits are by (their `.gitconfig`, see git_config.ts); none by default. */
  gitIdentity?: GitIdentity;
  /** Where the write grants held are recorded for the next start (grant_journal.ts). */
  grantJournal?: GrantJournal;
  /** The size of the tmpfs all sessions' HOME and TMPDIR are on (root server; identity/home.ts). */
  tmpBytes?: number;
  /** Terminals one session may hold (`UEXEC_MAX_PTYS_PER_SESSION`, default 64). */
  maxPtys?: number;
  /** Terminal slots per domain (terminal_slots.ts; default 16). */
  terminalSlots?: number;
  /** Where a uid range is handed out from across runs (default: uid_cursor.ts's host file). */
  uidCursor?: (first: number, last: number) => UidCursor;
  /**
   * Makes the reaper of session uids (reaper.ts), called once on a root server when the range is
   * leased: the composition root hands in a spawner worker, which sandbox/ must not import.
   */
  reaper: () => Reaper;
}

interface Domain extends ViewAge {
  /** The profile's `{tmp}`: where its sessions' private directories are made. */
  root: string;
  policy: ResolvedPolicy;
  /** The next session's uid and directory, made ahead so that session need not wait. */
  spare?: Promise<Reserved>;
  /**
   * The passwd and group files its sessions see (null: none), written when its first worker or
   * session needs them (until then, and after a failure, undefined).
   */
  accounts?: DomainAccounts | null;
  /** Approved writable directories each session's uid is granted while it runs (write_grant.ts). */
  grants: GrantedRoot[];
}

/** A uid and private directory set aside for one session. */
interface Reserved {
  uid?: number;
  dir: PrivateDir;
  /** Removes the uid's entry from the domain's passwd file. */
  unlist?: () => void;
}

const NO_SESSION_DIR: SessionDir = { env: {}, release() {} };

/**
 * Domains that keep a spare, by default. Each spare holds a session uid and a directory: kept by
 * every domain a command ever ran in, commands in thousands of directories of their own would
 * hold as many uids (the range has 65,535) until the server restarts.
 */
const MAX_SPARES = 64;

/**
 * Remove a reserved directory and account entry, then return its uid (which is reaped before its
 * next use).
 */
function giveBack({ uid, dir, unlist }: Reserved, uids: Uids | null): void {
  const unlisted = new Promise<void>((done) => done(unlist?.()));
  const removed = Promise.all([removePrivateDir(dir.dir), unlisted]).then(() => {});
  if (uid !== undefined) uids!.pool.give(uid, removed);
  else removed.catch((err) => console.error(`uexec: cannot remove ${dir.dir}: ${err}`));
}

/** Resolves profiles into domains and owns their private directories and session uids. */
export class SandboxDomains {
  #opts: DomainOptions;
  #views: DomainViews;
  /** The session uids (a root server) and their reaper. */
  #uids: SessionUids;
  #domains = new Map<string, Domain>();
  /** Domains holding a spare, least recently used first. */
  #withSpare = new Set<Domain>();
  #prepared = false;
  #closed = false;
  /** Where the domains' directories are made (instance.ts), made with the first. */
  #instanceDir?: string;
  /** Names kept read-only at any depth: the profiles' one-component read-only subpaths. */
  #protectedNames: Set<string>;
  #guard?: GitGuard;
  /** Each private HOME's `.gitconfig`. */
  #gitconfig: Uint8Array<ArrayBuffer>;
  /** Where write grants are made, recorded and taken back. */
  #grants: SessionGrants;
  /** Workdirs outside the workspace that sessions ran in: their uids' files are taken back too. */
  #outsideWorkdirs = new Set<string>();
  /** Each domain's terminal slots (terminal_slots.ts; a root server). */
  #terminals: TerminalPlan;

  constructor(opts: DomainOptions) {
    this.#opts = opts;
    this.#uids = new SessionUids({
      reaper: opts.reaper,
      uidCursor: opts.uidCursor,
      roots: () => [opts.workspace, ...this.#outsideWorkdirs],
    });
    this.#terminals = {
      slots: opts.terminalSlots ?? DEFAULT_SLOTS,
      maxPtys: opts.maxPtys ?? DEFAULT_MAX_PTYS,
    };
    this.#gitconfig = new TextEncoder().encode(gitConfigText(opts.gitIdentity ?? {}));
    this.#views = new DomainViews(opts.views);
    this.#protectedNames = protectedNames(
      [...opts.profiles.values()].flatMap((p) => p.enforce ? p.readOnlySubpaths : []),
    );
    this.#grants = new SessionGrants(opts.grantJournal, this.#protectedNames);
  }

  /** The names kept read-only at any depth (`.git`, `.uexec`): see git_guard.ts. */
  get protectedNames(): ReadonlySet<string> {
    return this.#protectedNames;
  }

  /**
   * Whether write access to `path` can be granted: not when it holds, or lies in, a path no
   * sandboxed command may read (the server's state directory).
   */
  writable(path: string): boolean {
    return !(this.#opts.hidden ?? []).some((h) => isWithin(h, path) || isWithin(path, h));
  }

  /**
   * Whether read access to `path`, which a profile hides, can be granted: not when it holds, or
   * lies in, the server's hidden paths, nor anything beneath `/proc` (the server's own entry
   * there holds its environment).
   */
  revealable(path: string): boolean {
    return this.writable(path) && !isWithin(path, "/proc");
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

  /** The profile `name` widened by `widening` (no sandbox at all: the full-access profile). */
  widened(name: string, widening: Widening): Profile {
    return widen(this.profile(name), widening, (n) => this.profile(n), FULL_ACCESS);
  }

  /**
   * The sandbox for a session of profile `name` in `workdir`, for `agent`, widened by an
   * approved `widening` (reported under the name of the profile it widens, or of the wider
   * profile it names).
   */
  choose(name: string, workdir: string, opts: ChooseOptions = {}): SandboxChoice {
    const widening = canonical(opts.widening ?? {});
    const widened = this.widened(name, widening);
    const cap = widened.egress && opts.egressCap ? [...opts.egressCap].sort() : undefined;
    const profile = cap ? { ...widened, egress: { ...widened.egress!, cap } } : widened;
    name = widening.unsandboxed ? FULL_ACCESS : widening.profile ?? name;
    if (!profile.enforce) return this.#unenforced(name, profile, workdir);
    const uids = this.#uids.get();
    assertNotInsideProtected(workdir, this.#protectedNames, uids && sandboxOwners(uids.ids));
    const id = JSON.stringify([name, widening, opts.agent ?? null, workdir, cap ?? null]);
    let domain = this.#domains.get(id);
    if (!domain) {
      domain = this.#create(profile, workdir, uids, widening);
      this.#domains.set(id, domain);
    }
    this.#guard?.writable([
      ...domain.policy.writableRoots,
      ...domain.grants.map((root) => root.path),
    ]);
    this.#guard?.settle();
    const protectedNow = this.#guard?.protectedAmong(domain.policy.readOnlySubpaths) ??
      existingPaths(domain.policy.readOnlySubpaths);
    const view = uids
      ? this.#views.key(domain, domain.policy)
      : this.#views.socketsBound(domain.policy);
    return {
      profile: name,
      policy: domain.policy,
      domain: JSON.stringify([id, protectedNow, view]),
      restriction: () => ({
        policy: { ...domain.policy, readOnlySubpaths: protectedNow },
        uid: uids?.ids.spawner,
        gid: uids?.ids.gid,
        accounts: this.#accounts(domain, uids)?.files,
        terminals: uids ? this.#terminals : undefined,
        view: uids ? { staging: this.#views.staging(this.#instanceDir!), workdir } : undefined,
      }),
      launch: (command, env, gate) => launch(command, env, { limits: domain.policy.limits, gate }),
      session: () => this.#session(domain, uids),
    };
  }

  /** Remove every domain's directory and stop the reaper (server shutdown). */
  async close(): Promise<void> {
    this.#closed = true;
    // Take-backs under way finish first (a session that ended on its own may still be in one).
    await this.#grants.close();
    this.#uids.close();
    this.#guard?.close();
    this.#domains.clear();
    this.#withSpare.clear();
    // Every domain's directory is in it.
    if (this.#instanceDir) await removeInstanceDir(this.#instanceDir);
  }

  /**
   * Remove the domain directories of server instances that no longer run (a server killed with
   * SIGKILL leaves its sessions' HOMEs and all); resolves to how many instances' were removed.
   */
  static removeDead(): Promise<number> {
    return removeDeadInstanceDirs();
  }

  /**
   * A session's own uid (root server) and private directory owned by it: the domain's spare,
   * made ahead while the previous session ran (or a fresh one if there is none or it failed),
   * never handed to a second session. Its release removes the directory, then returns the uid.
   */
  async #session(domain: Domain, uids: Uids | null): Promise<SessionDir> {
    const spare = domain.spare;
    domain.spare = undefined;
    const fresh = () => this.#reserve(domain, uids);
    const reserved = await (spare ? spare.catch(fresh) : fresh());
    if (!this.#closed && !domain.spare) {
      domain.spare = fresh();
      domain.spare.catch(() => {}); // a failed spare is replaced by its taker
      this.#keepSpare(domain, uids);
    }
    // A uid whose grant could not be taken back in full is never handed out again.
    const retired = { ...reserved, uid: undefined };
    let grant: HeldGrant | undefined;
    try {
      grant = await this.#grant(domain, reserved.uid, uids);
    } catch (err) {
      giveBack(err instanceof GrantError && !err.takenBack ? retired : reserved, uids);
      throw err;
    }
    let released = false;
    const user = reserved.uid === undefined ? {} : accountEnv(reserved.uid);
    return {
      env: {
        ...privateEnv(reserved.dir),
        ...user,
        ...GIT_TRUSTS_EVERY_OWNER,
        ...(domain.policy.egress ? proxyEnv() : {}),
      },
      uid: reserved.uid,
      granted: grant !== undefined,
      // Without a grant, all of it happens before this returns.
      release: async () => {
        if (released) return;
        released = true;
        const clean = grant ? await grant.release() : true;
        if (!this.#closed) giveBack(clean ? reserved : retired, uids);
      },
    };
  }

  /** The domain's approved directories granted to a session's `uid` (a root server). */
  async #grant(
    domain: Domain,
    uid: number | undefined,
    uids: Uids | null,
  ): Promise<HeldGrant | undefined> {
    if (uid === undefined || !uids || domain.grants.length === 0) return undefined;
    return await this.#grants.hold(domain.grants, uid, uids.ids, this.#guard);
  }

  /**
   * Takes back the write grants that server instances no longer running held (their journal's
   * records, see grant_journal.ts); call at start-up, before any session starts. It leases the
   * uid range first (a server running on it may have handed those uids out again) and kills
   * what still runs as the recorded uids (without cgroups nothing else has). A uid whose grant
   * cannot be taken back in full, or whose record cannot be read, is never handed out, and its
   * record stays for a later start. Resolves to how many were taken back and what failed.
   */
  async takeBackDeadGrants(): Promise<{ takenBack: number; failed: string[] }> {
    const journal = this.#opts.grantJournal;
    const dead = journal?.dead() ?? [];
    const failed: string[] = [];
    let takenBack = 0;
    if (!journal || dead.length === 0) return { takenBack, failed };
    for (const found of dead) if (found.uid !== undefined) this.#uids.retired.add(found.uid);
    let range;
    try {
      range = this.#uids.leased();
    } catch (err) {
      return { takenBack, failed: [`cannot take back ${dead.length} grant(s): ${err}`] };
    }
    if (!range) {
      return { takenBack, failed: dead.map((f) => `${f.file}: only a root server takes it back`) };
    }
    await range.reaper.reap(dead.flatMap((f) => "record" in f ? [f.record.uid] : []));
    for (const found of dead) {
      if (!("record" in found)) {
        failed.push(`${found.file}: ${found.error}; uid retired`);
        continue;
      }
      const { roots, uid } = found.record;
      if (await this.#grants.takeBack(roots, uid, range.ids)) {
        journal.remove(found.file);
        this.#uids.retired.delete(uid);
        takenBack++;
      } else {
        failed.push(`${found.file}: not all of it could be taken back; uid retired`);
      }
    }
    return { takenBack, failed };
  }

  /** How many domains hold a spare now. */
  get spares(): number {
    return this.#withSpare.size;
  }

  /** `domain` holds a spare now: the most recently used; past the cap the oldest gives its up. */
  #keepSpare(domain: Domain, uids: Uids | null): void {
    this.#withSpare.delete(domain);
    this.#withSpare.add(domain);
    for (const oldest of this.#withSpare) {
      if (this.#withSpare.size <= (this.#opts.maxSpares ?? MAX_SPARES)) break;
      this.#withSpare.delete(oldest);
      const spare = oldest.spare;
      oldest.spare = undefined;
      spare?.then((reserved) => this.#closed || giveBack(reserved, uids), () => {});
    }
  }

  /**
   * A uid (root server) listed in the domain's account files, and a private directory beneath
   * the domain's, owned by it.
   */
  async #reserve(domain: Domain, uids: Uids | null): Promise<Reserved> {
    const uid = await uids?.pool.take();
    let dir: PrivateDir | undefined;
    try {
      const owner = uid === undefined ? null : { uid, gid: uids!.ids.gid };
      dir = createPrivateDir(owner, domain.root, this.#gitconfig);
      const unlist = uid === undefined
        ? undefined
        : this.#accounts(domain, uids)?.add(uid, dir.home);
      return { uid, dir, unlist };
    } catch (err) {
      if (dir) giveBack({ uid, dir }, uids);
      else if (uid !== undefined) uids!.pool.give(uid);
      throw err;
    }
  }

  #unenforced(name: string, profile: Profile, workdir: string): SandboxChoice {
    const policy = resolveProfile(profile, this.#context(workdir, "/tmp", true));
    return {
      profile: name,
      policy,
      domain: FULL_ACCESS,
      launch: (command, env, gate) => launch(command, env, { gate }),
      session: () => Promise.resolve(NO_SESSION_DIR),
    };
  }

  #create(profile: Profile, workdir: string, uids: Uids | null, widening: Widening): Domain {
    if (uids) this.#makeReachable(workdir, uids.ids, profile);
    const gid = uids?.ids.gid ?? null;
    this.#instanceDir ??= createInstanceDir(gid, this.#opts.tmpBytes);
    const root = createDomainDir(gid, this.#instanceDir);
    const policy = this.#resolve(profile, workdir, root);
    return { root, policy, grants: uids ? this.#grantsFor(widening) : [] };
  }

  /**
   * The approved writable directories the sandbox group cannot write by itself: those outside
   * the workspace (which it is granted as a whole) and protected ones (`.git`, a bare
   * repository the guard keeps) inside it.
   */
  #grantsFor(widening: Widening): GrantedRoot[] {
    return (widening.write ?? []).flatMap((path) => {
      const inProtected = protectedAncestor(path, this.#protectedNames, null) !== null ||
        (this.#guard?.inRepository(path) ?? false);
      return !isWithin(path, this.#opts.workspace) || inProtected
        ? [{ path, protected: inProtected }]
        : [];
    });
  }

  /** The domain's account files (a root server), written on first use; throws if they cannot be. */
  #accounts(domain: Domain, uids: Uids | null): DomainAccounts | null {
    if (!uids) return null;
    if (domain.accounts === undefined) {
      domain.accounts = DomainAccounts.create(domain.root, uids.ids.gid);
    }
    return domain.accounts;
  }

  /**
   * Make the workdir usable by every session uid. Inside the server's workspace, the whole
   * workspace is granted to the sandbox group once (so ancestors up to it are searchable too,
   * and new files inherit the grant). Outside it nothing is changed: the workdir must already
   * be reachable.
   */
  #makeReachable(workdir: string, ids: SandboxIds, profile: Profile): void {
    const workspace = this.#opts.workspace;
    if (!isWithin(workdir, workspace)) {
      assertReachable(workdir, ids, true);
      this.#outsideWorkdirs.add(workdir);
      return;
    }
    if (this.#prepared) return;
    this.#guard ??= new GitGuard({
      names: this.#protectedNames,
      owners: sandboxOwners(ids),
      reactor: this.#opts.reactor,
    });
    this.#guard.guard(workspace);
    prepareWorkdir(
      workspace,
      ids,
      profile.readOnlySubpaths.map((sub) => `${workspace}/${sub}`),
      this.#guard.claims,
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
