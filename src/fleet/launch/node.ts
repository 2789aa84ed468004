/**
 * One node of the local fleet: `main.ts` run as a child with its own workspace and state
 * directory, the fleet's store and tokens, its uid block leased by itself (automatic), listening
 * on a free loopback port, its pid in `<dir>/pid`. Its output goes to a log file beside its
 * state, never to the launcher's stdout (whose lines are the launcher's contract). It must never
 * share a workspace or state directory with another node.
 *
 * @module
 */

/** The flags of `deno task serve` (deno.json), which a server needs to run. */
export const SERVE_FLAGS = [
  "--unstable-no-legacy-abort",
  "--allow-ffi",
  "--allow-net",
  "--allow-env",
  "--allow-read",
  "--allow-write",
  "--allow-sys",
  "--allow-run=git,/usr/bin/git",
  "--v8-flags=--max-semi-space-size=4,--regexp-tier-up-ticks=20,--enable-experimental-regexp-engine",
];

const MAIN = new URL("../../../main.ts", import.meta.url).pathname;

/** A running node. */
export interface FleetNode {
  id: string;
  /** `http://127.0.0.1:<port>`. */
  url: string;
  pid: number;
  /** SIGTERM and wait for it (a node already gone is fine). */
  stop(): Promise<void>;
}

/** Start node `id` in `dir` (made here) with `env` on top of the launcher's environment. */
export async function startNode(
  id: string,
  dir: string,
  env: Record<string, string>,
): Promise<FleetNode> {
  const workspace = `${dir}/workspace`;
  const state = `${dir}/state`;
  await Deno.mkdir(workspace, { recursive: true, mode: 0o755 });
  await Deno.mkdir(state, { recursive: true, mode: 0o700 });
  const log = await Deno.open(`${dir}/log`, { create: true, append: true, mode: 0o600 });
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", ...SERVE_FLAGS, MAIN, "--port", "0"],
    env: {
      ...env,
      UEXEC_NODE_ID: id,
      UEXEC_WORKSPACE: workspace,
      UEXEC_STATE_DIR: state,
    },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const logWriter = log.writable.getWriter();
  // Both streams are copied to the log as they come; stdout is also read line by line for the
  // listening line.
  const toLog = async (stream: ReadableStream<Uint8Array>, onLine?: (line: string) => void) => {
    let partial = "";
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
      await logWriter.write(new TextEncoder().encode(chunk));
      if (!onLine) continue;
      const parts = (partial + chunk).split("\n");
      partial = parts.pop()!;
      for (const line of parts) onLine(line);
    }
  };
  const { promise: listening, resolve, reject } = Promise.withResolvers<string>();
  const logged = Promise.all([
    toLog(child.stdout, (line) => {
      const m = /^uexec listening on (http:\/\/\S+)$/.exec(line);
      if (m) resolve(m[1]);
    }),
    toLog(child.stderr),
  ]).finally(() => logWriter.close().catch(() => {}));
  child.status.then((status) =>
    reject(new Error(`node ${id} exited ${status.code} before listening; see ${dir}/log`))
  );
  const url = await listening;
  // For an operator (or a test) who wants to stop or kill one node of the fleet.
  await Deno.writeTextFile(`${dir}/pid`, `${child.pid}\n`);
  return {
    id,
    url,
    pid: child.pid,
    async stop() {
      try {
        child.kill("SIGTERM");
      } catch { /* already gone */ }
      await child.status;
      await logged;
    },
  };
}
