/**
 * A uexec server run as a subprocess: started with `--port 0`, ready once it prints its
 * listening line, its output drained into a short tail for error reports, stopped with SIGTERM
 * (SIGKILL after a grace period), and checked for processes it left behind.
 * @module
 */

import { register } from "./cleanup.ts";
import { ByteTail, eachLine } from "./lines.ts";
import { log } from "./log.ts";
import { alive, cpuSeconds, descendants, type Memory, memory } from "./procs.ts";
import { sleep, TIMED_OUT, within } from "./time.ts";

const LISTENING = /uexec listening on (http:\/\/\S+)/;
const TAIL_LINES = 40;
/** How much of the server's stderr (its log) is kept for error reports. */
const STDERR_TAIL_BYTES = 16 * 1024;
const START_TIMEOUT_MS = 60_000;
const STOP_GRACE_MS = 5_000;
const ORPHAN_GRACE_MS = 1_000;

/** How a server stopped. */
export interface StopReport {
  /** Milliseconds from SIGTERM to exit. */
  exitMs: number;
  /** Whether SIGKILL was needed. */
  killed: boolean;
  /** Descendants still alive after the server exited (the bench then killed them). */
  orphans: number[];
}

/** A running uexec server. */
export class UexecServer {
  #child: Deno.ChildProcess;
  #tail: () => string;
  #unregister: () => void = () => {};
  #stopped: Promise<StopReport> | null = null;
  readonly url: string;
  /** The agent token its requests carry. */
  readonly token: string;

  private constructor(
    child: Deno.ChildProcess,
    url: string,
    token: string,
    tail: () => string,
  ) {
    this.#child = child;
    this.url = url;
    this.token = token;
    this.#tail = tail;
  }

  /**
   * Starts the server as `deno task serve` does (its permission and V8 flags, read from
   * deno.json) but on `entry` with `--port 0`, in `root` with `env` added, and waits until it
   * listens. Running deno directly keeps `pid` the server's own, for RSS readings.
   */
  static async start(
    root: string,
    entry: string,
    env: Record<string, string>,
  ): Promise<UexecServer> {
    const inherited = Object.fromEntries(
      Object.entries(Deno.env.toObject()).filter(([k]) => !k.startsWith("UEXEC_")),
    );
    const child = new Deno.Command(Deno.execPath(), {
      args: [...(await serveFlags(root)), entry, "--port", "0"],
      cwd: root,
      clearEnv: true,
      env: { ...inherited, ...env },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const tail: string[] = [];
    const stderr = new ByteTail(STDERR_TAIL_BYTES);
    const output = () => [...tail, ...stderr.lines(TAIL_LINES)].join("\n");
    const keep = (line: string) => {
      tail.push(line);
      if (tail.length > TAIL_LINES) tail.shift();
    };
    let resolveUrl: (url: string) => void = () => {};
    const urlSeen = new Promise<string>((resolve) => resolveUrl = resolve);
    const drained = Promise.all([
      eachLine(child.stdout, (line) => {
        keep(line);
        const m = line.match(LISTENING);
        if (m) resolveUrl(m[1]);
      }),
      // The log is drained undecoded: splitting every line would spend the bench's CPU, which
      // shares the machine with the server, on lines only an error report reads.
      stderr.drain(child.stderr),
    ]).catch(() => {});
    const outcome = await within(
      Promise.race([
        urlSeen,
        child.status.then((s) => new Error(`server exited with code ${s.code} before listening`)),
      ]),
      START_TIMEOUT_MS,
    );
    if (typeof outcome !== "string") {
      const why = outcome === TIMED_OUT
        ? `no listening line within ${START_TIMEOUT_MS} ms`
        : outcome.message;
      try {
        child.kill("SIGKILL");
      } catch { /* already gone */ }
      await child.status;
      await within(drained, 1000);
      throw new Error(`${why}; output tail:\n${output()}`);
    }
    const server = new UexecServer(child, outcome, env.UEXEC_AGENT_TOKEN ?? "", output);
    server.#unregister = register(() => server.stop().then(() => {}));
    const shown = Object.entries(env).filter(([k]) => !k.endsWith("_TOKEN"));
    log(
      `server pid ${child.pid} listening on ${outcome} (${
        JSON.stringify(Object.fromEntries(shown))
      })`,
    );
    return server;
  }

  get pid(): number {
    return this.#child.pid;
  }

  /** The server's resident memory now and at its peak. */
  memory(): Memory {
    return memory(this.pid);
  }

  /** CPU seconds the server process (all its threads) has used so far. */
  cpuSeconds(): number {
    return cpuSeconds(this.pid);
  }

  /** The last lines the server printed (stdout's, then its log's). */
  tail(): string {
    return this.#tail();
  }

  /** Stops the server once (SIGTERM, SIGKILL after a grace period) and kills what it left behind. */
  stop(): Promise<StopReport> {
    this.#stopped ??= this.#stop();
    return this.#stopped;
  }

  async #stop(): Promise<StopReport> {
    this.#unregister();
    const before = descendants(this.pid);
    const t0 = performance.now();
    let killed = false;
    try {
      this.#child.kill("SIGTERM");
    } catch { /* already gone */ }
    const exited = await within(this.#child.status, STOP_GRACE_MS) !== TIMED_OUT;
    if (!exited) {
      killed = true;
      this.#child.kill("SIGKILL");
      await this.#child.status;
    }
    const exitMs = Math.round(performance.now() - t0);
    // Give the server's last signals a moment to land before calling anything an orphan.
    let orphans = before.filter(alive);
    for (let waited = 0; orphans.length > 0 && waited < ORPHAN_GRACE_MS; waited += 50) {
      await sleep(50);
      orphans = orphans.filter(alive);
    }
    for (const pid of orphans) {
      try {
        Deno.kill(pid, "SIGKILL");
      } catch { /* gone meanwhile */ }
    }
    const report = { exitMs, killed, orphans };
    if (killed || orphans.length > 0) log(`server ${this.pid} stop: ${JSON.stringify(report)}`);
    return report;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}

/**
 * The `deno run` flags of the `serve` task in `root`/deno.json (everything before main.ts), then
 * those in `BENCH_SERVER_FLAGS`.
 */
async function serveFlags(root: string): Promise<string[]> {
  const config = JSON.parse(await Deno.readTextFile(`${root}/deno.json`));
  const words = String(config.tasks.serve).split(/\s+/);
  const run = words.indexOf("run");
  const main = words.indexOf("main.ts");
  if (words[0] !== "deno" || run !== 1 || main < run) {
    throw new Error(
      `cannot read the serve task's flags from ${root}/deno.json: ${config.tasks.serve}`,
    );
  }
  const extra = Deno.env.get("BENCH_SERVER_FLAGS")?.split(/\s+/).filter((w) => w !== "") ?? [];
  return [...words.slice(1, main), ...extra];
}
