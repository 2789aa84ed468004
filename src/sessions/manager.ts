/**
 * The session store and the two tool calls on it: `exec` starts a child and collects its first
 * output, `write` sends input to a live session and collects what follows. Also listing,
 * killing, resizing and signalling, pruning at the session limit, and shutdown.
 *
 * A session stays in the store until its exit has been reported to a caller (or it is killed
 * or pruned); it must never report the same exit twice or keep a killed child alive.
 *
 * @module
 */

import { setImmediate } from "node:timers";
import type { EndReason, EventBus } from "../events/bus.ts";
import {
  closeAll,
  E,
  libc,
  noDescriptorFree,
  outOfDescriptors,
  readSmallFile,
} from "../ffi/libc.ts";
import { DescriptorReserve } from "../io/descriptor_reserve.ts";
import type { Reactor } from "../io/reactor.ts";
import { openPipe, setNonBlocking, type WindowSize } from "../pty/open.ts";
import { whenGone } from "../pty/gone.ts";
import { killSessions, SIGNALS } from "../pty/signals.ts";
import type { Gate, Spawned } from "../pty/spawn.ts";
import type { Truncator } from "../output/truncator.ts";
import { type Screen, ScreenHost, type ScreenSnapshot, type ScreenView } from "../output/screen.ts";
import type { SandboxChoice, SessionDir } from "../sandbox/domains.ts";
import type { CgroupHost, SessionCgroup, Usage } from "../sandbox/cgroups.ts";
import { SandboxUnavailableError } from "../sandbox/errors.ts";
import { type Denial, detectDenial } from "../sandbox/denial.ts";
import { type SpawnerPool, SpawnFailure } from "../workers/pool.ts";
import { collect, type Collected } from "./collect.ts";
import { childEnv } from "./env.ts";
import {
  CallAbandonedError,
  InvalidRequestError,
  OutOfResourcesError,
  RevokedError,
  SessionLimitError,
  ShuttingDownError,
  SpawnerFailedError,
  UnknownSessionError,
} from "./errors.ts";
import { Session, type SessionInfo } from "./session.ts";
import { checkWaits, inputState, type WaitConditions } from "./waits.ts";
import type { UntilPattern } from "./until.ts";

/**
 * How a call's output is shown: `raw` as the bytes came (decoded), `plain` as a reader sees
 * the lines, `screen` as the terminal shows it now (sessions with a screen only).
 */
export type OutputMode = "raw" | "plain" | "screen";

/** A validated `exec_command` request. */
export interface ExecRequest {
  /** Who starts it: its sessions, limit and pruning are its own. */
  owner: string;
  /** The owner's live-session limit. */
  maxSessions: number;
  /** With cgroups: the memory of the session's whole tree, in bytes (else the profile's). */
  memoryBytes?: number;
  cmd: string;
  workdir: string;
  shell: string;
  login: boolean;
  tty: boolean;
  size: WindowSize;
  env: Record<string, string>;
  yieldMs: number;
  maxOutputTokens: number;
  until?: UntilPattern;
  /** Return as soon as one of these holds (`until_idle_ms`, `until_port`, `until_input`). */
  waits?: WaitConditions;
  /** The sandbox the child runs under. */
  sandbox: SandboxChoice;
  /** Kill the session this long after it started. */
  timeoutMs?: number;
  /** Follow the session with a terminal emulator (tty only), for `screen` output. */
  screen?: boolean;
  outputMode?: OutputMode;
  /** Told of each piece of output that arrives while this call waits. */
  onOutput?: OutputWatcher;
  /** The `exec_command` this run belongs to (a retry is a second run of the same one). */
  execId?: string;
  /**
   * Aborts when the caller went away: the call then takes nothing from the session (its output
   * and exit wait for the next call) and rejects with `CallAbandonedError`.
   */
  signal?: AbortSignal;
  /**
   * True once the owner's credential was revoked (the request was let in before): checked before
   * anything starts and again when the session is about to be registered, so a start in flight
   * during the revocation is killed instead of outliving it.
   */
  revoked?: () => boolean;
}

/** Hooks told of every session (history, metrics); they must not throw or block. */
export interface SessionObserver {
  /** A session was created, before any of its output is read. */
  started(session: Session, execId: string | undefined): void;
  /** The sandbox denied the session's command (told once, when its exit is reported). */
  denied(session: Session, denial: Denial): void;
}

/** Told of output as it arrives during a call (progress reporting); it must not throw. */
export type OutputWatcher = (bytes: Uint8Array) => void;

