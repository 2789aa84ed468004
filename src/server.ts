/**
 * Wiring: the reactor, the spawner pool, the sandbox domains and supervisor, the session
 * manager and the HTTP app, started as one server and stopped as one, killing every session on
 * the way out so no child outlives it.
 *
 * @module
 */

import { ApprovalStore } from "./approvals/store.ts";
import type { Config } from "./config.ts";
import { EventBus } from "./events/bus.ts";
import { createApp } from "./http/routes.ts";
import { Reactor } from "./io/reactor.ts";
import { Truncator } from "./output/truncator.ts";
import { probeSandbox } from "./sandbox/apply.ts";
import { SandboxDomains } from "./sandbox/domains.ts";
import { Supervisor } from "./sandbox/supervisor.ts";
import { baseEnv } from "./sessions/env.ts";
import { SessionManager } from "./sessions/manager.ts";
import { SpawnerPool } from "./workers/pool.ts";

/** A running server. */
export interface Server {
  /** The address it listens on. */
  addr: Deno.NetAddr;
  /** Kill every session, stop listening and release everything. */
  shutdown(): Promise<void>;
}

const VERSION = "0.2.0";

/** What `/healthz` says about the sandbox: the probe plus which profiles can be enforced. */
function sandboxHealth(config: Config) {
  const probe = probeSandbox();
  const profiles = Object.fromEntries(
    [...config.profiles].map(([name, p]) => [
      name,
      !p.enforce || (probe.enforceable && (p.network !== "loopback" || probe.loopback)),
    ]),
  );
  return {
    ...probe,
    default_profile: config.defaultProfile,
    approval_policy: config.approvalPolicy,
    profiles,
  };
}

/** Start the server described by `config`. */
export async function startServer(config: Config): Promise<Server> {
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
    maxSessions: config.maxSessions,
  });
  const domains = new SandboxDomains({
    profiles: config.profiles,
    home: Deno.env.get("HOME") ?? "/root",
    serverPid: Deno.pid,
    workspace: config.workspace,
    reactor,
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
  const sandbox = sandboxHealth(config);
  const app = createApp({
    manager,
    supervisor,
    approvals,
    bus,
    token: config.token,
    workspace: config.workspace,
    shell: config.shell,
    health: () => ({ version: VERSION, sessions: manager.size, sandbox }),
  });
  await pool.warmedUp();
  const { promise: listening, resolve } = Promise.withResolvers<Deno.NetAddr>();
  const http = Deno.serve({
    hostname: config.host,
    port: config.port,
    onListen: resolve,
  }, app.fetch);
  const addr = await listening;
  return {
    addr,
    async shutdown() {
      approvals.close();
      await manager.shutdown();
      await http.shutdown();
      await pool.close();
      await reactor.close();
      truncator.close();
      await domains.close();
    },
  };
}
