/**
 * The application core: every operation of the service, each taking the principal that asks
 * for it. Authorization lives here and only here, so no front door (HTTP today; MCP, the
 * dashboard and WebSockets later) can skip a check: agents reach only their own sessions and
 * approvals (another agent's session is unknown, exactly as a missing one), and deciding
 * approvals and managing agents are the operator's alone.
 *
 * What a request may ask for (the agent's profile cap, a workdir inside the workspace or an
 * operator-listed root, an escalated run's shell from the server's configuration) it decides
 * through exec_scope.ts. It must never run anything for an unauthenticated caller, and never tell one
 * agent anything about another's sessions.
 *
 * @module
 */

import type { ApprovalRecord, ApprovalStore } from "../approvals/store.ts";
import type { LifecycleEvent } from "../events/bus.ts";
import type { EventBus } from "../events/bus.ts";
import { SIGNALS } from "../pty/signals.ts";
import { type SandboxDomains } from "../sandbox/domains.ts";
import { ApiError, InvalidRequestError, RejectedError, RevokedError } from "../errors.ts";
import type { CallResult, KillResult, OutputWatcher } from "../sessions/calls.ts";
import type { SessionManager } from "../sessions/manager.ts";
import type { RingRead } from "../output/output_ring.ts";
import type { Session, SessionInfo } from "../sessions/session.ts";
import { treeUsage, type Usage } from "../sessions/usage.ts";
import type { ScreenSnapshot } from "../output/screen.ts";
import {
  type AgentInfo,
  type AgentRegistry,
  type StoredAgent,
  UnknownAgentError,
} from "./agents.ts";
import { type Agent, ownerOf, type Principal, requireOperator } from "./principal.ts";
import {
  type AgentBody,
  type DecisionBody,
  type ExecBody,
  execYield,
  type ResizeBody,
  waitConditions,
  type WriteBody,
  writeYield,
} from "./schemas.ts";
import { ExecScope, findShell } from "./exec_scope.ts";
import { IdempotentCalls } from "./idempotency.ts";
import type { DiskFloor } from "./disk_floor.ts";
import type { Supervisor } from "./supervisor.ts";
import type { HistoryRecorder } from "../history/recorder.ts";
import type { HistoryDetail, HistoryItem, HistoryScope } from "../history/store.ts";
import { decodeCursor, encodeCursor, type HistoryQuery } from "../history/query.ts";
import type { Metrics } from "../metrics/metrics.ts";
import type { WebSessions } from "./web_sessions.ts";
import type { SignInCodes } from "./sign_in_codes.ts";
import { DashboardSignIn, type SharedSignIn } from "./dashboard_sign_in.ts";
import type { z } from "zod";

/** A history entry that does not exist or is not the caller's (404 `not_found`). */
export class HistoryNotFoundError extends ApiError {
  readonly code = "not_found";
}

/** What the core is built from. */
export interface ServiceDeps {
  /**
   * A fleet node's id (`UEXEC_NODE_ID` with `UEXEC_STORE`): every event a subscriber is told
   * carries it as `node` (absent on one host: its events are as they were).
   */
  node?: string;
  manager: SessionManager;
  supervisor: Supervisor;
  approvals: ApprovalStore;
  domains: SandboxDomains;
  bus: EventBus;
  agents: AgentRegistry;
  /** Base directory for relative workdirs; workdirs must resolve inside it or `allowedRoots`. */
  workspace: string;
  /** More roots workdirs may be in (`UEXEC_ALLOWED_ROOTS`), resolved. */
  allowedRoots: string[];
  /** The server's shell: the default, and the only one an escalated run may use. */
  shell: string;
  /** Live-session limit of an agent that has none of its own. */
  maxSessions: number;
  /** `UEXEC_MEMORY_MAX` and `UEXEC_SESSION_MEMORY_MAX`, in bytes. */
  memory: { max: number; session: number };
  /** Refuses starts while the workspace's or the state's file system is nearly full. */
  diskFloor?: DiskFloor;
  /** The command history; undefined when it is off (`UEXEC_HISTORY=off`). */
  history?: HistoryRecorder;
  metrics?: Metrics;
  /** Signed-in dashboard browsers; absent: the dashboard is off. */
  webSessions?: WebSessions;
  /** The dashboard's outstanding one-time sign-in codes; absent: the dashboard is off. */
  signInCodes?: SignInCodes;
  /** In a fleet: the dashboard's codes and sessions in the store. */
  sharedSignIn?: SharedSignIn;
}