/** A validated `write_stdin` request. */
export interface WriteRequest {
  /** The caller's owner name; another owner's session is unknown to it. */
  owner?: string;
  sessionId: number;
  chars: string;
  yieldMs: number;
  maxOutputTokens: number;
  until?: UntilPattern;
  /** Return as soon as one of these holds (`until_idle_ms`, `until_port`, `until_input`). */
  waits?: WaitConditions;
  outputMode?: OutputMode;
  /** Told of each piece of output that arrives while this call waits. */
  onOutput?: OutputWatcher;
  /** As in `ExecRequest`: aborts when the caller went away. */
  signal?: AbortSignal;
}

/** The result of one tool call. */
export interface CallResult {
  chunk_id: string;
  wall_time_seconds: number;
  output: string;
  session_id?: number;
  exit_code?: number;
  original_token_count: number;
  truncated: boolean;
  /** True when the session was killed because its `timeout_ms` expired. */
  timed_out?: boolean;
  sandbox: SandboxReport;
  /** With `output_mode: "screen"`: the terminal now (`output` holds the lines scrolled off). */
  screen?: ScreenView;
  /** Once exited: what the command's whole process tree used (cgroup containment only). */
  usage?: Usage;
  /** PTY sessions still running: true when the foreground job is blocked reading the terminal. */
  waiting_for_input?: boolean;
  /** Beside `waiting_for_input`: false when what is typed is not shown (a password prompt). */
  input_echo?: boolean;
}

/** What the sandbox did to a command, as reported to the caller. */
export interface SandboxReport {
  profile: string;
  denied: boolean;
  denial?: Denial;
  /** Set when a denied command was rerun without the sandbox after approval. */
  retried?: boolean;
  /** Why a denied command was not rerun (the retry approval was denied or timed out). */
  message?: string;
}

/** What killing a session returns. */
export interface KillResult {
  exit_code: number;
  output: string;
}

/** Settings of the manager. */
export interface ManagerOptions {
  reactor: Reactor;
  pool: SpawnerPool;
  bus: EventBus;
  baseEnv: Record<string, string>;
  truncator: Truncator;
  /** How long a killed child gets between SIGTERM and SIGKILL. */
  killGraceMs?: number;
  /** Where `screen` sessions' emulators run (one is made when absent). */
  screens?: ScreenHost;
  observer?: SessionObserver;
  /** Each session's cgroup; without it sessions are contained by their process group only. */
  cgroups?: CgroupHost;
  /**
   * The process's descriptor reserve, shared with `cgroups` (one of {@link DESCRIPTOR_RESERVE}
   * is made when absent).
   */
  descriptors?: DescriptorReserve;
  /** The egress proxy: told whose connections are whose, and asked what it refused them. */
  egress?: EgressSessions;
}

/** What the manager needs of the egress gateway (src/egress/gateway.ts). */
export interface EgressSessions {
  /** Connections from `uid` are `sessionId`'s until the returned function is called. */
  register(uid: number, session: { sessionId: number; agent: string }): () => void;
  /** What the proxy refused `sessionId` so far (taken). */
  takeRefusals(sessionId: number): { host: string; port: number; rule: string }[];
}

/** The egress proxy's rule for a host no allow pattern matches (src/egress/rules.ts). */
const NOT_ALLOWED = "not-allowed";

const PROTECTED_RECENT = 8;
/** How long to wait for SIGKILLed processes to be gone (one stuck in the kernel may take long). */
const KILLED_EXIT_LIMIT_MS = 2000;
const MIN_ID = 1000;
const MAX_ID = 99999;
const SIGHUP = SIGNALS.SIGHUP;
const SIGTERM = SIGNALS.SIGTERM;
const SIGKILL = SIGNALS.SIGKILL;
const SIGINT = SIGNALS.SIGINT;
const CTRL_C = "\u0003";
const CTRL_D = "\u0004";
/** Splits input around ^C and ^D, keeping them (pipes act on them instead of writing them). */
const CONTROL_KEYS = new RegExp(`(${CTRL_C}|${CTRL_D})`);

/** A 128-bit random chunk id in hex. */
export function chunkId(): string {
  return crypto.getRandomValues(new Uint8Array(16)).toHex();
}

/**
 * The session to prune to make room, per Codex: never one of the `PROTECTED_RECENT` most
 * recently used; among the rest, the least recently used that has exited, else the least
 * recently used. Undefined when nothing may be pruned.
 */
export function pickPruneVictim(sessions: Session[]): Session | undefined {
  const byRecency = [...sessions].sort((a, b) => b.lastUsedAt - a.lastUsedAt);
  const candidates = byRecency.slice(PROTECTED_RECENT).reverse();
  return candidates.find((s) => s.exit !== undefined) ?? candidates[0];
}

