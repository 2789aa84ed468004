/**
 * The local fleet's throwaway PostgreSQL cluster: `initdb` in a directory of the fleet as the
 * `postgres` user (initdb refuses root), from the host's binaries (`pg_config --bindir`), started
 * with `pg_ctl` on 127.0.0.1 only, with trust authentication (nothing beyond this host reaches
 * it; it is for trying and testing, never a deployment's store), stopped with a fast shutdown.
 * It must never touch a cluster it did not make.
 *
 * @module
 */

import { freePort, run } from "./run.ts";

/** A running cluster. */
export interface Cluster {
  /** `postgres://postgres@127.0.0.1:<port>/postgres`. */
  url: string;
  port: number;
  /** Its data directory (owned by `postgres`). */
  data: string;
  /** The host's PostgreSQL programs (`pg_config --bindir`). */
  bin: string;
  /** Stop it (fast shutdown: sessions are cut off, as when a store goes away). */
  stop(): Promise<void>;
  /** Start it again, on the same port and data. */
  start(): Promise<void>;
}

/**
 * Start a fresh cluster in `dir` (made here, handed to the `postgres` user). `durable: false`
 * turns fsync off (for tests: faster, and a crash loses what a test would throw away anyway).
 */
export async function startCluster(dir: string, { durable = true } = {}): Promise<Cluster> {
  const bin = (await run("pg_config", ["--bindir"], "pg_config --bindir")).trim();
  await Deno.mkdir(dir, { mode: 0o700 });
  await run("chown", ["postgres:postgres", dir], "chown");
  const data = `${dir}/data`;
  const asPostgres = (program: string, args: string[], what: string) =>
    run("runuser", ["-u", "postgres", "--", `${bin}/${program}`, ...args], what);
  await asPostgres("initdb", ["-A", "trust", "-U", "postgres", "-D", data, "--no-sync"], "initdb");
  const port = freePort();
  const options = `-c listen_addresses=127.0.0.1 -p ${port} -k ${dir} -c max_connections=300` +
    (durable ? "" : " -c fsync=off");
  const start = () =>
    asPostgres(
      "pg_ctl",
      ["-D", data, "-l", `${dir}/log`, "-o", options, "-w", "-t", "60", "start"],
      "pg_ctl start",
    ).then(() => {});
  await start();
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    data,
    bin,
    start,
    stop: () =>
      asPostgres("pg_ctl", ["-D", data, "-m", "fast", "-w", "stop"], "pg_ctl stop").then(() => {}),
  };
}
