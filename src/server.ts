/**
 * Wiring: the reactor, the spawner pool, the sandbox domains, the session manager, the
 * credentials and the application core behind the HTTP app, started as one server and stopped
 * as one, killing every session on the way out so no child outlives it.
 *
 * @module
 */

import { ApprovalStore } from "./approvals/store.ts";
import type { Config } from "./config.ts";
import { EventBus } from "./events/bus.ts";
import { requestGuard, withCors } from "./http/guard.ts";
import { sandboxedPeerCheck } from "./http/sandbox_peer.ts";
import { createApp } from "./http/routes.ts";
import { Reactor } from "./io/reactor.ts";
import { Truncator } from "./output/truncator.ts";
import { probeSandbox } from "./sandbox/apply.ts";
import { deniedByProfile } from "./sandbox/confinement.ts";
import { SandboxDomains } from "./sandbox/domains.ts";
import { sandboxIdentity } from "./sandbox/identity.ts";
import { AgentRegistry, type TokenSources } from "./service/agents.ts";
import { Service } from "./service/service.ts";
import { StateDir } from "./service/state_dir.ts";
import { Supervisor } from "./service/supervisor.ts";
import { baseEnv } from "./sessions/env.ts";
import { SessionManager } from "./sessions/manager.ts";
import { SpawnerPool } from "./workers/pool.ts";

/** A running server. */
export interface Server {
  /** The address it listens on. */
  addr: Deno.NetAddr | Deno.UnixAddr;
  /** Where the operator's and the default agent's tokens are (never the tokens). */
  tokens: TokenSources;
  /** Kill every session, stop listening and release everything. */
  shutdown(): Promise<void>;
}

const VERSION = "0.2.0";

/**
 * What `/healthz` says about the sandbox: the probe, which profiles can be enforced, and what
 * each one denies (system calls, socket families, unix sockets).
 */
function sandboxHealth(config: Config) {
  const probe = probeSandbox();
  const profiles = Object.fromEntries(
    [...config.profiles].map(([name, p]) => [
      name,
      !p.enforce || (probe.enforceable && (p.network !== "loopback" || probe.loopback)),
    ]),
  );
  const denies = Object.fromEntries(
    [...config.profiles].map(([name, p]) => [name, deniedByProfile(p)]),
  );
  return {
    ...probe,
    default_profile: config.defaultProfile,
    approval_policy: config.approvalPolicy,
    profiles,
    denies,
  };
}

/** Start the server described by `config`. */
export async function startServer(config: Config): Promise<Server> {
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
  const sandbox = sandboxHealth(config);
  // Until the listening address is known, no TCP request passes (fail closed).
  let fromSandbox = (info: Deno.ServeHandlerInfo | undefined) =>
    info?.remoteAddr.transport === "tcp";
  const app = createApp({
    service,
    health: () => ({ version: VERSION, sessions: manager.size, sandbox }),
    fromSandbox: (info) => fromSandbox(info),
  });
  const guard = requestGuard(config);
  const cors = config.allowedOrigins.length > 0;
  const handler: Deno.ServeHandler = (req, info) => {
    const refused = guard(req);
    if (refused) return refused;
    if (!cors) return app.fetch(req, info);
    return Promise.resolve(app.fetch(req, info)).then((res) => withCors(req, res, config));
  };
  await pool.warmedUp();
  const { http, addr } = await listen(config, handler);
  fromSandbox = peerCheck(addr);
  return {
    addr,
    tokens: agents.sources,
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

/**
 * The sandboxed-peer check for a TCP server whose children run as another uid (a root server);
 * a server that is not root runs children as itself, so no peer check can tell them apart.
 */
function peerCheck(
  addr: Deno.NetAddr | Deno.UnixAddr,
): (info: Deno.ServeHandlerInfo | undefined) => boolean {
  const never = () => false;
  if (addr.transport !== "tcp" || Deno.uid() !== 0) return never;
  let identity;
  try {
    identity = sandboxIdentity();
  } catch {
    return never; // No usable sandbox uid: nothing sandboxed can run (see /healthz).
  }
  if (!identity) return never;
  return sandboxedPeerCheck(addr, (uid) => uid === identity.uid);
}

/** Listen on TCP, or on a unix socket created 0600 (the umask is narrowed while it is made). */
async function listen(
  config: Config,
  handler: Deno.ServeHandler,
): Promise<{ http: Deno.HttpServer; addr: Deno.NetAddr | Deno.UnixAddr }> {
  const { promise, resolve } = Promise.withResolvers<Deno.NetAddr | Deno.UnixAddr>();
  if (config.unixSocket === undefined) {
    const http = Deno.serve(
      { hostname: config.host, port: config.port, onListen: resolve },
      handler,
    );
    return { http, addr: await promise };
  }
  try {
    Deno.removeSync(config.unixSocket);
  } catch { /* none left over */ }
  const umask = Deno.umask(0o177);
  try {
    const http = Deno.serve(
      { transport: "unix", path: config.unixSocket, onListen: resolve },
      handler,
    );
    const addr = await promise;
    Deno.chmodSync(config.unixSocket, 0o600);
    return { http, addr };
  } finally {
    Deno.umask(umask);
  }
}
