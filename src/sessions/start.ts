/**
 * Starting one session: the transaction behind `exec_command` that takes, in order, a spawner
 * worker bound to the sandbox's domain, the session's terminal emulator (screen sessions), its
 * private directories and uid (registered with the egress proxy), its cgroup and the gate its
 * child waits at, its pipes (without a terminal), and the child itself; then it builds the
 * {@link Session}, whose end gives back what the session still holds.
 *
 * A failure on the way undoes all of it in one place, in reverse (the `catch` of
 * {@link startSession}): our ends of the pipes and the gate are closed, a child that may have
 * started is killed with its group and cgroup and reaped, then the directories, the emulator and
 * the worker are released, and the error becomes the caller's (400 for what the request asked,
 * 503 for what ran out). A child that runs but cannot be watched (no descriptor left for its
 * pidfd) is killed and reaped the same way ({@link abandonChild}). It must never leave a child
 * running that the store does not hold, nor hold a resource of a start that failed.
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
import { InvalidRequestError, OutOfResourcesError, SpawnerFailedError } from "../errors.ts";
import type { DescriptorReserve } from "../io/descriptor_reserve.ts";
import type { Reactor } from "../io/reactor.ts";
import type { Screen, ScreenHost } from "../output/screen.ts";
import { openPipe, setNonBlocking } from "../pty/open.ts";
import { SIGNALS } from "../pty/signals.ts";
import type { Gate, Spawned } from "../pty/spawn.ts";
import type { Placement } from "../pty/clone_into_cgroup.ts";
import type { CgroupHost } from "../sandbox/containment/cgroups.ts";
import type { SessionCgroup } from "../sandbox/containment/session_cgroup.ts";
import type { Denial } from "../sandbox/policy/denial.ts";
import type { SessionDir } from "../sandbox/domains.ts";
import { SandboxUnavailableError } from "../sandbox/errors.ts";
import { type SpawnerPool, SpawnFailure } from "../workers/pool.ts";
import type { ExecRequest } from "./calls.ts";
import { childEnv } from "./env.ts";
import { Session } from "./session.ts";

/** Hooks told of every session (history, metrics); they must not throw or block. */
export interface SessionObserver {
  /** A session was created, before any of its output is read. */
  started(session: Session, execId: string | undefined): void;
  /** The sandbox denied the session's command (told once, when its exit is reported). */
  denied(session: Session, denial: Denial): void;
}

/** What the manager needs of the egress gateway (src/egress/gateway.ts). */
export interface EgressSessions {
  /** Connections from `uid` are `sessionId`'s once resolved, until the function it gives is called. */
  register(uid: number, session: { sessionId: number; agent: string }): Promise<() => void>;
  /** What the proxy refused `sessionId` so far (taken); complete once `settle` resolved. */
  takeRefusals(sessionId: number): { host: string; port: number; rule: string }[];
  /** Resolves once every connection the proxy recorded before the call has been reported. */
  settle(): Promise<void>;
}

/** What a start needs: the manager's settings, and its books the session is entered in. */
export interface StartDeps {
  reactor: Reactor;
  pool: SpawnerPool;
  bus: EventBus;
  baseEnv: Record<string, string>;
  observer?: SessionObserver;
  /** Each session's cgroup; without it sessions are contained by their process group only. */
  cgroups?: CgroupHost;
  egress?: EgressSessions;
  /** The process's descriptor reserve (see {@link DESCRIPTOR_RESERVE}). */
  descriptors: DescriptorReserve;
  /** Where `screen` sessions' emulators run. */
  screens: ScreenHost;
  /** Each live session's cgroup: entered here, left once its cgroup is emptied. */
  sessionCgroups: Map<Session, SessionCgroup>;
  /** Ended sessions whose cgroup is being emptied (write grants go after). */
  settling: Map<Session, Promise<void>>;
  /** The node sessions run on (`UEXEC_NODE_ID`). */
  node: string;
  /** Sessions holding write grants (see sandbox/write_grant.ts). */
  granted: WeakSet<Session>;
  /** Whether the server is shutting down (its sessions' usage is then not read). */
  closing(): boolean;
  /** End sessions (a session's `timeoutMs` passed). */
  terminate(sessions: Session[], reason: EndReason): Promise<void>;
}

const SIGKILL = SIGNALS.SIGKILL;

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

/**
 * Start session `id` for `req` under its sandbox choice: the session, attached to the reactor
 * and entered in `deps`' books, or the error of the step that failed with nothing left behind.
 */
