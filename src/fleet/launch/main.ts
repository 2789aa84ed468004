/**
 * `deno task fleet --nodes N [--keep]`: a local fleet for trying and testing, in one command: a
 * throwaway PostgreSQL cluster, N nodes (each with its own uid block, workspace and state) on
 * that store, and nginx with the shipped router configuration in front of them, all in one
 * directory (`UEXEC_FLEET_DIR`, default a new temporary one). It prints, one per line:
 *
 *     uexec fleet: router http://127.0.0.1:<port>
 *     uexec fleet: operator token: <path>
 *     uexec fleet: node <id> at <url>
 *
 * and on SIGINT or SIGTERM stops the nodes, nginx and PostgreSQL and removes their files (kept
 * with `--keep`). `UEXEC_FLEET_PORT` is the router's port (default 8787; 0: any free port). Other
 * `UEXEC_*` settings in its environment pass to every node. It must never be a deployment (the
 * cluster trusts loopback), never print a token (only the path of the file holding it), and never
 * leave a child running when it ends.
 *
 * @module
 */

import { startCluster } from "./postgres.ts";
import { type FleetNode, startNode } from "./node.ts";
import { startRouter } from "./router.ts";

/** What the command line and environment ask for. */
interface Options {
  nodes: number;
  keep: boolean;
  port: number;
  dir?: string;
}

function usage(message: string): never {
  console.error(`uexec fleet: ${message}\nusage: deno task fleet [--nodes N] [--keep]`);
  Deno.exit(2);
}

function options(args: string[], env: Record<string, string>): Options {
  let nodes = 3;
  let keep = false;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (arg === "--keep") keep = true;
    else if (arg === "--nodes" || arg.startsWith("--nodes=")) {
      const raw = arg === "--nodes" ? args[++i] : arg.slice("--nodes=".length);
      if (!/^\d{1,3}$/.test(raw ?? "") || Number(raw) < 1 || Number(raw) > 100) {
        usage(`--nodes must be 1 to 100, got ${JSON.stringify(raw ?? "")}`);
      }
      nodes = Number(raw);
    } else usage(`unknown argument ${JSON.stringify(arg)}`);
  }
  const rawPort = env.UEXEC_FLEET_PORT ?? "8787";
  if (!/^\d{1,5}$/.test(rawPort) || Number(rawPort) > 65535) {
    usage(`UEXEC_FLEET_PORT must be a port (0 for any free one), got ${JSON.stringify(rawPort)}`);
  }
  return { nodes, keep, port: Number(rawPort), dir: env.UEXEC_FLEET_DIR || undefined };
}

function token(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  return btoa(String.fromCharCode(...bytes)).replaceAll("+", "-").replaceAll("/", "_")
    .replace(/=+$/, "");
}

/** The environment every node gets: the launcher's, less the launcher's own settings. */
function nodeEnv(env: Record<string, string>, extra: Record<string, string>) {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    if (!name.startsWith("UEXEC_FLEET_")) out[name] = value;
  }
  return { ...out, ...extra };
}

async function main(): Promise<void> {
  const env = Deno.env.toObject();
  const opts = options(Deno.args, env);
  const made = opts.dir === undefined;
  const dir = opts.dir ?? await Deno.makeTempDir({ prefix: "uexec-fleet-" });
  await Deno.mkdir(dir, { recursive: true });
  // Sandboxed commands must traverse to their node's workspace beneath it.
  await Deno.chmod(dir, 0o711);
  const stops: (() => Promise<void>)[] = [];
  const owned: string[] = [];
  let stopping: Promise<void> | undefined;
  // Parts being started: a signal that comes meanwhile waits for them, then stops them too.
  const pending = new Set<Promise<unknown>>();
  const start = <T extends { stop(): Promise<void> }>(begin: () => Promise<T>): Promise<T> => {
    if (stopping) return Promise.reject(new Error("stopping"));
    const part = begin().then((up) => {
      stops.push(() => up.stop());
      return up;
    });
    pending.add(part);
    part.then(() => pending.delete(part), () => pending.delete(part));
    return part;
  };
  const stopAll = (code: number) => {
    stopping ??= (async () => {
      await Promise.allSettled([...pending]);
      for (const stop of stops.reverse()) {
        await stop().catch((err) => console.error(`uexec fleet: ${err.message}`));
      }
      if (!opts.keep) {
        if (made) await Deno.remove(dir, { recursive: true }).catch(() => {});
        else {
          for (const path of owned) await Deno.remove(path, { recursive: true }).catch(() => {});
        }
      }
      Deno.exit(code);
    })();
    return stopping;
  };
  Deno.addSignalListener("SIGINT", () => stopAll(0));
  Deno.addSignalListener("SIGTERM", () => stopAll(0));
  try {
    owned.push(`${dir}/postgres`);
    const cluster = await start(() => startCluster(`${dir}/postgres`));
    const operatorFile = `${dir}/operator.token`;
    const agentFile = `${dir}/agent.token`;
    owned.push(operatorFile, agentFile, `${dir}/nodes`, `${dir}/router`);
    const operator = token();
    const agent = token();
    await Deno.writeTextFile(operatorFile, `${operator}\n`, { mode: 0o600 });
    await Deno.writeTextFile(agentFile, `${agent}\n`, { mode: 0o600 });
    await Deno.mkdir(`${dir}/nodes`, { mode: 0o711 });
    const shared = nodeEnv(env, {
      UEXEC_STORE: cluster.url,
      UEXEC_OPERATOR_TOKEN: operator,
      UEXEC_AGENT_TOKEN: agent,
      // Behind the router every agent's connection comes from nginx: one peer to the node.
      UEXEC_MAX_CONNECTIONS_PER_PEER: env.UEXEC_MAX_CONNECTIONS_PER_PEER ??
        env.UEXEC_MAX_CONNECTIONS ?? "512",
    });
    const ids = Array.from({ length: opts.nodes }, (_, i) => `n${i + 1}`);
    const started = await Promise.allSettled(
      ids.map((id) => start(() => startNode(id, `${dir}/nodes/${id}`, shared))),
    );
    const failed = started.find((r) => r.status === "rejected");
    if (failed) throw (failed as PromiseRejectedResult).reason;
    const nodes = started.map((r) => (r as PromiseFulfilledResult<FleetNode>).value);
    const router = await start(() =>
      startRouter(`${dir}/router`, opts.port, nodes.map((node) => new URL(node.url).host))
    );
    console.log(`uexec fleet: router ${router.url}`);
    console.log(`uexec fleet: operator token: ${operatorFile}`);
    for (const node of nodes) console.log(`uexec fleet: node ${node.id} at ${node.url}`);
  } catch (err) {
    if (stopping) return; // a signal came while starting: stopAll reports and exits
    console.error(`uexec fleet: ${err instanceof Error ? err.message : err}`);
    await stopAll(1);
  }
}

if (import.meta.main) await main();
