/**
 * `deno task mcp`: the whole service in this process, speaking MCP over stdin and stdout, for
 * clients that launch MCP servers as subprocesses. There is no HTTP listener.
 *
 * Who the client is: whoever launched this process, with this process's own rights (it can read
 * the state directory, and so every token in it). No token is asked for; the tools act as the
 * agent `UEXEC_MCP_AGENT` (default: the default agent), so its limits and sandbox profile cap
 * apply and its sessions are its own, but this is scoping, not a security boundary against the
 * launcher. Commands still run in the sandbox. Nobody can decide approvals here (that needs the
 * operator's HTTP API), so a command that asks for one waits `UEXEC_APPROVAL_TIMEOUT_MS` and is
 * denied.
 *
 * Only MCP messages go to stdout; logs go to stderr. When stdin closes (or on SIGINT/SIGTERM)
 * every session is killed and the process exits; it must never leave a child behind.
 *
 * @module
 */

// @ts-types="@modelcontextprotocol/sdk/server/stdio"
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import process from "node:process";
import { commandLineFlags } from "../cli.ts";
import { ConfigError, loadConfig } from "../config.ts";
import { startRuntime } from "../runtime.ts";
import { StateDirError } from "../service/state_dir.ts";
import { mcpServer } from "./server.ts";

const SHUTDOWN_LIMIT_MS = 3000;

async function main(): Promise<void> {
  const flags = commandLineFlags(Deno.args, "mcp");
  let config;
  try {
    // `deno task` runs in uexec's directory; the workspace defaults to where it was started.
    config = loadConfig(flags, Deno.env.toObject(), Deno.env.get("INIT_CWD") ?? Deno.cwd());
    if (config.store) {
      // It would register as a node no other node can reach, under the server's node id.
      throw new ConfigError("UEXEC_STORE: the MCP stdio server cannot be a fleet node; unset it");
    }
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    console.error(`uexec: ${err.message}`);
    Deno.exit(2);
  }
  let runtime;
  try {
    runtime = await startRuntime(config);
  } catch (err) {
    if (!(err instanceof StateDirError)) throw err;
    console.error(`uexec: ${err.message}`);
    Deno.exit(2);
  }
  let principal;
  try {
    principal = runtime.service.agent(config.mcpAgent);
  } catch (err) {
    console.error(`uexec: UEXEC_MCP_AGENT: ${(err as Error).message}`);
    await runtime.close();
    Deno.exit(2);
  }
  const server = mcpServer(runtime.service, principal);
  let stopping = false;
  const stop = (why: string) => {
    if (stopping) return;
    stopping = true;
    console.error(`uexec: ${why}; killing ${runtime.sessions} session(s) and exiting`);
    setTimeout(() => Deno.exit(1), SHUTDOWN_LIMIT_MS);
    (async () => {
      await server.close();
      await runtime.stopSessions();
      await runtime.close();
    })().then(
      () => Deno.exit(0),
      (err) => {
        console.error("uexec: shutdown failed:", err);
        Deno.exit(1);
      },
    );
  };
  process.stdin.once("end", () => stop("stdin closed"));
  process.stdin.once("close", () => stop("stdin closed"));
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    Deno.addSignalListener(signal, () => {
      console.error(`uexec: ${signal}`);
      stop(signal);
    });
  }
  await server.connect(new StdioServerTransport(process.stdin, process.stdout));
  console.error(`uexec: MCP on stdio as agent ${config.mcpAgent}, workspace ${config.workspace}`);
}

if (import.meta.main) await main();
