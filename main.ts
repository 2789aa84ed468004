/**
 * Entry point: refuse to start without V8's linear-time RegExp engine, read the configuration,
 * start the server, print where it listens and where its tokens are, and on SIGINT/SIGTERM kill
 * every session and exit within 3 s (past that, SIGKILL to everything the sessions run, then exit
 * 1). It never prints a token: the start-up lines say where the tokens are, and the dashboard's
 * sign-in link (stdout only; `UEXEC_DASHBOARD=off` turns it off) carries a one-time code that
 * opens one browser session, once, within minutes (`UEXEC_DASHBOARD_CODE_MINUTES`).
 *
 * @module
 */

import { commandLineFlags } from "./src/cli.ts";
import { ConfigError, loadConfig } from "./src/config.ts";
import type { RuntimeParts } from "./src/runtime.ts";
import { startServer } from "./src/server.ts";
import { StateDirError } from "./src/service/state_dir.ts";

const SHUTDOWN_LIMIT_MS = 3000;

/**
 * Run the server until SIGINT/SIGTERM; a test's entry point may pass `parts` of its own and a
 * shorter `shutdownLimitMs`.
 */
export async function main(
  parts: RuntimeParts = {},
  shutdownLimitMs = SHUTDOWN_LIMIT_MS,
): Promise<void> {
  // `--help` and `--version` answer here, before anything is read or started.
  const flags = commandLineFlags(Deno.args, "serve");
  let config;
  try {
    config = loadConfig(flags, Deno.env.toObject(), Deno.cwd());
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    console.error(`uexec: ${err.message}`);
    Deno.exit(2);
  }
  // Listening for the signals before the server starts: one that arrived between its first
  // answer and a listener set up afterwards used to end the process unshut, its log lost.
  let server: Awaited<ReturnType<typeof startServer>> | undefined;
  let stopping = false;
  const shutDown = (running: NonNullable<typeof server>) => {
    setTimeout(() => {
      // Past the limit: nothing the sessions started may outlive the server (the sessions not
      // yet recorded as ended are marked killed in the history by the next start).
      console.error(
        `uexec: shutdown took over ${shutdownLimitMs} ms; killing what every session runs now`,
      );
      try {
        running.killNow();
      } catch (err) {
        console.error("uexec: the last kill failed:", err);
      }
      Deno.exit(1);
    }, shutdownLimitMs);
    running.shutdown().then(
      () => Deno.exit(0),
      (err) => {
        console.error("uexec: shutdown failed:", err);
        Deno.exit(1);
      },
    );
  };
  const stop = () => {
    // A second signal while it starts (taking back a dead server's grants, say) ends it now.
    if (stopping && !server) Deno.exit(1);
    if (stopping) return;
    stopping = true;
    // While it starts, it shuts down once started, within the limit from then.
    if (server) shutDown(server);
  };
  Deno.addSignalListener("SIGINT", stop);
  Deno.addSignalListener("SIGTERM", stop);
  try {
    server = await startServer(config, parts);
  } catch (err) {
    if (!(err instanceof StateDirError)) throw err;
    console.error(`uexec: ${err.message}`);
    Deno.exit(2);
  }
  if (stopping) return void shutDown(server);
  const { addr, tokens, uids } = server;
  if (uids) {
    const from = uids.poolBlock === undefined
      ? "UEXEC_UID_RANGE"
      : `block ${uids.poolBlock} of the default pool`;
    console.log(`uexec: sandbox uids ${uids.range}, group ${uids.gid} (${from})`);
  }
  if ("path" in addr) console.log(`uexec listening on unix:${addr.path}`);
  else {
    const host = addr.hostname.includes(":") ? `[${addr.hostname}]` : addr.hostname;
    console.log(`uexec listening on http://${host}:${addr.port}`);
  }
  console.log(`uexec: operator token: ${tokens.operator}; default agent token: ${tokens.agent}`);
  if (server.dashboardUrl) console.log(`uexec dashboard: ${server.dashboardUrl}`);
}

if (import.meta.main) await main();
