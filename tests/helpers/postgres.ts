/**
 * A throwaway PostgreSQL cluster for tests: the local fleet's (src/fleet/launch/postgres.ts) in a
 * temp dir, without fsync, stoppable and restartable (a store that goes away and comes back),
 * with a psql shortcut, removed at `destroy`. Trust authentication on loopback only: nothing
 * outside this host reaches it.
 *
 * @module
 */

import { type Cluster, startCluster } from "../../src/fleet/launch/postgres.ts";
import { run } from "../../src/fleet/launch/run.ts";

/** A running cluster. */
export interface TestPostgres extends Cluster {
  dir: string;
  /** Run one SQL statement with psql; returns its unaligned, tuples-only output. */
  sql(statement: string): Promise<string>;
  /** Stop it and remove its files. */
  destroy(): Promise<void>;
}

/** Start a fresh cluster. */
export async function startPostgres(): Promise<TestPostgres> {
  const dir = await Deno.makeTempDir({ prefix: "uexec-pg-" });
  await Deno.chmod(dir, 0o755);
  const cluster = await startCluster(`${dir}/pg`, { durable: false });
  let running = true;
  const psqlArgs = ["-X", "-A", "-t", "-h", "127.0.0.1", "-p", String(cluster.port), "-U"];
  return {
    ...cluster,
    dir,
    async stop() {
      await cluster.stop();
      running = false;
    },
    async start() {
      await cluster.start();
      running = true;
    },
    sql: (statement) =>
      run(`${cluster.bin}/psql`, [...psqlArgs, "postgres", "-c", statement], "psql"),
    async destroy() {
      if (running) await cluster.stop();
      await Deno.remove(dir, { recursive: true });
    },
  };
}