export async function startSession(
  deps: StartDeps,
  id: number,
  req: ExecRequest,
): Promise<Session> {
  const { sandbox } = req;
  const { cgroups } = deps;
  const limits = req.memoryBytes === undefined
    ? sandbox.policy.limits
    : { ...sandbox.policy.limits, memoryBytes: req.memoryBytes };
  // Spare cgroups hold open files only to save a start time: when descriptors are short they
  // go first, and this start makes none ahead; nor does the first start after (it took the
  // reserve back), so that the process does not walk straight back to the edge.
  const roomy = deps.descriptors.held;
  const short = !deps.descriptors.replenish();
  if (short) {
    await cgroups?.shed();
    if (!deps.descriptors.replenish()) {
      throw outOfFiles(`fewer than ${2 * DESCRIPTOR_RESERVE} are free since a start ran out`);
    }
  }
  let lease;
  try {
    lease = await deps.pool.acquire(sandbox.domain, sandbox.restriction?.());
  } catch (err) {
    throw outOfDescriptors(err) ? ranOut(deps, err as Error) : diedOr(err);
  }
  let dir: SessionDir | undefined;
  let pipes: ReturnType<typeof openPipes> | undefined;
  let cgroup: SessionCgroup | undefined;
  let gate: Gate | undefined;
  let placement: Placement | undefined;
  let spawned: Spawned | undefined;
  let screen: Screen | undefined;
  try {
    // First of all: its worker may be started now, which can fail short of descriptors.
    if (req.screen || req.outputMode === "screen") screen = deps.screens.open(req.size);
    dir = await sandbox.session();
    if (dir.uid !== undefined && sandbox.policy.egress && deps.egress) {
      const unregister = await deps.egress.register(dir.uid, { sessionId: id, agent: req.owner });
      const { release } = dir;
      dir = { ...dir, release: () => (unregister(), release()) };
    }
    cgroup = cgroups && contain(() => cgroups.create(limits, req.owner, !short));
    const env = childEnv(deps.baseEnv, req.workdir, { ...dir.env, ...req.env });
    // Started inside its cgroups where the spawning thread can (no seccomp filter, no uid
    // switch, a path to execute, room in `pids.max` for the thread while it is there); else
    // it waits at its gate until it is placed.
    let launched = sandbox.launch(req, env, false);
    const direct = cgroup?.placeable && !sandbox.restriction && dir.uid === undefined &&
      launched.file.startsWith("/") && (limits.maxProcesses ?? Infinity) >= 2;
    if (cgroup && direct) placement = contain(() => cgroup!.openPlacement());
    else if (cgroup) {
      gate = gateFor(cgroup);
      launched = sandbox.launch(req, env, true);
    }
    pipes = req.tty ? undefined : openPipes();
    spawned = await lease.spawner.spawn({
      uid: dir.uid,
      ...launched,
      cwd: req.workdir,
      stdio: pipes ? { kind: "pipes", ...pipes.child } : { kind: "pty", size: req.size },
      gate,
      placement,
    }, lease.slot);
    if (spawned.unplaced) {
      throw new SandboxUnavailableError("cannot put the session's child into its cgroup");
    }
  } catch (err) {
    if (pipes) closeAll([pipes.parent.output, pipes.parent.input]);
    if (gate) closeAll([gate.fd, gate.release, ...gate.procs]);
    if (placement) closeAll([placement.cgroup, ...placement.tasks]);
    gate = placement = undefined;
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
      if (noDescriptorFree(err.code ?? 0)) throw ranOut(deps, err);
      if (err.code === E.ENOSPC && req.tty) throw noTerminalLeft();
      throw spawnRefusal(err, req);
    }
    if (outOfDescriptors(err)) throw ranOut(deps, err as Error);
    throw diedOr(err);
  } finally {
    if (pipes) closeAll([pipes.child.stdin, pipes.child.output]);
    if (gate) closeAll([gate.fd, gate.release, ...gate.procs]);
    if (placement) closeAll([placement.cgroup, ...placement.tasks]);
  }
  if (roomy && cgroup) cgroups?.refill(limits);
  const sessionDir = dir;
  const sessionCgroup = cgroup;
  const session = new Session(
    {
      id,
      node: deps.node,
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
          deps.settling.set(s, released.finally(() => deps.settling.delete(s)));
        }
      }
      if (sessionCgroup) {
        // What its tree used, then (after this exit is reported, once this turn of the event
        // loop is done: a zero-delay timer would put the kill and the cgroup's reuse a
        // millisecond later, in the middle of the next command's start) whatever it left dies.
        // Not once the server shuts down: three cgroup files per session, a second for 10,000.
        if (!deps.closing()) s.usage = sessionCgroup.usage();
        const { promise, resolve } = Promise.withResolvers<void>();
        deps.settling.set(s, promise);
        setImmediate(() =>
          sessionCgroup.kill()
            .catch((err) => console.error(`uexec: cannot kill session ${s.id}'s cgroup: ${err}`))
            .finally(async () => {
              deps.sessionCgroups.delete(s);
              try {
                if (afterKill) await sessionDir.release();
              } finally {
                deps.settling.delete(s);
                resolve();
              }
            })
        );
      }
      lease.release();
      deps.bus.publish({
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
  if (sessionCgroup) deps.sessionCgroups.set(session, sessionCgroup);
  if (sessionDir.granted) deps.granted.add(session);
  deps.observer?.started(session, req.execId);
  const master = spawned.master!;
  const fds = pipes
    ? { pid: spawned.pid, tty: false, ...pipes.parent }
    : { pid: spawned.pid, tty: true, output: master, input: master };
  try {
    session.attach(deps.reactor, fds);
  } catch (err) {
    // Its output cannot be watched (the epoll set is out of room): the child dies now.
    abandonChild(fds);
    sessionDir.release();
    lease.release();
    throw outOfDescriptors(err) ? ranOut(deps, err as Error) : err;
  }
  const timeout = req.timeoutMs === undefined
    ? undefined
    : setTimeout(() => deps.terminate([session], "timeout"), req.timeoutMs);
  return session;
}

/**
 * A start ran out of descriptors: the reserve and the spare cgroups' files go back to the
 * process, the caller gets 503.
 */
function ranOut(deps: StartDeps, err: Error): OutOfResourcesError {
  deps.descriptors.spend();
  deps.cgroups?.makeRoom();
  return outOfFiles(err.message);
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
