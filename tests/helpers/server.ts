/**
 * A real uexec server in a child process for tests: started with the given environment, ready
 * once it prints its listening line, and stopped with SIGTERM. Plus small HTTP helpers that
 * always consume response bodies.
 *
 * @module
 */

import { TextLineStream } from "./lines.ts";

/** A running test server. */
export interface TestServer {
  url: string;
  pid: number;
  /** The server's workspace: a fresh temp dir unless the test gave UEXEC_WORKSPACE. */
  workspace: string;
  /** POST JSON; returns status and parsed body. */
  post(path: string, body: unknown, headers?: Record<string, string>): Promise<Reply>;
  get(path: string, headers?: Record<string, string>): Promise<Reply>;
  del(path: string, headers?: Record<string, string>): Promise<Reply>;
  /** Raw request, body consumed as text. */
  raw(path: string, init: RequestInit): Promise<{ status: number; text: string; headers: Headers }>;
  /** SIGTERM the server and wait for it; returns its exit status and stderr. */
  stop(): Promise<{ code: number; stderr: string }>;
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

/**
 * Start a server with `env` added to a clean environment and extra `args`; with `maxFiles`, its
 * descriptor limit is lowered to that (through util-linux prlimit).
 */
export async function startServer(
  env: Record<string, string> = {},
  args: string[] = [],
  maxFiles?: number,
): Promise<TestServer> {
  const workspace = env.UEXEC_WORKSPACE ?? await Deno.makeTempDir({ prefix: "uexec-ws-" });
  const limit = maxFiles ? ["prlimit", `--nofile=${maxFiles}:${maxFiles}`, "--"] : [];
  const [program, ...prefix] = [...limit, Deno.execPath()];
  const child = new Deno.Command(program, {
    args: [
      ...prefix,
      "run",
      "--allow-ffi",
      "--allow-net",
      "--allow-env",
      "--allow-read",
      "--allow-write",
      "--allow-sys",
      "--v8-flags=--enable-experimental-regexp-engine",
      `${root}main.ts`,
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
      ...env,
    },
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const stderrText = new Response(child.stderr).text();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).pipeThrough(new TextLineStream());
  const reader = lines.getReader();
  let url = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) {
      const status = await child.status;
      if (!env.UEXEC_WORKSPACE) await Deno.remove(workspace, { recursive: true });
      throw new Error(`server exited ${status.code} before listening: ${await stderrText}`);
    }
    const m = /^uexec listening on (http:\/\/\S+)$/.exec(value);
    if (m) {
      url = m[1];
      break;
    }
  }
  const drained = (async () => {
    while (!(await reader.read()).done) { /* keep stdout flowing */ }
  })();
  const call = async (
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ) => {
    const res = await fetch(url + path, {
      method,
      headers: { "content-type": "application/json", ...headers },
      body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
    });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch { /* not JSON: keep the text */ }
    return { status: res.status, body: parsed };
  };
  return {
    url,
    pid: child.pid,
    workspace,
    post: (path, body, headers) => call("POST", path, body, headers),
    get: (path, headers) => call("GET", path, undefined, headers),
    del: (path, headers) => call("DELETE", path, undefined, headers),
    async raw(path, init) {
      const res = await fetch(url + path, init);
      return { status: res.status, text: await res.text(), headers: res.headers };
    },
    async stop() {
      try {
        child.kill("SIGTERM");
      } catch { /* already gone */ }
      const status = await child.status;
      await drained;
      if (!env.UEXEC_WORKSPACE) await Deno.remove(workspace, { recursive: true });
      return { code: status.code, stderr: await stderrText };
    },
  };
}
