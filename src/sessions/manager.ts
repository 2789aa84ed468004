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

import type { EndReason, EventBus } from "../events/bus.ts";
import { DescriptorReserve } from "../io/descriptor_reserve.ts";
import type { Reactor } from "../io/reactor.ts";
import { type WindowSize } from "../pty/open.ts";
import { whenGone } from "../pty/gone.ts";
import { killSessions, SIGNALS } from "../pty/signals.ts";
import type { Truncator } from "../output/truncator.ts";
import { ScreenHost, type ScreenSnapshot, type ScreenView } from "../output/screen.ts";
import type { CgroupHost } from "../sandbox/containment/cgroups.ts";
import type { SessionCgroup } from "../sandbox/containment/session_cgroup.ts";
import { type Denial, detectDenial } from "../sandbox/policy/denial.ts";
import { type SpawnerPool } from "../workers/pool.ts";
import { collect, type Collected } from "./collect.ts";
import {
  CallAbandonedError,
  InvalidRequestError,
  RevokedError,
  SessionLimitError,
  ShuttingDownError,
  UnknownSessionError,
} from "../errors.ts";
import type { CallResult, ExecRequest, KillResult, OutputMode, WriteRequest } from "./calls.ts";
import type { Session, SessionInfo } from "./session.ts";
import {
  DESCRIPTOR_RESERVE,
  type EgressSessions,
  type SessionObserver,
  type StartDeps,
  startSession,
} from "./start.ts";
import { checkWaits, inputState } from "./waits.ts";

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
  /**
   * This node's id and the base of its session ids (a fleet node's ordinal span, so ids are
   * unique across the fleet; 0 on one host).
   */
  node?: { id: string; idBase: number };
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
  /** Sessions holding write grants (see sandbox/grants/write_grant.ts). */
  #granted = new WeakSet<Session>();
  /** What each start is given: the settings, and the books above it enters sessions in. */
  #startDeps: StartDeps;
  #node: { id: string; idBase: number };

  constructor(opts: ManagerOptions) {
    this.#opts = opts;
    this.#node = opts.node ?? { id: Deno.hostname(), idBase: 0 };
    this.#screens = opts.screens ?? new ScreenHost();
    this.#startDeps = {
      ...opts,
      // Descriptors kept for the runtime, given up when a start runs out (see DescriptorReserve).
      descriptors: opts.descriptors ?? new DescriptorReserve(DESCRIPTOR_RESERVE),
      screens: this.#screens,
      sessionCgroups: this.#cgroups,
      settling: this.#settling,
      granted: this.#granted,
      node: this.#node.id,
      closing: () => this.#closing,
      terminate: (sessions, reason) => this.#terminate(sessions, reason),
    };
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
        session = await startSession(this.#startDeps, id, req);
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
    this.#opts.cgroups?.closing();
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
    const base = this.#node.idBase;
    do id = base + MIN_ID + Math.floor(Math.random() * (MAX_ID - MIN_ID + 1)); while (
      this.#sessions.has(id) || this.#reserved.has(id)
    );
    this.#reserved.set(id, owner);
    return id;
  }

  /**
   * Collect the call's output, telling its watcher of output as it arrives. Meanwhile a screen
   * session runs at its normal weight (see Session.attend), and a session without a screen has
   * the screens no call waits on give way to it (see ScreenHost.waitElsewhere).
   */
  async #collect(session: Session, req: ExecRequest | WriteRequest): Promise<Collected> {
    const unwatch = req.onOutput && session.listen({ output: req.onOutput });
    const unattend = session.screen ? session.attend() : this.#screens.waitElsewhere();
    try {
      return await collect(session, {
        yieldMs: req.yieldMs,
        until: req.until,
        signal: req.signal,
        waits: req.waits,
      });
    } finally {
      unattend();
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
      // The proxy runs on its own thread: what it refused this session is all here after this.
      if (session.policy.egress) await this.#opts.egress?.settle();
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
    // At shutdown the grace also ends once nothing runs in any session cgroup: their ends,
    // recorded one by one on this thread, need not be waited for before the kill and the sweep.
    const all = everything ? cgroups?.watchAll() : undefined;
    await Promise.race([
      Promise.all(live.map((s) => s.closed)),
      grace,
      all?.emptied() ?? grace,
    ]);
    all?.close();
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
