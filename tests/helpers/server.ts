/**
 * A real uexec server in a child process for tests: started with the given environment, ready
 * once it prints its listening line, and stopped with SIGTERM. Plus small HTTP helpers that
 * always consume response bodies.
 *
 * @module
 */

import { SERVE_FLAGS } from "../../src/fleet/launch/node.ts";
import { TextLineStream } from "./lines.ts";

/** JSON calls with one credential. */
export interface Client {
  /** POST JSON; returns status and parsed body. */
  post(path: string, body: unknown, headers?: Record<string, string>): Promise<Reply>;
  get(path: string, headers?: Record<string, string>): Promise<Reply>;
  del(path: string, headers?: Record<string, string>): Promise<Reply>;
  /** The `Authorization` header this client sends. */
  auth: Record<string, string>;
}

/** A running test server; its own calls use the default agent's token. */
export interface TestServer extends Client {
  url: string;
  pid: number;
  /** The server's workspace: a fresh temp dir unless the test gave UEXEC_WORKSPACE. */
  workspace: string;
  /** The server's state directory (tokens, agents). */
  stateDir: string;
  operatorToken: string;
  agentToken: string;
  /**
   * The uids its sessions run as and their group, from its start-up line (a root server; never
   * assumed: each server leases a block of its own unless the test gave UEXEC_UID_RANGE).
   */
  uids: { first: number; last: number; gid: number };
  /** Calls with the operator's token. */
  operator: Client;
  /** Calls with any token. */
  as(token: string): Client;
  /** Raw request (with the agent's token unless `init` sets authorization), body as text. */
  raw(path: string, init: RequestInit): Promise<{ status: number; text: string; headers: Headers }>;
  /**
   * The first line of its stdout that matches `pattern` (one already printed, or the next);
   * rejects when stdout ends without one.
   */
  stdoutLine(pattern: RegExp): Promise<string>;
  /** SIGTERM the server and wait for it; returns its exit status, stderr and stdout. */
  stop(): Promise<{ code: number; stderr: string; stdout: string }>;
}

/** A JSON reply. */
export interface Reply {
  status: number;
  // deno-lint-ignore no-explicit-any
  body: any;
}

const root = new URL("../../", import.meta.url).pathname;

/** What the server needs from the test runner's environment: PATH, Deno's cache, TLS roots. */
function inherited(): Record<string, string> {
  const home = Deno.env.get("HOME") ?? "/root";
  const env: Record<string, string> = {
    PATH: Deno.env.get("PATH") ?? "/usr/bin:/bin",
    DENO_DIR: Deno.env.get("DENO_DIR") ?? `${home}/.cache/deno`,
  };
  for (const name of ["SSL_CERT_FILE", "SSL_CERT_DIR", "DENO_CERT", "DENO_TLS_CA_STORE"]) {
    const value = Deno.env.get(name);
    if (value) env[name] = value;
  }
  return env;
}

/** A fresh random token, as a test would configure one. */
export function randomToken(): string {
  return `test_${crypto.randomUUID().replaceAll("-", "")}`;
}

/**
 * Start a server with `env` added to a clean environment and extra `args`; with `maxFiles`, its
 * descriptor limit is lowered to that (through util-linux prlimit); with `entry`, that module
 * (relative to the repository) runs instead of `main.ts`. Unless `env` says otherwise, it gets
 * a fresh state directory and random operator and agent tokens. `wrapper` is a command line the
 * server's own is appended to (it must end by exec'ing its arguments), for a server run in a
 * setting of its own (e.g. a mount namespace).
 */
