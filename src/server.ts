/**
 * Wiring: the service (see runtime.ts) behind the HTTP app, started as one server and stopped
 * as one, killing every session on the way out so no child outlives it.
 *
 * @module
 */

import type { Config } from "./config.ts";
import { requestGuard, withCors } from "./http/guard.ts";
import {
  type HttpListener,
  type ListenOptions,
  removeDeadRelayDirs,
  serveLimited,
} from "./http/listener.ts";
import { connectionOf } from "./http/connection_relay.ts";
import { peerClassifier } from "./http/sandbox_peer.ts";
import { createApp } from "./http/routes.ts";
import { fleetFront, remoteSessions } from "./http/forward.ts";
import { WS_PATH } from "./http/ws_routes.ts";
import { probeSandbox } from "./sandbox/enforce/apply.ts";
import { deniedByProfile } from "./sandbox/enforce/confinement.ts";
import { sandboxIds, sandboxOwners } from "./sandbox/identity/identity.ts";
import { signInLink } from "./http/dashboard/schemas.ts";
import { OPERATOR } from "./service/principal.ts";
import type { TokenSources } from "./service/agents.ts";
import { type RuntimeParts, startRuntime } from "./runtime.ts";
import { VERSION } from "./version.ts";

/** A running server. */
export interface Server {
  /** The address it listens on. */
  addr: Deno.NetAddr | Deno.UnixAddr;
  /** Where the operator's and the default agent's tokens are (never the tokens). */
  tokens: TokenSources;
  /**
   * The dashboard's sign-in link with a one-time code (for the start-up line on stdout only);
   * absent when the dashboard is off or the server listens on a unix socket.
   */
  dashboardUrl?: string;
  /** The uids sessions run as, for the start-up line (a root server): "first-last", group, block. */
  uids?: { range: string; gid: number; poolBlock?: number };
  /** Kill every session, stop listening and release everything. */
  shutdown(): Promise<void>;
  /** SIGKILL every session's processes now, without waiting (a shutdown past its limit). */
  killNow(): void;
}

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

/** Start the server described by `config` (with `parts` a test puts in place). */
export async function startServer(config: Config, parts: RuntimeParts = {}): Promise<Server> {
  const runtime = await startRuntime(config, parts);
  const sandbox = sandboxHealth(config);
  // The WebSocket's URL on the listening port, once it is known.
  let websocket: string | null = null;
  // Sandboxed peers are refused at accept (listener.ts): a request the listener served passed
  // that check; any other TCP request is taken for sandboxed (fail closed).
  const fromSandbox = (info: Deno.ServeHandlerInfo | undefined) =>
    connectionOf(info) === undefined && info?.remoteAddr.transport === "tcp";
  const app = createApp({
    service: runtime.service,
    health: async () => ({
      version: VERSION,
      sessions: runtime.sessions,
      sandbox,
      ...runtime.containment,
      history: await runtime.historyHealth(),
      store: await runtime.storeHealth(),
      websocket,
    }),
    fromSandbox,
    log: runtime.log,
    dashboard: config.dashboard,
    remoteSessions: runtime.fleet && remoteSessions(runtime.fleet),
  });
  const guard = requestGuard(config);
  const cors = config.allowedOrigins.length > 0;
  const { fleet } = runtime;
  const appFetch = fleet
    ? fleetFront(runtime.service, fleet, (req, info) => app.fetch(req, info), fromSandbox)
    : (req: Request, info?: Deno.ServeHandlerInfo) => app.fetch(req, info);
  const handler: Deno.ServeHandler = (req, info) => {
    const refused = guard(req);
    if (refused) return refused;
    if (!cors) return appFetch(req, info);
    return Promise.resolve(appFetch(req, info)).then((res) => withCors(req, res, config));
  };
  const http = listen(config, handler, { peers: peerCheck(), upgradePath: WS_PATH });
  // What servers killed before they could close their listeners left: removed meanwhile.
  removeDeadRelayDirs().then(
    (directories) =>
      directories > 0 && runtime.log.warn("dead_relay_dirs_removed", { directories }),
    (err) => runtime.log.warn("dead_relay_dirs_failed", { error: String(err) }),
  );
  const addr = http.addr;
  websocket = webSocketUrl(addr);
  if (fleet && addr.transport === "tcp") await fleet.listening(origin(addr));
  const dashboardUrl = config.dashboard && addr.transport === "tcp"
    ? signInLink(origin(addr), (await runtime.service.dashboard.mintCode(OPERATOR)).code)
    : undefined;
  return {
    addr,
    tokens: runtime.tokens,
    dashboardUrl,
    uids: startUids(),
    async shutdown() {
      await runtime.stopSessions();
      await http.shutdown();
      await runtime.close();
    },
    killNow: () => runtime.killNow(),
  };
}

/** The session uids for the start-up line; none when the server is not root or has none. */
function startUids(): Server["uids"] {
  let ids;
  try {
    ids = sandboxIds();
  } catch {
    return undefined; // /healthz says why.
  }
  if (!ids) return undefined;
  return { range: `${ids.first}-${ids.last}`, gid: ids.gid, poolBlock: ids.pooled?.index };
}

/**
 * Who a TCP peer is, for the listener's check at accept: on a root server, whose children run as
 * session uids, a peer of a session uid is sandboxed; a server that is not root runs children as
 * itself, so no peer check can tell them apart (peers are then only keyed for the per-peer cap).
 */
function peerCheck(): ListenOptions["peers"] {
  let ids;
  try {
    ids = Deno.uid() === 0 ? sandboxIds() : undefined;
  } catch {
    ids = undefined; // No usable sandbox uid: nothing sandboxed can run (see /healthz).
  }
  const isSandboxUid = ids ? sandboxOwners(ids).isUid : undefined;
  return (addr) => peerClassifier(addr, isSandboxUid);
}

/** The WebSocket's URL on a TCP address (`ws://host:port/v1/ws`); null on a unix socket. */
function webSocketUrl(addr: Deno.NetAddr | Deno.UnixAddr): string | null {
  if (addr.transport !== "tcp") return null;
  return `${origin(addr).replace(/^http/, "ws")}${WS_PATH}`;
}

/**
 * Listen on TCP, or on a unix socket created 0600 (the umask is narrowed while it is bound),
 * behind the connection limits.
 */
function listen(
  config: Config,
  handler: Deno.ServeHandler,
  options: ListenOptions,
): HttpListener {
  if (config.unixSocket === undefined) {
    return serveLimited(
      { hostname: config.host, port: config.port },
      config.connections,
      handler,
      options,
    );
  }
  try {
    Deno.removeSync(config.unixSocket);
  } catch { /* none left over */ }
  const umask = Deno.umask(0o177);
  try {
    const http = serveLimited(
      { transport: "unix", path: config.unixSocket },
      config.connections,
      handler,
      options,
    );
    Deno.chmodSync(config.unixSocket, 0o600);
    return http;
  } finally {
    Deno.umask(umask);
  }
}

/** The `http://host:port` a browser on this host reaches a TCP address at. */
function origin(addr: Deno.NetAddr): string {
  const host = addr.hostname === "0.0.0.0"
    ? "127.0.0.1"
    : addr.hostname === "::"
    ? "[::1]"
    : addr.hostname.includes(":")
    ? `[${addr.hostname}]`
    : addr.hostname;
  return `http://${host}:${addr.port}`;
}
