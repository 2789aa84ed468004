/**
 * The service assembled from its parts: the reactor, the spawner pool, the sandbox domains, the
 * session manager, the approvals, the credentials, the history, the metrics and the log behind
 * the application core. Every front
 * door that runs the service in its own process (the HTTP server, the MCP stdio server) starts
 * one and stops it, killing every session on the way out so no child outlives it. It knows no
 * front door.
 *
 * @module
 */

import { ApprovalStore } from "./approvals/store.ts";
import type { Config } from "./config.ts";
import { EventBus } from "./events/bus.ts";
import { Reactor } from "./io/reactor.ts";
import { Truncator } from "./output/truncator.ts";
import { SandboxDomains } from "./sandbox/domains.ts";
import { type AgentBackend, AgentRegistry, type TokenSources } from "./service/agents.ts";
import { type FleetMember, openFleet } from "./fleet/fleet.ts";
import { FleetApprovals } from "./fleet/approvals.ts";
import { FleetHistory } from "./fleet/history.ts";
import { FleetSignIn } from "./fleet/dashboard.ts";
import { type FleetStore, StoreUnavailableError } from "./fleet/store.ts";
import { FleetTokenError } from "./fleet/agents.ts";
import { OPERATOR, OPERATOR_OWNER } from "./service/principal.ts";
import { Service } from "./service/service.ts";
import { StateDir, StateDirError } from "./service/state_dir.ts";
import { WebSessions } from "./service/web_sessions.ts";
import { SignInCodes } from "./service/sign_in_codes.ts";
import { Supervisor } from "./service/supervisor.ts";
import { baseEnv } from "./sessions/env.ts";
import { SessionManager } from "./sessions/manager.ts";
import { DESCRIPTOR_RESERVE } from "./sessions/start.ts";
import { DescriptorReserve } from "./io/descriptor_reserve.ts";
import { Spawner, SpawnerPool } from "./workers/pool.ts";
import { EgressGateway } from "./egress/gateway.ts";
import { HistoryRecorder } from "./history/recorder.ts";
import { HistoryStore } from "./history/store.ts";
import { HistoryWriter } from "./history/writer.ts";
import { Logger } from "./log.ts";
import { Metrics } from "./metrics/metrics.ts";
import { DiskFloor } from "./service/disk_floor.ts";
import type { ContainmentReport } from "./sandbox/containment/cgroups.ts";
import { openContainment } from "./sandbox/containment/containment.ts";
import { ScreenHost } from "./output/screen.ts";
import { operatorGitIdentity } from "./sandbox/identity/git_config.ts";
import { hostGitHint } from "./sandbox/identity/host_git.ts";
import { GrantJournal } from "./sandbox/grants/grant_journal.ts";

/** A running service. */
export interface Runtime {
  service: Service;
  /** Where the operator's and the default agent's tokens are (never the tokens). */
  tokens: TokenSources;
  /** Live sessions. */
  readonly sessions: number;
  /** The request and lifecycle log (`UEXEC_LOG`). */
  log: Logger;
  /** How sessions are contained and limited, for `/healthz`. */
  containment: ContainmentReport;
  /** This node's membership of a fleet (`UEXEC_STORE`); absent on one host. */
  fleet?: FleetMember;
  /** Where the shared state is kept, for `/healthz`. */
  storeHealth(): Promise<Record<string, unknown>>;
  /** Whether the history can be written, for `/healthz`. */
  historyHealth(): Promise<Record<string, unknown>>;
  /** Deny pending approvals and kill every session; the calls waiting on them return. */
  stopSessions(): Promise<void>;
  /** SIGKILL every session's processes now, without waiting (a shutdown past its limit). */
  killNow(): void;
  /**
   * Release the workers, the reactor and the sandbox domains (after `stopSessions`), then wait
   * until every log line is written.
   */
  close(): Promise<void>;
}

/**
 * Parts a test puts in place of the real ones (passed in code only: nothing in a request, the
 * environment or a flag reaches them).
 */
export interface RuntimeParts {
  /** The spawner workers' module: a wrapper of `src/workers/spawner.ts` that can die. */
  spawnerModule?: URL;
}

