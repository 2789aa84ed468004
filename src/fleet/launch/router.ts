/**
 * The local fleet's router: nginx run as a child (`daemon off`) with the shipped configuration
 * (`deploy/nginx/uexec.conf`) filled in, its pid, logs and temporary files in a directory of the
 * fleet. It must never use or signal an nginx it did not start, nor read the host's nginx.conf.
 *
 * @module
 */

import { appeared, freePort } from "./run.ts";

/** The shipped template. */
export const TEMPLATE = new URL("../../../deploy/nginx/uexec.conf", import.meta.url);

/** What fills the template. */
export interface RouterConfig {
  /** Its directory: pid, logs, temporary files. */
  dir: string;
  /** `host:port` to listen on. */
  listen: string;
  /** The nodes' `host:port`. */
  nodes: string[];
  /** Worker user when run as root (default: nginx's own default, `nobody`). */
  user?: string;
}

/** The template with `config` filled in; throws if a placeholder is left or unknown. */
export function routerConf(template: string, config: RouterConfig): string {
  const values: Record<string, string> = {
    dir: config.dir,
    listen: config.listen,
    user: config.user ? `user ${config.user};` : "",
    servers: config.nodes.map((node) => `        server ${node} max_fails=1 fail_timeout=10s;`)
      .join("\n"),
  };
  return template.replace(/\{\{(\w+)\}\}/g, (_, name: string) => {
    if (!(name in values)) throw new Error(`unknown placeholder {{${name}}} in the template`);
    return values[name];
  });
}

/** A running router. */
export interface Router {
  /** `http://127.0.0.1:<port>`. */
  url: string;
  port: number;
  /** Fast shutdown (SIGTERM) and wait. */
  stop(): Promise<void>;
}

/** Tries for a free port that another process takes between our pick and nginx's bind. */
const BIND_TRIES = 3;

/**
 * Start nginx in `dir` (made here) on 127.0.0.1:`port` (0: a free port) in front of `nodes`.
 * Ready once its pid file appears (nginx writes it after binding its listeners).
 */
export async function startRouter(dir: string, port: number, nodes: string[]): Promise<Router> {
  await Deno.mkdir(dir, { recursive: true });
  const template = await Deno.readTextFile(TEMPLATE);
  for (let attempt = 1;; attempt++) {
    const chosen = port === 0 ? freePort() : port;
    const conf = `${dir}/nginx.conf`;
    await Deno.writeTextFile(
      conf,
      routerConf(template, { dir, listen: `127.0.0.1:${chosen}`, nodes }),
    );
    const child = new Deno.Command("nginx", {
      args: ["-p", dir, "-e", `${dir}/error.log`, "-c", conf, "-g", "daemon off;"],
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).spawn();
    const stderr = new Response(child.stderr).text();
    try {
      await appeared(`${dir}/nginx.pid`, child.status);
    } catch {
      const said = await stderr;
      if (port === 0 && attempt < BIND_TRIES && /Address already in use/.test(said)) continue;
      throw new Error(`nginx did not start: ${said.trim()}`);
    }
    return {
      url: `http://127.0.0.1:${chosen}`,
      port: chosen,
      async stop() {
        try {
          child.kill("SIGTERM");
        } catch { /* already gone */ }
        await child.status;
        await stderr;
      },
    };
  }
}
