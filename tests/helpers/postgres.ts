/**
 * A throwaway PostgreSQL cluster for tests: `initdb` in a temp dir as the `postgres` user (it
 * refuses root), started with `pg_ctl` on a free 127.0.0.1 port with its socket in the temp dir,
 * stoppable and restartable (a store that goes away and comes back), removed at `destroy`.
 * Trust authentication on loopback only: nothing outside this host reaches it.
 *
 * @module
 */

/** A running cluster. */
export interface TestPostgres {
  /** `postgres://postgres@127.0.0.1:<port>/postgres`. */
  url: string;
  port: number;
  dir: string;
  /** Stop it (fast shutdown: sessions are cut off, as when the store goes away). */
  stop(): Promise<void>;
  /** Start it again on the same port and data. */
  start(): Promise<void>;
  /** Run one SQL statement with psql; returns its unaligned, tuples-only output. */
  sql(statement: string): Promise<string>;
  /** Stop it and remove its files. */
  destroy(): Promise<void>;
}

async function run(program: string, args: string[], what: string): Promise<string> {
  const out = await new Deno.Command(program, { args, stdout: "piped", stderr: "piped" }).output();
  const text = new TextDecoder().decode(out.stdout);
  if (!out.success) {
    throw new Error(`${what} failed (${out.code}): ${new TextDecoder().decode(out.stderr)}${text}`);
  }
  return text;
}

/** The directory of the host's PostgreSQL programs (`pg_config --bindir`). */
async function binDir(): Promise<string> {
  return (await run("pg_config", ["--bindir"], "pg_config")).trim();
}

/** A port nothing listens on now (the kernel's pick, released at once). */
function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return port;
}

/** Start a fresh cluster. */
export async function startPostgres(): Promise<TestPostgres> {
  const bin = await binDir();
  const dir = await Deno.makeTempDir({ prefix: "uexec-pg-" });
  const data = `${dir}/data`;
  await Deno.chmod(dir, 0o755);
  await run("chown", ["postgres:postgres", dir], "chown");
  const asPostgres = (program: string, args: string[], what: string) =>
    run("runuser", ["-u", "postgres", "--", `${bin}/${program}`, ...args], what);
  await asPostgres("initdb", ["-A", "trust", "-U", "postgres", "-D", data, "--no-sync"], "initdb");
  const port = freePort();
  const options = `-c listen_addresses=127.0.0.1 -p ${port} -k ${dir} -c fsync=off` +
    " -c max_connections=200";
  const start = () =>
    asPostgres(
      "pg_ctl",
      ["-D", data, "-l", `${dir}/log`, "-o", options, "-w", "-t", "60", "start"],
      "pg_ctl start",
    ).then(() => {});
  const stop = () =>
    asPostgres("pg_ctl", ["-D", data, "-m", "fast", "-w", "stop"], "pg_ctl stop").then(() => {});
  await start();
  let running = true;
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    dir,
    async stop() {
      await stop();
      running = false;
    },
    async start() {
      await start();
      running = true;
    },
    sql: (statement) =>
      run(
        `${bin}/psql`,
        [
          "-X",
          "-A",
          "-t",
          "-h",
          "127.0.0.1",
          "-p",
          String(port),
          "-U",
          "postgres",
          "-c",
          statement,
        ],
        "psql",
      ),
    async destroy() {
      if (running) await stop();
      await Deno.remove(dir, { recursive: true });
    },
  };
}