/** Start the service described by `config`; resolves once its spawners are ready. */
export async function startRuntime(config: Config, parts: RuntimeParts = {}): Promise<Runtime> {
  const state = openStateDir(config);
  const log = new Logger(config.log);
  const fleet = config.store ? await joinStore(config, state, log) : undefined;
  const agents = openAgents(config, state, fleet?.agents);
  const reactor = new Reactor();
  const bus = new EventBus();
  const nodes = await fleet?.join((node) =>
    bus.publish({ type: "node_lost", agent: OPERATOR_OWNER, node })
  );
  let metrics: Metrics | undefined = undefined;
  const egress = new EgressGateway({
    hostsFile: config.egress.hostsFile,
    allowPrivate: config.egress.allowPrivate,
    onConnection: (event) => bus.publish({ type: "egress", ...event }),
  });
  const pool = new SpawnerPool({
    module: parts.spawnerModule,
    egress: (netns, restriction) => egress.open(netns, restriction.policy.egress!),
  });
  const truncator = new Truncator();
  bus.subscribe((event) => log.event(event));
  const shared = fleet && nodes ? { store: fleet.store, node: nodes.id } : undefined;
  const history = config.history ? openHistory(config, state, bus, log, shared) : undefined;
  // One reserve for the process: starts spend it when they run out, kills when they cannot open.
  const descriptors = new DescriptorReserve(DESCRIPTOR_RESERVE);
  const containment = await openContainment(
    reactor,
    config.containment,
    config.cgroupRoot,
    descriptors,
    config.memoryMax,
  );
  if (containment.reaped > 0) {
    log.warn("dead_instance_reaped", { cgroups: containment.reaped });
  }
  // Their processes are dead now (with cgroups); their files may be large: removed meanwhile.
  const leftovers = SandboxDomains.removeDead().then(
    (directories) => directories > 0 && log.warn("dead_instance_dirs_removed", { directories }),
    (err) => log.warn("dead_instance_dirs_failed", { error: String(err) }),
  );
  if (containment.report.reason) {
    log.warn("containment_process_group", { reason: containment.report.reason });
  }
  const manager = new SessionManager({
    reactor,
    cgroups: containment.host,
    screens: new ScreenHost({ weight: containment.host?.screenCpu }),
    descriptors,
    pool,
    bus,
    truncator,
    baseEnv: baseEnv(Deno.env.toObject()),
    egress,
    node: { id: nodes?.id ?? config.node.id, idBase: nodes?.idBase ?? 0 },
    observer: {
      started(session, execId) {
        history?.recorder?.watch(session, execId);
        metrics?.watch(session);
      },
      denied(session, denial) {
        history?.recorder?.denied(session, denial);
        metrics?.denied(denial);
      },
    },
  });
  metrics = new Metrics({
    bus,
    sessions: () => manager.list(),
    workers: () => pool.workers(),
    agents: () => [OPERATOR_OWNER, ...agents.list().map((agent) => agent.name)],
    profiles: [...config.profiles.keys()],
    node: nodes?.id,
  });
  const domains = new SandboxDomains({
    profiles: config.profiles,
    home: Deno.env.get("HOME") ?? "/root",
    serverPid: Deno.pid,
    workspace: config.workspace,
    hidden: [state.path],
    reactor,
    gitIdentity: await operatorGitIdentity(),
    grantJournal: new GrantJournal(state.file("grants")),
    tmpBytes: config.memoryMax,
    maxPtys: config.maxPtysPerSession,
    views: { maxAgeMs: config.viewMaxAgeMs },
    // The session uids' reaper: an unrestricted root spawner (sandbox/ imports no workers/).
    reaper: () => new Spawner(),
  });
  const gitHint = await hostGitHint();
  if (gitHint !== null) log.warn("host_git", { hint: gitHint });
  // Before any session can be handed a uid a dead server's grant still names.
  const grants = await domains.takeBackDeadGrants();
  if (grants.takenBack > 0) log.warn("dead_grants_taken_back", { grants: grants.takenBack });
  for (const error of grants.failed) log.warn("dead_grant_failed", { error });
  // In a fleet an approval's event is told once the store holds it (any node lists it then).
  const fleetApprovals = fleet && nodes ? new FleetApprovals(fleet.store, nodes.id) : undefined;
  const approvals = new ApprovalStore({
    onEvent: (event) =>
      fleetApprovals
        ? fleetApprovals.record(event).then(() => bus.publish(event))
        : bus.publish(event),
  });
  const supervisor = new Supervisor({
    manager,
    domains,
    approvals,
    policy: config.approvalPolicy,
    defaultProfile: config.defaultProfile,
    approvalTimeoutMs: config.approvalTimeoutMs,
  });
  // In a fleet the dashboard's codes and browser sessions are the store's (any node redeems).
  const sharedSignIn = fleet && config.dashboard ? new FleetSignIn(fleet.store) : undefined;
  const service = new Service({
    node: nodes?.id,
    manager,
    supervisor,
    approvals,
    domains,
    bus,
    agents,
    workspace: config.workspace,
    allowedRoots: config.allowedRoots,
    shell: config.shell,
    maxSessions: config.maxSessions,
    memory: { max: config.memoryMax, session: config.sessionMemoryMax },
    diskFloor: new DiskFloor(
      [{ what: "workspace", path: config.workspace }, {
        what: "state directory",
        path: state.path,
      }],
      config.diskFloorBytes,
    ),
    history: history?.recorder,
    metrics,
    webSessions: config.dashboard
      ? new WebSessions({ ttlMs: config.dashboardSessionMs })
      : undefined,
    signInCodes: config.dashboard ? new SignInCodes({ ttlMs: config.dashboardCodeMs }) : undefined,
    sharedSignIn,
  });
  await pool.warmedUp();
  // Sign-outs on any node end this node's copies of those browser sessions.
  await sharedSignIn?.follow((digest) => service.dashboard.ended(digest));
  // The store back after an outage: what the history kept for it is written now (not at this
  // node's next command), sign-outs missed meanwhile are caught up, then the operator is told.
  await fleet?.store.followReconnects(() => {
    const dashboard = service.dashboard.recheck().catch((err) =>
      log.warn("dashboard_recheck_failed", { error: (err as Error).message })
    );
    void Promise.all([history?.health(), dashboard]).then(() =>
      bus.publish({ type: "store_reconnected", agent: OPERATOR_OWNER, node: nodes!.id })
    );
  });
  const member = fleet && nodes && fleetApprovals
    ? await fleet.member(nodes, fleetApprovals, (stored) => service.adoptAgents(stored))
    : undefined;
  // Decisions posted on other nodes for approvals raised here (the operator's, checked there).
  await fleetApprovals?.follow((id, decision, unsandboxed) =>
    service.decide(OPERATOR, id, { decision, unsandboxed })
  );
  return {
    service,
    fleet: member,
    tokens: agents.sources,
    get sessions() {
      return manager.size;
    },
    log,
    containment: containment.report,
    historyHealth: async () => await history?.health() ?? { ok: true, enabled: false },
    storeHealth: async () =>
      fleet ? { node: config.node.id, ...await fleet.store.health() } : { kind: "local" },
    async stopSessions() {
      approvals.close();
      await manager.shutdown();
    },
    killNow: () => manager.killNow(),
    async close() {
      await containment.host?.close();
      await pool.close();
      egress.close();
      await reactor.close();
      truncator.close();
      await domains.close();
      await leftovers;
      metrics.close();
      await history?.recorder?.close();
      await fleet?.close(nodes);
      await log.close();
    },
  };
}

