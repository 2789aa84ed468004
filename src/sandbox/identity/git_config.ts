/**
 * The `.gitconfig` in each sandboxed session's private HOME, git's global configuration there:
 *
 * - `safe.directory = *`: every session runs as a uid of its own, so every repository the
 *   operator or another session made has "dubious ownership" to git. The same setting in the
 *   environment (domains.ts) does not reach the other side of a local transport: `git clone`
 *   or `git fetch` from a path runs `git-upload-pack` with the environment's configuration
 *   removed, and it refused the repository. Inside the sandbox a repository's configuration can
 *   do no more than the command itself; `.git` directories the sandbox did not make stay
 *   read-only to it (git_guard.ts).
 * - `user.name` and `user.email` as the server's own git reports them (its user's global or the
 *   system configuration), so a commit made in a session carries the operator's name, as it
 *   would with an agent running as the operator, instead of failing with "Please tell me who
 *   you are".
 *
 * This module must never copy anything else from the operator's configuration: credential
 * helpers, URL rewrites and headers can hold secrets, and sessions' commands are untrusted.
 *
 * @module
 */

import { hostGitValue } from "./host_git.ts";

/** The operator's git identity; a field is absent when git has none. */
export interface GitIdentity {
  name?: string;
  email?: string;
}

/** A value as git's configuration syntax quotes it; undefined when it has a control character. */
function quoted(value: string): string | undefined {
  // deno-lint-ignore no-control-regex
  if (/[\x00-\x1f\x7f]/.test(value)) return undefined;
  return `"${value.replaceAll("\\", "\\\\").replaceAll('"', '\\"')}"`;
}

/** The text of a session's `.gitconfig` for `identity`. */
export function gitConfigText(identity: GitIdentity): string {
  const lines = [
    "# Written by uexec for this session; yours to change. Every session runs as its own user,",
    "# so repositories others made would look foreign to git without the next line.",
    "[safe]",
    "\tdirectory = *",
  ];
  const name = identity.name === undefined ? undefined : quoted(identity.name);
  const email = identity.email === undefined ? undefined : quoted(identity.email);
  if (name !== undefined || email !== undefined) {
    lines.push("[user]");
    if (name !== undefined) lines.push(`\tname = ${name}`);
    if (email !== undefined) lines.push(`\temail = ${email}`);
  }
  return `${lines.join("\n")}\n`;
}

/** The server's git identity (none when git is missing or has none). */
export async function operatorGitIdentity(): Promise<GitIdentity> {
  const [name, email] = await Promise.all([
    hostGitValue("user.name"),
    hostGitValue("user.email"),
  ]);
  return { ...(name === undefined ? {} : { name }), ...(email === undefined ? {} : { email }) };
}
