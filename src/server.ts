/**
 * Wiring: the reactor, the spawner pool, the session manager and the HTTP app, started as one
 * server and stopped as one, killing every session on the way out so no child outlives it.
 *
 * @module
 */

import type { Config } from "./config.ts";
import { EventBus } from "./events/bus.ts";
import { createApp } from "./http/routes.ts";
import { Reactor } from "./io/reactor.ts";
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

const VERSION = "0.1.0";

/** Start the server described by `config`. */
export async function startServer(config: Config): Promise<Server> {
  const reactor = new Reactor();
  const pool = new SpawnerPool();
  const bus = new EventBus();
  const manager = new SessionManager({
    reactor,
    pool,
    bus,
    baseEnv: baseEnv(Deno.env.toObject()),
    maxSessions: config.maxSessions,
  });
  const app = createApp({
    manager,
    bus,
    token: config.token,
    workspace: config.workspace,
    shell: config.shell,
    health: () => ({ version: VERSION, sessions: manager.list().length }),
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
      await manager.shutdown();
      await http.shutdown();
      await pool.close();
      await reactor.close();
    },
  };
}
