/**
 * The service assembled from its parts: the reactor, the spawner pool, the sandbox domains, the
 * session manager, the approvals and the credentials behind the application core. Every front
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
import { AgentRegistry, type TokenSources } from "./service/agents.ts";
import { Service } from "./service/service.ts";
import { StateDir } from "./service/state_dir.ts";
import { Supervisor } from "./service/supervisor.ts";
import { baseEnv } from "./sessions/env.ts";
import { SessionManager } from "./sessions/manager.ts";
import { SpawnerPool } from "./workers/pool.ts";

/** A running service. */
export interface Runtime {
  service: Service;
  /** Where the operator's and the default agent's tokens are (never the tokens). */
  tokens: TokenSources;
  /** Live sessions. */
  readonly sessions: number;
  /** Deny pending approvals and kill every session; the calls waiting on them return. */
  stopSessions(): Promise<void>;
  /** Release the workers, the reactor and the sandbox domains (after `stopSessions`). */
  close(): Promise<void>;
}

/** Start the service described by `config`; resolves once its spawners are ready. */
export async function startRuntime(config: Config): Promise<Runtime> {
  const state = new StateDir(config.stateDir);
  const agents = new AgentRegistry({
    state,
    operatorToken: config.operatorToken,
    agentToken: config.agentToken,
  });
  const reactor = new Reactor();
  const pool = new SpawnerPool();
  const bus = new EventBus();
  const truncator = new Truncator();
  const manager = new SessionManager({
    reactor,
    pool,
    bus,
    truncator,
    baseEnv: baseEnv(Deno.env.toObject()),
  });
  const domains = new SandboxDomains({
    profiles: config.profiles,
    home: Deno.env.get("HOME") ?? "/root",
    serverPid: Deno.pid,
    workspace: config.workspace,
    hidden: [state.path],
  });
  const approvals = new ApprovalStore({ onEvent: (event) => bus.publish(event) });
  const supervisor = new Supervisor({
    manager,
    domains,
    approvals,
    policy: config.approvalPolicy,
    defaultProfile: config.defaultProfile,
    approvalTimeoutMs: config.approvalTimeoutMs,
  });
  const service = new Service({
    manager,
    supervisor,
    approvals,
    domains,
    bus,
    agents,
    workspace: config.workspace,
    allowedRoots: config.allowedRoots,
    protectedPaths: [state.path],
    shell: config.shell,
    maxSessions: config.maxSessions,
  });
  await pool.warmedUp();
  return {
    service,
    tokens: agents.sources,
    get sessions() {
      return manager.size;
    },
    async stopSessions() {
      approvals.close();
      await manager.shutdown();
    },
    async close() {
      await pool.close();
      await reactor.close();
      truncator.close();
      await domains.close();
    },
  };
}