export async function startServer(
  env: Record<string, string> = {},
  args: string[] = [],
  maxFiles?: number,
  entry = "main.ts",
  wrapper: string[] = [],
): Promise<TestServer> {
  const workspace = env.UEXEC_WORKSPACE ?? await Deno.makeTempDir({ prefix: "uexec-ws-" });
  const stateDir = env.UEXEC_STATE_DIR ?? await Deno.makeTempDir({ prefix: "uexec-state-" });
  const operatorToken = env.UEXEC_OPERATOR_TOKEN ?? randomToken();
  const agentToken = env.UEXEC_AGENT_TOKEN ?? env.UEXEC_TOKEN ?? randomToken();
  const limit = maxFiles ? ["prlimit", `--nofile=${maxFiles}:${maxFiles}`, "--"] : [];
  const [program, ...prefix] = [...wrapper, ...limit, Deno.execPath()];
  const child = new Deno.Command(program, {
    args: [
      ...prefix,
      "run",
      ...SERVE_FLAGS,
      `${root}${entry}`,
      "--port",
      "0",
      ...args,
    ],
    cwd: root,
    clearEnv: true,
    env: {
      ...inherited(),
      HOME: "/tmp",
      SHELL: "/bin/bash",
      NO_COLOR: "1",
      UEXEC_WORKSPACE: workspace,
      UEXEC_STATE_DIR: stateDir,
      UEXEC_OPERATOR_TOKEN: operatorToken,
      UEXEC_AGENT_TOKEN: agentToken,
      ...env,
    },
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const stderrText = new Response(child.stderr).text();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).pipeThrough(new TextLineStream());
  const reader = lines.getReader();
  const cleanUp = async () => {
    if (!env.UEXEC_WORKSPACE) await Deno.remove(workspace, { recursive: true });
    if (!env.UEXEC_STATE_DIR) await Deno.remove(stateDir, { recursive: true });
  };
  let url = "";
  let uids = { first: 0, last: 0, gid: 0 };
  const stdout: string[] = [];
  let stopped: ReturnType<TestServer["stop"]> | undefined;
  for (;;) {
    const { value, done } = await reader.read();
    if (!done) stdout.push(value);
    if (done) {
      const status = await child.status;
      await cleanUp();
      throw new Error(`server exited ${status.code} before listening: ${await stderrText}`);
    }
    const ids = /^uexec: sandbox uids (\d+)-(\d+), group (\d+) /.exec(value);
    if (ids) uids = { first: Number(ids[1]), last: Number(ids[2]), gid: Number(ids[3]) };
    const m = /^uexec listening on (http:\/\/\S+)$/.exec(value);
    if (m) {
      url = m[1];
      break;
    }
  }
  let stdoutEnded = false;
  const lineWaiters = new Set<{ pattern: RegExp; found(line?: string): void }>();
  const drained = (async () => {
    for (let line = await reader.read(); !line.done; line = await reader.read()) {
      stdout.push(line.value);
      for (const waiter of lineWaiters) {
        if (waiter.pattern.test(line.value)) waiter.found(line.value);
      }
    }
    stdoutEnded = true;
    for (const waiter of lineWaiters) waiter.found();
  })();
  const call = async (
    auth: Record<string, string>,
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ) => {
    const res = await fetch(url + path, {
      method,
      headers: { "content-type": "application/json", ...auth, ...headers },
      body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
    });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch { /* not JSON: keep the text */ }
    return { status: res.status, body: parsed };
  };
  const as = (token: string): Client => {
    const auth = { authorization: `Bearer ${token}` };
    return {
      auth,
      post: (path, body, headers) => call(auth, "POST", path, body, headers),
      get: (path, headers) => call(auth, "GET", path, undefined, headers),
      del: (path, headers) => call(auth, "DELETE", path, undefined, headers),
    };
  };
  return {
    url,
    pid: child.pid,
    workspace,
    stateDir,
    operatorToken,
    agentToken,
    uids,
    ...as(agentToken),
    operator: as(operatorToken),
    as,
    async raw(path, init) {
      const headers = new Headers(init.headers);
      if (!headers.has("authorization")) headers.set("authorization", `Bearer ${agentToken}`);
      const res = await fetch(url + path, { ...init, headers });
      return { status: res.status, text: await res.text(), headers: res.headers };
    },
    stdoutLine(pattern) {
      const seen = stdout.find((line) => pattern.test(line));
      if (seen !== undefined) return Promise.resolve(seen);
      if (stdoutEnded) return Promise.reject(new Error(`stdout ended without a line ${pattern}`));
      return new Promise((resolve, reject) => {
        const waiter = {
          pattern,
          found(line?: string) {
            lineWaiters.delete(waiter);
            if (line === undefined) reject(new Error(`stdout ended without a line ${pattern}`));
            else resolve(line);
          },
        };
        lineWaiters.add(waiter);
      });
    },
    stop() {
      // Once: a test may stop it itself, then again in its `finally`.
      stopped ??= (async () => {
        try {
          child.kill("SIGTERM");
        } catch { /* already gone */ }
        const status = await child.status;
        await drained;
        await cleanUp();
        return { code: status.code, stderr: await stderrText, stdout: stdout.join("\n") };
      })();
      return stopped;
    },
  };
}