/** Per-string limit of execve's argv and environment (MAX_ARG_STRLEN, with the NUL). */
const MAX_ARG_STRLEN = 32 * 4096;

/**
 * The 400 for a spawn that failed: E2BIG names the field that is too large for `execve` (a
 * single string over 128 KiB, or else the larger of `cmd` and `env`), anything else the workdir.
 */
function spawnRefusal(err: SpawnFailure, req: ExecRequest): InvalidRequestError {
  if (err.code !== E.E2BIG) {
    return new InvalidRequestError(`workdir: ${err.message} in ${req.workdir}`);
  }
  const bytes = (s: string) => new TextEncoder().encode(s).length + 1;
  const cmdBytes = bytes(req.cmd);
  const entries = Object.entries(req.env).map(([k, v]) => [k, bytes(`${k}=${v}`)] as const);
  const envBytes = entries.reduce((n, [, b]) => n + b, 0);
  const long = entries.find(([, b]) => b > MAX_ARG_STRLEN);
  const limits = `execve takes at most ${MAX_ARG_STRLEN} bytes per string and ` +
    "about a quarter of the stack limit in all";
  if (cmdBytes > MAX_ARG_STRLEN) {
    return new InvalidRequestError(`cmd: ${cmdBytes} bytes is too large for execve; ${limits}`);
  }
  if (long) {
    return new InvalidRequestError(
      `env.${long[0]}: ${long[1]} bytes is too large for execve; ${limits}`,
    );
  }
  const field = envBytes >= cmdBytes ? "env" : "cmd";
  return new InvalidRequestError(
    `${field}: cmd (${cmdBytes} bytes) and env (${envBytes} bytes) are too large together ` +
      `for execve; ${limits}`,
  );
}

/** The store of live sessions. */
export class SessionManager {
  #opts: ManagerOptions;
  #sessions = new Map<number, Session>();
  /** Ids being started, with their owners. */
  #reserved = new Map<number, string>();
  /** How many sessions each owner has in the store (a start counts them without a scan). */
  #counts = new Map<string, number>();
  /** Starts under way (each kills its session itself when shutdown began meanwhile). */
  #starting = new Set<Promise<unknown>>();
  #closing = false;
  #encoder = new TextEncoder();
  #screens: ScreenHost;
  /** Each session's cgroup (cgroup containment only). */
  #cgroups = new Map<Session, SessionCgroup>();
  /** Ended sessions whose cgroup is being emptied (write grants go after). */
  #settling = new Map<Session, Promise<void>>();
  /** Sessions holding write grants (see sandbox/write_grant.ts). */
  #granted = new WeakSet<Session>();
  /** Descriptors kept for the runtime, given up when a start runs out (see DescriptorReserve). */
  #descriptors: DescriptorReserve;

  constructor(opts: ManagerOptions) {
    this.#opts = opts;
    this.#descriptors = opts.descriptors ?? new DescriptorReserve(DESCRIPTOR_RESERVE);
    this.#screens = opts.screens ?? new ScreenHost();
  }

  /** Sessions in the store, oldest first: all, or `owner`'s only. */
  list(owner?: string): SessionInfo[] {
    return this.#owned(owner).map((s) => s.info());
  }

  /**
   * The session with `id`, or `UnknownSessionError`; with `owner`, another owner's session is
   * unknown exactly as a missing one is.
   */
  get(id: number, owner?: string): Session {
    const session = this.#sessions.get(id);
    if (!session || (owner !== undefined && session.owner !== owner)) {
      throw new UnknownSessionError(id);
    }
    return session;
  }