/** How an `exec_command` call arrived. */
export interface ExecCall {
  /** Aborts when the caller went away. */
  signal?: AbortSignal;
  /** The `Idempotency-Key` the caller sent. */
  idempotencyKey?: string;
  /** Told of output as it arrives while the call waits (progress reporting). */
  onOutput?: OutputWatcher;
}

/** The service's operations. */
export class Service {
  #deps: ServiceDeps;
  #idempotent = new IdempotentCalls<CallResult>();
  /** What an `exec_command` may ask for, and what an agent may be capped at. */
  readonly #execScope: ExecScope;
  #vouched = new WeakMap<object, Principal>();

  /** The operator's browser sign-in to the dashboard. */
  readonly dashboard: DashboardSignIn;

  constructor(deps: ServiceDeps) {
    this.#deps = deps;
    this.dashboard = new DashboardSignIn(deps);
    this.#execScope = new ExecScope(deps);
  }

  /**
   * A fleet node vouched for the caller of `request` (it forwarded the call, having
   * authenticated it; see src/http/forward.ts): the request stands for `principal`.
   */
  vouch(request: object, principal: Principal): void {
    this.#vouched.set(request, principal);
  }

  /** Who a fleet node vouched `request` was from, if one did. */
  vouchedFor(request: object): Principal | undefined {
    return this.#vouched.get(request);
  }

  /** The principal of the registered agent `name`, or undefined. */
  registeredAgent(name: string): Agent | undefined {
    return this.#deps.agents.principal(name);
  }

  /** The principal a bearer token stands for, or undefined (see AgentRegistry.authenticate). */
  authenticate(token: string, connection?: object): Principal | undefined {
    return this.#deps.agents.authenticate(token, connection);
  }

  /**
   * `exec_command`. `call.signal` aborts when the caller went away (what it would have been
   * answered waits for the next call); a repeated `call.idempotencyKey` starts nothing new;
   * `call.onOutput` is told of output as it arrives while the call waits.
   */
  async exec(
    principal: Principal,
    body: z.output<typeof ExecBody>,
    call: ExecCall = {},
  ): Promise<CallResult> {
    const started = performance.now();
    try {
      return await this.#execOnce(principal, body, call);
    } finally {
      this.#deps.metrics?.exec((performance.now() - started) / 1000);
    }
  }

