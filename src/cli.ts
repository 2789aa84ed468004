/**
 * The command line of `deno task serve` and `deno task mcp`: flags parsed with `node:util`'s
 * `parseArgs` (`--host`, `--port`, `--help`, `--version`). `--help` prints every setting (from
 * `settings.ts`) and `--version` the version, each exiting 0; a flag it does not know, or one
 * without its value, is a usage error. It never reads the environment or starts anything: that
 * is `config.ts` and the entry points.
 *
 * @module
 */

import { parseArgs } from "node:util";
import type { Flags } from "./config.ts";
import { settingsHelp } from "./settings.ts";
import { VERSION } from "./version.ts";

/** A command line that cannot be run: the message says what is wrong and what is known. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/** What the command line asks for: help, the version, or a run with these flags. */
export type CommandLine =
  | { readonly kind: "help" }
  | { readonly kind: "version" }
  | { readonly kind: "run"; readonly flags: Flags };

const OPTIONS = {
  host: { type: "string" },
  port: { type: "string" },
  help: { type: "boolean", short: "h" },
  version: { type: "boolean" },
} as const;

/** Parse `args` (without the program's name); a bad command line is a {@link UsageError}. */
export function parseCommandLine(args: readonly string[]): CommandLine {
  let values;
  try {
    ({ values } = parseArgs({
      args: [...args],
      options: OPTIONS,
      strict: true,
      allowPositionals: false,
    }));
  } catch (err) {
    // parseArgs's messages name the flag ("Unknown option '--bogus'..."); keep them, say more.
    const first = ((err as Error).message ?? String(err)).split("\n")[0];
    throw new UsageError(`${first}; known flags: --host, --port, --help, --version`);
  }
  if (values.help) return { kind: "help" };
  if (values.version) return { kind: "version" };
  return { kind: "run", flags: { host: values.host, port: values.port } };
}

/** `--help`'s text for the task `task` (`serve` or `mcp`). */
export function helpText(task: string): string {
  return [
    `Usage: deno task ${task} [--host HOST] [--port PORT]`,
    `       deno task ${task} --help | --version`,
    "",
    "uexec: a sandboxed terminal service for AI agents. It runs until SIGINT or SIGTERM.",
    "",
    "Flags:",
    "  --host HOST     listen address (UEXEC_HOST)",
    "  --port PORT     port; 0 picks one (UEXEC_PORT)",
    "  -h, --help      print this help and exit",
    "  --version       print the version and exit",
    "",
    "Settings (environment variables; docs/configuration.md says more):",
    settingsHelp(),
    "",
  ].join("\n");
}

/**
 * The flags of an entry point's command line. `--help` and `--version` print and exit 0; a bad
 * command line prints its problem and exits 2. Nothing is started before this returns.
 */
export function commandLineFlags(args: readonly string[], task: string): Flags {
  let line;
  try {
    line = parseCommandLine(args);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    console.error(`uexec: ${err.message}`);
    Deno.exit(2);
  }
  if (line.kind === "help") {
    console.log(helpText(task));
    Deno.exit(0);
  }
  if (line.kind === "version") {
    console.log(`uexec ${VERSION}`);
    Deno.exit(0);
  }
  return line.flags;
}