  /** Run `exec_command`. */
  async exec(req: ExecRequest): Promise<CallResult> {
    if (this.#closing) throw new ShuttingDownError();
    if (req.revoked?.()) throw new RevokedError();
    if (req.signal?.aborted) throw new CallAbandonedError();
    const started = performance.now();
    if ((req.screen || req.outputMode === "screen") && !req.tty) {
      throw new InvalidRequestError(
        "screen: a screen follows a terminal; it needs tty: true (use output_mode plain instead)",
      );
    }
    checkWaits(req.waits, req.tty);
    const starting = this.#reserve(req.owner, req.maxSessions).then(async (id) => {
      let session: Session;
      try {
        session = await this.#start(id, req);
      } finally {
        this.#reserved.delete(id);
      }
      if (this.#closing) {
        await this.#terminate([session], "shutdown");
        throw new ShuttingDownError();
      }
      if (req.revoked?.()) {
        // Its owner's sessions were killed while it started: it goes the same way, and the
        // cgroups it emptied are not kept for whoever gets that name next.
        await this.#terminate([session], "revoke");
        session.dispose();
        await this.#opts.cgroups?.forget(req.owner);
        throw new RevokedError();
      }
      return session;
    });
    this.#starting.add(starting);
    let session: Session;
    try {
      session = await starting;
    } finally {
      this.#starting.delete(starting);
    }
    const id = session.id;
    this.#sessions.set(id, session);
    this.#counts.set(session.owner, (this.#counts.get(session.owner) ?? 0) + 1);
    this.#opts.bus.publish({
      type: "begin",
      agent: req.owner,
      session_id: id,
      command: req.cmd,
      workdir: req.workdir,
      tty: req.tty,
    });
    try {
      const collected = await this.#collect(session, req);
      return await this.#result(session, collected, started, req);
    } catch (err) {
      if (err instanceof CallAbandonedError) {
        this.#abandoned(session);
        throw new CallAbandonedError(id);
      }
      throw err;
    }
  }

  /** Tell the event stream that a call on `session` lost its client. */
  #abandoned(session: Session): void {
    this.#opts.bus.publish({ type: "abandoned", agent: session.owner, session_id: session.id });
  }

  /** Run `write_stdin`. */
  async write(req: WriteRequest): Promise<CallResult> {
    const started = performance.now();
    const session = this.get(req.sessionId, req.owner);
    if (req.outputMode === "screen") screenOf(session);
    checkWaits(req.waits, session.tty);
    session.touch();
    if (req.chars.length > 0) {
      this.#opts.bus.publish({
        type: "interaction",
        agent: session.owner,
        session_id: session.id,
        chars: req.chars,
      });
      this.#send(session, req.chars);
    }
    try {
      const collected = await this.#collect(session, req);
      return await this.#result(session, collected, started, req);
    } catch (err) {
      if (err instanceof CallAbandonedError) this.#abandoned(session);
      throw err;
    }
  }

  /**
   * What a session's terminal shows now, with the lines scrolled off since the last look;
   * `InvalidRequestError` for a session started without `screen: true`.
   */
  async screen(id: number, owner?: string): Promise<ScreenSnapshot> {
    const session = this.get(id, owner);
    session.touch();
    return await screenOf(session).snapshot();
  }

  /** Kill a session's whole process tree and return what output was left. */
  async kill(id: number, owner?: string): Promise<KillResult> {
    const session = this.get(id, owner);
    await this.#terminate([session], "kill");
    this.#remove(session);
    return { exit_code: session.exit!.code, output: session.take().text };
  }

  /** Kill every session of `owner` (its credential was revoked); returns how many. */
  async killOwner(owner: string): Promise<number> {
    const sessions = this.#owned(owner);
    for (const s of sessions) this.#remove(s);
    await this.#terminate(sessions, "revoke");
    await this.#opts.cgroups?.forget(owner);
    return sessions.length;
  }

  /** Resize a session's terminal. */
  resize(id: number, size: WindowSize, owner?: string): void {
    const session = this.get(id, owner);
    if (!session.tty) throw new InvalidRequestError("session is not a tty; it cannot be resized");
    session.touch();
    session.child.resize(size);
    session.screen?.resize(size);
  }

  /** Send a signal to a session's process group. */
  signal(id: number, sig: number, owner?: string): void {
    const session = this.get(id, owner);
    session.touch();
    session.child.signal(sig);
  }

  /**
   * Kill every session (server shutdown). From now on `exec` is refused, and a session that was
   * being started is killed as soon as it exists; resolves once all of them are gone.
   */
  async shutdown(): Promise<void> {
    this.#closing = true;
    await Promise.allSettled([...this.#starting]);
    const all = [...this.#sessions.values()];
    await this.#terminate(all, "shutdown", true);
    for (const s of all) this.#remove(s);
    this.#screens.close();
  }

  /**
   * The last resort of a shutdown past its time limit, about to exit: SIGKILL every session's
   * processes now, on this thread, without waiting for them (with cgroups one write kills all
   * of them; else each session's process group and the members of its process session).
   */
  killNow(): void {
    if (this.#opts.cgroups?.killAllNow()) return;
    const live = [...this.#sessions.values()].filter((s) => !s.exit);
    killSessions(live.map((s) => s.child.pid), [SIGKILL]);
  }

  /** Sessions in the store. */
  get size(): number {
    return this.#sessions.size;
  }

  /** Take a session out of the store and drop its emulator. */
  #remove(session: Session): void {
    if (this.#sessions.get(session.id) === session) {
      this.#sessions.delete(session.id);
      const left = this.#counts.get(session.owner)! - 1;
      if (left > 0) this.#counts.set(session.owner, left);
      else this.#counts.delete(session.owner);
    }
    session.dispose();
  }

  /** Sessions of `owner` (all when undefined), oldest first. */
  #owned(owner?: string): Session[] {
    const all = [...this.#sessions.values()];
    return owner === undefined ? all : all.filter((s) => s.owner === owner);
  }

  /** An id for a new session of `owner`, pruning one of its own sessions at its limit. */
  async #reserve(owner: string, maxSessions: number): Promise<number> {
    const live = this.#counts.get(owner) ?? 0;
    let starting = 0;
    for (const o of this.#reserved.values()) if (o === owner) starting++;
    if (live + starting >= maxSessions) {
      const victim = pickPruneVictim(this.#owned(owner));
      if (!victim) {
        // Nothing to prune only while the live ones are all among the protected most recent.
        throw new SessionLimitError(
          `session limit of ${maxSessions} for agent ${owner} reached ` +
            `(${live} live, ${starting} starting) and none may be pruned: the ` +
            `${PROTECTED_RECENT} most recently used live sessions never are` +
            (starting > 0 ? ", nor sessions still starting" : "") +
            "; end one with DELETE /v1/sessions/{id}, or raise max_sessions",
        );
      }
      this.#remove(victim);
      await this.#terminate([victim], "prune");
    }
    let id: number;
    do id = MIN_ID + Math.floor(Math.random() * (MAX_ID - MIN_ID + 1)); while (
      this.#sessions.has(id) || this.#reserved.has(id)
    );
    this.#reserved.set(id, owner);
    return id;
  }

  async #start(id: number, req: ExecRequest): Promise<Session> {
    const { sandbox } = req;
    const { cgroups } = this.#opts;
    const limits = req.memoryBytes === undefined
      ? sandbox.policy.limits
      : { ...sandbox.policy.limits, memoryBytes: req.memoryBytes };
    // Spare cgroups hold open files only to save a start time: when descriptors are short they
    // go first, and this start makes none ahead; nor does the first start after (it took the
    // reserve back), so that the process does not walk straight back to the edge.
    const roomy = this.#descriptors.held;
    const short = !this.#descriptors.replenish();
    if (short) {
      await cgroups?.shed();
      if (!this.#descriptors.replenish()) {
        throw outOfFiles(`fewer than ${2 * DESCRIPTOR_RESERVE} are free since a start ran out`);
      }
    }
    let lease;
    try {
      lease = await this.#opts.pool.acquire(sandbox.domain, sandbox.restriction?.());
    } catch (err) {
      throw outOfDescriptors(err) ? this.#ranOut(err as Error) : diedOr(err);
    }
    let dir: SessionDir | undefined;
    let pipes: ReturnType<typeof openPipes> | undefined;
    let cgroup: SessionCgroup | undefined;
    let gate: Gate | undefined;
    let spawned: Spawned | undefined;
    let screen: Screen | undefined;
    try {
      // First of all: its worker may be started now, which can fail short of descriptors.
      if (req.screen || req.outputMode === "screen") screen = this.#screens.open(req.size);
      dir = await sandbox.session();
      if (dir.uid !== undefined && sandbox.policy.egress && this.#opts.egress) {
        const unregister = this.#opts.egress.register(dir.uid, { sessionId: id, agent: req.owner });
        const { release } = dir;
        dir = { ...dir, release: () => (unregister(), release()) };
      }
      cgroup = cgroups && contain(() => cgroups.create(limits, req.owner, !short));
      gate = cgroup && gateFor(cgroup);
      pipes = req.tty ? undefined : openPipes();
      const env = childEnv(this.#opts.baseEnv, req.workdir, { ...dir.env, ...req.env });
      spawned = await lease.spawner.spawn({
        uid: dir.uid,
        ...sandbox.launch(req, env, gate !== undefined),
        cwd: req.workdir,
        stdio: pipes ? { kind: "pipes", ...pipes.child } : { kind: "pty", size: req.size },
        gate,
      }, lease.slot);
      if (spawned.unplaced) {
        throw new SandboxUnavailableError("cannot put the session's child into its cgroup");
      }
    } catch (err) {
      if (pipes) closeAll([pipes.parent.output, pipes.parent.input]);
      if (gate) closeAll([gate.fd, gate.release, ...gate.procs]);
      gate = undefined;
      // A child let through nothing runs nothing of its command: it is killed with its group
      // (alone in it: it never passed its gate), as is one a dying worker may have started
      // (which may already run: it dies with its group and cgroup). Reap it.
      const child = spawned ?? (err instanceof SpawnFailure ? err.orphan : undefined);
      if (child && (!spawned || spawned.unplaced)) libc().kill(-child.pid, SIGKILL);
      await cgroup?.kill();
      if (child) {
        libc().waitpid(child.pid, new Uint8Array(4), 0);
        if (child.master !== undefined) closeAll([child.master]);
      }
      dir?.release();
      screen?.close();
      lease.release();
      if (err instanceof SpawnFailure && err.kind === "spawn") {
        if (noDescriptorFree(err.code ?? 0)) throw this.#ranOut(err);
        if (err.code === E.ENOSPC && req.tty) throw noTerminalLeft();
        throw spawnRefusal(err, req);
      }
      if (outOfDescriptors(err)) throw this.#ranOut(err as Error);
      throw diedOr(err);
    } finally {
      if (pipes) closeAll([pipes.child.stdin, pipes.child.output]);
      if (gate) closeAll([gate.fd, gate.release, ...gate.procs]);
    }
    if (roomy && cgroup) cgroups?.refill(limits);
    const sessionDir = dir;
    const sessionCgroup = cgroup;
    const session = new Session(
      {
        id,
        owner: req.owner,
        command: req.cmd,
        workdir: req.workdir,
        tty: req.tty,
        profile: sandbox.profile,
        policy: sandbox.policy,
        screen,
      },
      (s, status) => {
        clearTimeout(timeout);
        // Write access granted to its uid goes once nothing of it runs any more (its exit is
        // reported after that); otherwise its directory and uid go now (the uid's next holder
        // waits for the reaper, which kills whatever still runs as it).
        const afterKill = sessionCgroup !== undefined && sessionDir.granted;
        if (!afterKill) {
          const released = sessionDir.release();
          // Without a cgroup a grant goes now, and its exit waits for that too.
          if (sessionDir.granted && released) {
            this.#settling.set(s, released.finally(() => this.#settling.delete(s)));
          }
        }
        if (sessionCgroup) {
          // What its tree used, then (after this exit is reported, once this turn of the event
          // loop is done: a zero-delay timer would put the kill and the cgroup's reuse a
          // millisecond later, in the middle of the next command's start) whatever it left dies.
          // Not once the server shuts down: three cgroup files per session, a second for 10,000.
          if (!this.#closing) s.usage = sessionCgroup.usage();
          const { promise, resolve } = Promise.withResolvers<void>();
          this.#settling.set(s, promise);
          setImmediate(() =>
            sessionCgroup.kill()
              .catch((err) => console.error(`uexec: cannot kill session ${s.id}'s cgroup: ${err}`))
              .finally(async () => {
                this.#cgroups.delete(s);
                try {
                  if (afterKill) await sessionDir.release();
                } finally {
                  this.#settling.delete(s);
                  resolve();
                }
              })
          );
        }
        lease.release();
        this.#opts.bus.publish({
          type: "end",
          agent: s.owner,
          session_id: s.id,
          exit_code: status.code,
          duration_seconds: (performance.now() - s.startedMs) / 1000,
          reason: s.endReason,
          ...(s.usage ? { usage: s.usage } : {}),
        });
      },
    );
    if (sessionCgroup) this.#cgroups.set(session, sessionCgroup);
    if (sessionDir.granted) this.#granted.add(session);
    this.#opts.observer?.started(session, req.execId);
    const master = spawned.master!;
    const fds = pipes
      ? { pid: spawned.pid, tty: false, ...pipes.parent }
      : { pid: spawned.pid, tty: true, output: master, input: master };
    try {
      session.attach(this.#opts.reactor, fds);
    } catch (err) {
      // Its output cannot be watched (the epoll set is out of room): the child dies now.
      abandonChild(fds);
      sessionDir.release();
      lease.release();
      throw outOfDescriptors(err) ? this.#ranOut(err as Error) : err;
    }
    const timeout = req.timeoutMs === undefined
      ? undefined
      : setTimeout(() => this.#terminate([session], "timeout"), req.timeoutMs);
    return session;
  }

  /**
   * A start ran out of descriptors: the reserve and the spare cgroups' files go back to the
   * process, the caller gets 503.
   */
  #ranOut(err: Error): OutOfResourcesError {
    this.#descriptors.spend();
    this.#opts.cgroups?.makeRoom();
    return outOfFiles(err.message);
  }

  /** Collect the call's output, telling its watcher of output as it arrives. */
  async #collect(session: Session, req: ExecRequest | WriteRequest): Promise<Collected> {
    const unwatch = req.onOutput && session.listen({ output: req.onOutput });
    try {
      return await collect(session, {
        yieldMs: req.yieldMs,
        until: req.until,
        signal: req.signal,
        waits: req.waits,
      });
    } finally {
      unwatch?.();
    }
  }

  #send(session: Session, chars: string): void {
    if (session.tty) return session.child.write(this.#encoder.encode(chars));
    for (const part of chars.split(CONTROL_KEYS)) {
      if (part === CTRL_C) session.child.signal(SIGINT);
      else if (part === CTRL_D) session.child.closeStdin();
      else if (part.length > 0) session.child.write(this.#encoder.encode(part));
    }
  }

  async #result(
    session: Session,
    got: Collected,
    started: number,
    req: { maxOutputTokens: number; outputMode?: OutputMode; signal?: AbortSignal },
  ): Promise<CallResult> {
    let text = got.text;
    let screen: ScreenView | undefined;
    if (req.outputMode === "plain") text = session.plain(got.text);
    else session.forgetPlain();
    if (req.outputMode === "screen") {
      const { scrolled, scrolled_lost, ...view } = await screenOf(session).snapshot();
      screen = view;
      text = (scrolled_lost ? `${SCROLLED_LOST}\n` : "") +
        scrolled.map((line) => `${line}\n`).join("");
    }
    const fitted = await this.#opts.truncator.fit(text, req.maxOutputTokens);
    if (req.signal?.aborted) {
      session.restore(got.text);
      throw new CallAbandonedError();
    }
    const result: CallResult = {
      chunk_id: chunkId(),
      wall_time_seconds: (performance.now() - started) / 1000,
      output: fitted.output,
      original_token_count: fitted.originalTokenCount,
      truncated: fitted.truncated,
      sandbox: { profile: session.profile, denied: false },
    };
    if (screen) result.screen = screen;
    if (got.exited) {
      // Write access granted for the session is gone when its exit is reported.
      if (this.#granted.has(session)) await this.#settling.get(session);
      result.exit_code = session.exit!.code;
      if (session.usage) result.usage = session.usage;
      if (session.endReason === "timeout") result.timed_out = true;
      const found = this.#egressDenial(session) ?? detectDenial({
        policy: session.policy,
        exitCode: result.exit_code,
        output: got.text,
        cwd: session.workdir,
      });
      if (found.denied) {
        result.sandbox = { profile: session.profile, denied: true, denial: found.denial };
        if (found.denial) this.#opts.observer?.denied(session, found.denial);
      }
      this.#remove(session);
    } else {
      result.session_id = session.id;
      const input = inputState(session);
      if (input) {
        result.waiting_for_input = input.waiting;
        result.input_echo = input.echo;
      }
    }
    return result;
  }

  /** The first connection the egress proxy refused `session`, as its denial. */
  #egressDenial(session: Session): { denied: true; denial: Denial } | undefined {
    if (!session.policy.egress) return undefined;
    const refused = this.#opts.egress?.takeRefusals(session.id) ?? [];
    // One an approval could open (a name off the list) before one none could (deny, address).
    const first = refused.find((r) => r.rule === NOT_ALLOWED) ?? refused[0];
    if (!first) return undefined;
    return {
      denied: true,
      denial: {
        kind: "network",
        host: first.host,
        port: first.port,
        rule: first.rule,
        evidence: `egress proxy refused ${first.host}:${first.port} (rule ${first.rule})`,
      },
    };
  }

  /**
   * End `sessions` together: SIGHUP and SIGTERM to their whole sessions (with cgroups: to every
   * process in their cgroups), SIGKILL to whatever is left after the grace period (or at once
   * for sessions that had already exited); resolves once the killed processes are gone. With
   * cgroups the SIGKILL is `cgroup.kill`, which nothing escapes; without, one /proc scan per
   * step for the whole batch finds the members of their process sessions. `everything` says
   * that `sessions` are all there are (shutdown): one `cgroup.kill` of this instance's cgroup
   * then kills them all at once.
   */
  async #terminate(sessions: Session[], reason: EndReason, everything = false): Promise<void> {
    const live = sessions.filter((s) => !s.exit);
    for (const s of live) s.endReason = reason;
    const { cgroups } = this.#opts;
    const cgroupOf = (s: Session) => this.#cgroups.get(s);
    if (!cgroups) killSessions(live.map((s) => s.child.pid), [SIGHUP, SIGTERM]);
    else if (everything) {
      // Shutdown: each session's process group, not each cgroup's members (a file read per
      // session, half a second for 10,000); what left its group dies by the one cgroup.kill.
      for (const s of live) for (const sig of [SIGHUP, SIGTERM]) s.child.signal(sig);
    } else for (const s of live) cgroupOf(s)?.signal(SIGHUP, SIGTERM);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const grace = new Promise<void>((r) => timer = setTimeout(r, this.#opts.killGraceMs ?? 1000));
    await Promise.race([Promise.all(live.map((s) => s.closed)), grace]);
    clearTimeout(timer);
    if (cgroups) {
      if (everything) await cgroups.killAll();
      await Promise.all(sessions.map((s) => Promise.all([cgroupOf(s)?.kill(), s.closed])));
    } else {
      const killed = killSessions(sessions.map((s) => s.child.pid), [SIGKILL]);
      await Promise.all([
        ...sessions.map((s) => s.closed),
        whenGone(this.#opts.reactor, killed, KILLED_EXIT_LIMIT_MS),
      ]);
    }
    // Their cgroups emptied and their grants taken back before the kill is reported done.
    await Promise.all(sessions.map((s) => this.#settling.get(s)));
  }
}

/** In `screen` output, in front of the scrolled-off lines when the oldest of them are gone. */
export const SCROLLED_LOST = "…older lines scrolled past the scrollback…";

/** The session's screen, or a 400 saying it has none. */
function screenOf(session: Session) {
  const { screen } = session;
  if (screen) return screen;
  throw new InvalidRequestError(
    `screen: session ${session.id} was started without screen: true, so no terminal emulator ` +
      "follows it; start it with screen: true, or use output_mode raw or plain",
  );
}

/**
 * Descriptors held back for the runtime's own needs when starts run out (it needs one or two at
 * a time); starts resume once twice as many are free, about what one start takes at its peak
 * (terminal or pipes, gate, cgroup files).
 */
export const DESCRIPTOR_RESERVE = 8;

/** `err`, or the caller's 503 when it is a spawner worker's death. */
function diedOr(err: unknown): unknown {
  if (!(err instanceof SpawnFailure) || err.kind !== "died") return err;
  return new SpawnerFailedError(
    "the spawner worker of this command's sandbox died before the command started; nothing " +
      "of it runs. Try again: the next command starts on a fresh spawner worker",
  );
}

/** No pseudo-terminal left on the system: a 503 naming the limit, and the way around it. */
function noTerminalLeft(): OutOfResourcesError {
  const max = readSmallFile("/proc/sys/kernel/pty/max")?.trim();
  return new OutOfResourcesError(
    `no pseudo-terminal is left: the system's limit (kernel.pty.max${max ? ` = ${max}` : ""}), ` +
      "or the terminals a session may hold (UEXEC_MAX_PTYS_PER_SESSION), is reached; nothing was started. End sessions and try again, or use tty: false (pipes " +
      "need no terminal)",
  );
}

function outOfFiles(why: string): OutOfResourcesError {
  return new OutOfResourcesError(
    `the server is out of file descriptors (${why}); ` +
      "nothing was started, try again once sessions have ended",
  );
}

/**
 * Kill a child that was started but could not be attached, with its whole session, reap it
 * (it was SIGKILLed just after its exec, so the wait is immediate) and close our descriptors.
 */
function abandonChild(fds: { pid: number; output: number; input: number }): void {
  // Just started, it is alone in its session and group: no /proc scan (which needs a descriptor).
  libc().kill(-fds.pid, SIGKILL);
  libc().waitpid(fds.pid, new Uint8Array(4), 0);
  closeAll(fds.output === fds.input ? [fds.output] : [fds.output, fds.input]);
}

/** Run a cgroup step; any failure is the sandbox's (the session must not run uncontained). */
function contain<T>(step: () => T): T {
  try {
    return step();
  } catch (err) {
    throw new SandboxUnavailableError(`cannot contain the session in a cgroup: ${err}`, {
      cause: err,
    });
  }
}

/** A gate for a child of `cgroup`: the pipe, and its `cgroup.procs` files opened by us. */
function gateFor(cgroup: SessionCgroup): Gate {
  const procs = contain(() => cgroup.openProcs());
  const [fd, release] = openPipe();
  return { fd, release, procs };
}

/** Pipes for a child without a terminal: its stdin and merged stdout/stderr, and our ends. */
function openPipes() {
  const [stdinRead, stdinWrite] = openPipe();
  const [outRead, outWrite] = openPipe();
  setNonBlocking(stdinWrite);
  setNonBlocking(outRead);
  return {
    child: { stdin: stdinRead, output: outWrite },
    parent: { output: outRead, input: stdinWrite },
  };
}