  #execOnce(principal: Principal, body: z.output<typeof ExecBody>, call: ExecCall) {
    this.#scope(principal);
    if (call.idempotencyKey !== undefined) {
      return this.#idempotent.run(
        ownerOf(principal),
        call.idempotencyKey,
        body,
        call.signal,
        (signal) => this.#exec(principal, body, { ...call, signal }),
        (sessionId, signal) =>
          this.#deps.manager.write({
            owner: ownerOf(principal),
            sessionId,
            chars: "",
            yieldMs: execYield(body.yield_time_ms),
            maxOutputTokens: body.max_output_tokens,
            until: body.until,
            outputMode: body.output_mode,
            onOutput: call.onOutput,
            signal,
          }),
      );
    }
    return this.#exec(principal, body, call);
  }

  #exec(
    principal: Principal,
    body: z.output<typeof ExecBody>,
    call: ExecCall,
  ): Promise<CallResult> {
    const { supervisor, history } = this.#deps;
    this.#deps.diskFloor?.check();
    const scope = this.#execScope;
    const profile = scope.profile(principal, body.profile);
    const escalation = scope.escalation(principal, body, profile);
    const escalating = Object.keys(escalation).length > 0;
    const cap = scope.cap(principal);
    if (cap && escalating) scope.escalationWithinCap(principal, profile, escalation, cap);
    const workdir = scope.workdir(body.workdir, escalating);
    const shell = findShell(body.shell ?? this.#deps.shell);
    const serverShell = shell === findShell(this.#deps.shell);
    if (escalating && !serverShell) {
      throw new InvalidRequestError(
        `shell: an escalated command runs with the server's shell ${this.#deps.shell}; ` +
          `leave shell out or pass that one (got ${body.shell})`,
      );
    }
    const execId = crypto.randomUUID();
    history?.begin(execId, {
      agent: ownerOf(principal),
      command: body.cmd,
      workdir,
      profile,
      tty: body.tty,
    });
    return supervisor.exec({
      egressCap: principal.role === "agent" ? principal.maxEgress : undefined,
      request: {
        execId,
        owner: ownerOf(principal),
        maxSessions: (principal.role === "agent" ? principal.maxSessions : undefined) ??
          this.#deps.maxSessions,
        memoryBytes: this.#execScope.memory(principal),
        cmd: body.cmd,
        workdir,
        shell,
        login: body.login,
        tty: body.tty,
        size: { cols: body.cols, rows: body.rows },
        env: body.env,
        yieldMs: execYield(body.yield_time_ms),
        maxOutputTokens: body.max_output_tokens,
        until: body.until,
        waits: waitConditions(body),
        timeoutMs: body.timeout_ms,
        screen: body.screen,
        outputMode: body.output_mode,
        onOutput: call.onOutput,
        signal: call.signal,
        revoked: () => !this.#deps.agents.current(principal),
      },
      profile,
      escalation,
      cap,
      serverShell,
      justification: body.justification,
    }).then(
      (result) => {
        history?.settle(execId);
        return result;
      },
      (err) => {
        history?.settle(execId, { rejected: err instanceof RejectedError });
        throw err;
      },
    );
  }

  /**
   * `write_stdin`; `call.signal` aborts when the caller went away (the output waits);
   * `call.onOutput` is told of output as it arrives while the call waits.
   */
  write(
    principal: Principal,
    body: z.output<typeof WriteBody>,
    call: { signal?: AbortSignal; onOutput?: OutputWatcher } = {},
  ): Promise<CallResult> {
    return this.#write(principal, body, writeYield(body.chars, body.yield_time_ms), call);
  }

  #write(
    principal: Principal,
    body: z.output<typeof WriteBody>,
    yieldMs: number,
    call: { signal?: AbortSignal; onOutput?: OutputWatcher } = {},
  ): Promise<CallResult> {
    return this.#deps.manager.write({
      signal: call.signal,
      owner: this.#scope(principal),
      sessionId: body.session_id,
      chars: body.chars,
      yieldMs,
      maxOutputTokens: body.max_output_tokens,
      until: body.until,
      waits: waitConditions(body),
      outputMode: body.output_mode,
      onOutput: call.onOutput,
    });
  }

  /** The sessions the principal may see. */
  sessions(principal: Principal): SessionInfo[] {
    return this.#deps.manager.list(this.#scope(principal));
  }

  /** One session the principal may see. */
  session(principal: Principal, id: number): Session {
    return this.#deps.manager.get(id, this.#scope(principal));
  }

  /** Kill one of the principal's sessions. */
  kill(principal: Principal, id: number): Promise<KillResult> {
    return this.#deps.manager.kill(id, this.#scope(principal));
  }

  /** Resize one of the principal's sessions. */
  resize(principal: Principal, id: number, size: z.output<typeof ResizeBody>): void {
    this.#deps.manager.resize(id, size, this.#scope(principal));
  }

  /** Signal one of the principal's sessions by signal name. */
  signal(principal: Principal, id: number, name: string): void {
    const session = this.session(principal, id);
    const sig = Object.hasOwn(SIGNALS, name) ? SIGNALS[name as keyof typeof SIGNALS] : undefined;
    if (sig === undefined) {
      throw new InvalidRequestError(
        `signal: unknown signal ${JSON.stringify(name)}; use one of ${
          Object.keys(SIGNALS).join(", ")
        }`,
      );
    }
    this.#deps.manager.signal(session.id, sig, this.#scope(principal));
  }

  /**
   * Lifecycle events the principal may see, from now on; returns the unsubscribe function. An
   * agent revoked meanwhile is sent nothing more: its subscription ends (and `ended` is called)
   * at the first event after the revocation, its own sessions' ends included. A dashboard
   * browser session's ends at once when it is signed out (when it expires, at the next event).
   */
  subscribe(
    principal: Principal,
    listener: (event: LifecycleEvent & { node?: string }) => void,
    ended?: () => void,
  ): () => void {
    const owner = this.#scope(principal);
    let open = true;
    let unsubscribe = () => {};
    let unwatch = () => {};
    const stop = () => {
      open = false;
      unsubscribe();
      unwatch();
    };
    const end = () => {
      if (!open) return;
      stop();
      ended?.();
    };
    unsubscribe = this.#deps.bus.subscribe((event) => {
      if (!this.isCurrent(principal)) end();
      else if (owner === undefined || event.agent === owner) {
        const { node } = this.#deps;
        listener(node === undefined ? event : { node, ...event });
      }
    });
    // A dashboard browser session's stream ends as soon as the session does (sign-out).
    unwatch = this.#deps.webSessions?.onEnd(principal, end) ?? unwatch;
    return stop;
  }

  /** Pending approvals: all for the operator, an agent's own (read-only) for an agent. */
  approvals(principal: Principal): ApprovalRecord[] {
    return this.#deps.approvals.list(this.#scope(principal));
  }

  /** Decide an approval (operator only). */
  decide(
    principal: Principal,
    id: string,
    body: z.output<typeof DecisionBody>,
  ): ApprovalRecord {
    requireOperator(principal, "deciding an approval");
    return this.#deps.approvals.decide(id, body.decision, { unsandboxed: body.unsandboxed });
  }

  /** Every agent (operator only). */
  agents(principal: Principal): AgentInfo[] {
    requireOperator(principal, "managing agents");
    return this.#deps.agents.list();
  }

  /** Mint an agent and its token (operator only); the token is shown this once. */
  async createAgent(
    principal: Principal,
    body: z.output<typeof AgentBody>,
  ): Promise<Omit<AgentInfo, "created_at"> & { token: string }> {
    requireOperator(principal, "managing agents");
    const maxWidening = this.#execScope.agentCaps(body);
    const { agent, token } = await this.#deps.agents.create({
      name: body.name,
      maxProfile: body.max_profile,
      maxWidening: maxWidening && Object.keys(maxWidening).length > 0 ? maxWidening : undefined,
      maxSessions: body.max_sessions,
      maxMemoryBytes: body.max_memory_bytes,
      maxEgress: body.max_egress,
    });
    return {
      name: agent.name,
      token,
      max_profile: agent.max_profile,
      max_widening: agent.max_widening,
      max_sessions: agent.max_sessions,
      max_memory_bytes: agent.max_memory_bytes,
      max_egress: agent.max_egress,
    };
  }

  /**
   * Revoke an agent (operator only): its token stops working now, its pending approvals are
   * denied and its sessions killed.
   */
  async revokeAgent(
    principal: Principal,
    name: string,
  ): Promise<AgentInfo & { sessions_killed: number }> {
    requireOperator(principal, "managing agents");
    const agent = await this.#deps.agents.revoke(name);
    return { ...agent, sessions_killed: await this.#revoked(name) };
  }

  /**
   * The fleet's store holds the agents `agents` now (another node minted or revoked one): each
   * agent gone from it is revoked here too (its streams end, its approvals are denied, its
   * sessions on this node killed).
   */
  async adoptAgents(agents: StoredAgent[]): Promise<void> {
    const gone = this.#deps.agents.replace(agents);
    await Promise.all(gone.map((name) => this.#revoked(name)));
  }

  /** What revoking the agent `name` ends on this node; returns how many sessions were killed. */
  #revoked(name: string): Promise<number> {
    // Told to every stream now: the agent's own ones end at it (see subscribe), idle or not.
    this.#deps.bus.publish({ type: "agent_revoked", agent: name });
    // Nothing of it carries over to an agent minted under its name later: that is another party.
    this.#deps.approvals.revokeAgent(name);
    this.#idempotent.forgetOwner(name);
    return this.#deps.manager.killOwner(name);
  }

  // Output modes (issue 12): the terminal screen of a session.

  /**
   * What one of the principal's sessions shows on its terminal now, with the lines scrolled
   * off since the last look; 400 for a session started without `screen: true`.
   */
  screen(principal: Principal, id: number): Promise<ScreenSnapshot> {
    return this.#deps.manager.screen(id, this.#scope(principal));
  }

  /** CPU time and resident memory of each session the principal may see, where readable. */
  sessionUsage(principal: Principal): ({ session_id: number } & Usage)[] {
    return this.sessions(principal).flatMap((info) => {
      const usage = treeUsage(info.pid);
      return usage ? [{ session_id: info.session_id, ...usage }] : [];
    });
  }

  // --- MCP front door (issue 12) ---

  /**
   * The principal of the registered agent `name`, for a front door whose caller is not
   * authenticated by a token but by who started it (the MCP stdio server runs as, and for, the
   * user who launched it, who can read the state directory anyway).
   */
  agent(name: string): Agent {
    const agent = this.#deps.agents.principal(name);
    if (!agent) throw new UnknownAgentError(`no agent named ${JSON.stringify(name)}`);
    return agent;
  }

  // History and metrics (issue 13).

  /**
   * A page of command history, newest first: every agent's for the operator (optionally one
   * agent's), an agent's own for an agent, whatever agent it asks for.
   */
  async history(
    principal: Principal,
    query: z.output<typeof HistoryQuery>,
  ): Promise<{ items: HistoryItem[]; next_cursor: string | null }> {
    const history = this.#historyOn();
    const own = this.#historyScope(principal);
    const since = query.since === undefined ? undefined : Date.parse(query.since);
    const after = query.cursor === undefined ? undefined : decodeCursor(query.cursor);
    if (query.cursor !== undefined && after === undefined) {
      throw new InvalidRequestError("cursor: not a cursor from a previous page");
    }
    const page = await history.list({
      agent: own?.agent ?? query.agent,
      status: query.status,
      q: query.q,
      sinceMs: own ? Math.max(own.sinceMs, since ?? own.sinceMs) : since,
      limit: query.limit,
      after,
    });
    return { items: page.items, next_cursor: page.next ? encodeCursor(page.next) : null };
  }

  /** One command of the history with its output tail; another agent's is not found. */
  async historyEntry(principal: Principal, id: string): Promise<HistoryDetail> {
    const entry = await this.#historyOn().get(id, this.#historyScope(principal));
    if (!entry) throw new HistoryNotFoundError(`no history entry with id ${JSON.stringify(id)}`);
    return entry;
  }

  /** The Prometheus exposition (operator only). */
  metrics(principal: Principal): Promise<{ text: string; contentType: string }> {
    requireOperator(principal, "reading metrics");
    if (!this.#deps.metrics) throw new HistoryNotFoundError("metrics are off");
    return this.#deps.metrics.scrape();
  }

  /**
   * What of the history `principal` may read: all of it (the operator), or what the agent ran
   * itself, from its minting on: an agent minted again under a revoked one's name is another
   * party, and does not read what that one ran.
   */
  #historyScope(principal: Principal): HistoryScope | undefined {
    const agent = this.#scope(principal);
    if (agent === undefined || principal.role !== "agent") return undefined;
    return { agent, sinceMs: this.#deps.agents.mintedMs(principal) };
  }

  #historyOn(): HistoryRecorder {
    if (!this.#deps.history) {
      throw new HistoryNotFoundError("the history is off on this server (UEXEC_HISTORY=off)");
    }
    return this.#deps.history;
  }

  // --- Resumable output (issue 11): reading a session's history by offset. ---

  /**
   * What one of the principal's sessions' history holds from offset `since` (all it holds when
   * absent), without taking it from the session.
   */
  output(principal: Principal, id: number, since?: number): RingRead & {
    exitCode?: number;
  } {
    const session = this.session(principal, id);
    const { ring } = session;
    if (since !== undefined && since > ring.end) {
      throw new InvalidRequestError(
        `since: offset ${since} is past the end of the output (${ring.end})`,
      );
    }
    return { ...ring.read(since ?? ring.start), exitCode: session.exit?.code };
  }

  // --- WebSocket front door (issue 14) ---

  /**
   * `write_stdin` for a front door that pushes output as it comes (the WebSocket): as `write`,
   * except that `yield_time_ms: 0` returns at once with whatever is pending, since the caller
   * reads the rest from its subscription. Over HTTP the clamp stays (Codex's rule).
   */
  writeStreaming(principal: Principal, body: z.output<typeof WriteBody>): Promise<CallResult> {
    return body.yield_time_ms === 0 ? this.#write(principal, body, 0) : this.write(principal, body);
  }

  /**
   * True while `principal`'s credential is registered (not revoked; an agent minted again under
   * its name is another party): a long-lived connection's check.
   */
  isCurrent(principal: Principal): boolean {
    return this.#deps.agents.current(principal) &&
      (this.#deps.webSessions?.current(principal) ?? true);
  }

  /**
   * The owner an operation is scoped to (none for the operator, who sees everything);
   * `RevokedError` for an agent revoked since its request was let in.
   */
  #scope(principal: Principal): string | undefined {
    if (principal.role === "operator") return undefined;
    if (!this.#deps.agents.current(principal)) throw new RevokedError();
    return principal.name;
  }
}