/**
 * The fleet's store (`UEXEC_STORE`); one that stays unreachable past its retry bound, or holds
 * other tokens than this node's, is a {@link StateDirError} that says so, and nothing starts.
 */
async function joinStore(config: Config, state: StateDir, log: Logger) {
  try {
    return await openFleet(config, state, log);
  } catch (err) {
    if (err instanceof FleetTokenError || err instanceof StoreUnavailableError) {
      throw new StateDirError(err.message);
    }
    throw err;
  }
}

/**
 * The state directory and the credentials in it (or, in a fleet, in the store: `backend`); any
 * problem with them (modes, a malformed registry) is a {@link StateDirError} that says what to
 * fix, and nothing starts.
 */
function openStateDir(config: Config): StateDir {
  try {
    return new StateDir(config.stateDir);
  } catch (err) {
    if (err instanceof StateDirError) throw err;
    throw new StateDirError(`state directory ${config.stateDir}: ${(err as Error).message}`);
  }
}

function openAgents(config: Config, state: StateDir, backend?: AgentBackend): AgentRegistry {
  try {
    return new AgentRegistry({
      state,
      backend,
      operatorToken: config.operatorToken,
      // In a fleet the default agent's token is the store's (claimed in openFleet).
      agentToken: backend ? undefined : config.agentToken,
    });
  } catch (err) {
    throw new StateDirError(`state directory ${config.stateDir}: ${(err as Error).message}`);
  }
}

/** The history in the state directory; a database that cannot be opened is a warning. */
function openHistory(
  config: Config,
  state: StateDir,
  bus: EventBus,
  log: Logger,
  fleet?: { store: FleetStore; node: string },
) {
  const path = state.file("history.db");
  const retention = {
    days: config.historyDays,
    maxRows: config.historyMaxRows,
    maxBytes: config.historyMaxBytes,
  };
  if (fleet) {
    // In a fleet every node's commands are in the store, where any node reads them.
    const shared = new FleetHistory(fleet.store, fleet.node, retention);
    const recorder = new HistoryRecorder(shared, shared, bus, log);
    return { recorder, health: async () => ({ ...await recorder.health(), enabled: true }) };
  }
  let store: HistoryStore;
  try {
    store = new HistoryStore(path, retention);
  } catch (err) {
    const error = (err as Error).message;
    log.warn("history_open_failed", { error, path });
    return {
      recorder: undefined,
      health: () => Promise.resolve({ ok: false, enabled: true, error }),
    };
  }
  const writer = new HistoryWriter(path, retention);
  const recorder = new HistoryRecorder(store, writer, bus, log);
  return { recorder, health: async () => ({ ...await recorder.health(), enabled: true }) };
}
