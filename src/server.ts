/**
 * Wiring: the service (see runtime.ts) behind the HTTP app, started as one server and stopped
 * as one, killing every session on the way out so no child outlives it.
 *
 * @module
 */

import type { Config } from "./config.ts";
import { requestGuard, withCors } from "./http/guard.ts";
import { type HttpListener, serveLimited } from "./http/listener.ts";
import { sandboxedPeerCheck } from "./http/sandbox_peer.ts";
import { createApp } from "./http/routes.ts";
import { elsewhere, listenWebSocket, type WebSocketListener } from "./http/ws_listener.ts";
import { probeSandbox } from "./sandbox/apply.ts";
import { deniedByProfile } from "./sandbox/confinement.ts";
import { sandboxIds, sandboxOwners } from "./sandbox/identity.ts";
import { signInLink } from "./dashboard/schemas.ts";
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
  // Until the listening address is known, no TCP request passes (fail closed).
  let fromSandbox = (info: Deno.ServeHandlerInfo | undefined) =>
    info?.remoteAddr.transport === "tcp";
  // The WebSocket listener's connections, with whether each came from the sandbox.
  const wsPeers = new WeakMap<Deno.ServeHandlerInfo, boolean>();
  let websocket: WebSocketListener | undefined;
  const app = createApp({
    service: runtime.service,
    health: async () => ({
      version: VERSION,
      sessions: runtime.sessions,
      sandbox,
      ...runtime.containment,
      history: await runtime.historyHealth(),
      websocket: websocket?.url ?? null,
    }),
    fromSandbox: (info) => info && wsPeers.has(info) ? wsPeers.get(info)! : fromSandbox(info),
    log: runtime.log,
    dashboard: config.dashboard,
  });
  const guard = requestGuard(config);
  const cors = config.allowedOrigins.length > 0;
  const handler: Deno.ServeHandler = (req, info) => {
    const refused = guard(req) ?? elsewhere(req, websocket);
    if (refused) return refused;
    if (!cors) return app.fetch(req, info);
    return Promise.resolve(app.fetch(req, info)).then((res) => withCors(req, res, config));
  };
  const http = listen(config, handler);
  const addr = http.addr;
  fromSandbox = peerCheck(addr);
  if (addr.transport === "tcp") {
    // Until its address is known, every request on it counts as sandboxed (fail closed).
    let wsFromSandbox = (_: Deno.ServeHandlerInfo) => true;
    websocket = listenWebSocket(addr.hostname, (req, info) => {
      wsPeers.set(info, wsFromSandbox(info));
      return guard(req) ?? app.fetch(req, info);
    });
    wsFromSandbox = peerCheck(websocket.addr);
  }
  return {
    addr,
    tokens: runtime.tokens,
    dashboardUrl: config.dashboard && addr.transport === "tcp"
      ? signInLink(origin(addr), runtime.service.mintSignInCode(OPERATOR).code)
      : undefined,
    uids: startUids(),
    async shutdown() {
      await runtime.stopSessions();
      await websocket?.shutdown();
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
 * The sandboxed-peer check for a TCP server whose children run as another uid (a root server);
 * a server that is not root runs children as itself, so no peer check can tell them apart.
 */
function peerCheck(
  addr: Deno.NetAddr | Deno.UnixAddr,
): (info: Deno.ServeHandlerInfo | undefined) => boolean {
  const never = () => false;
  if (addr.transport !== "tcp" || Deno.uid() !== 0) return never;
  let ids;
  try {
    ids = sandboxIds();
  } catch {
    return never; // No usable sandbox uid: nothing sandboxed can run (see /healthz).
  }
  if (!ids) return never;
  return sandboxedPeerCheck(addr, sandboxOwners(ids).isUid);
}

/**
 * Listen on TCP, or on a unix socket created 0600 (the umask is narrowed while it is bound),
 * behind the connection limits.
 */
function listen(config: Config, handler: Deno.ServeHandler): HttpListener {
  if (config.unixSocket === undefined) {
    return serveLimited({ hostname: config.host, port: config.port }, config.connections, handler);
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
