/**
 * The host's `git` as the server itself runs it (the operator's identity for sessions, the
 * start-up check of `safe.bareRepository`): found once, on a path no other local user can
 * change, and asked for one configuration value at a time outside any repository.
 *
 * The server's PATH is not to be trusted for this: `npx` puts `node_modules/.bin` directories of
 * the checkout (and its parents) first, and a checkout under a world-writable directory lets
 * any local user plant a `git` there that would run as the server's user, root. So a PATH
 * entry counts only when it and every directory above it, and the binary (symbolic links
 * resolved) and every directory above that, belong to root or to the server's user and are
 * writable by nobody else; `/usr/bin` and `/bin` are tried after PATH.
 *
 * This module must never run a `git` found anywhere else, nor pass it anything from a request.
 *
 * @module
 */

import { kind, statAt } from "../fs/entries.ts";
import { AT, AT_FDCWD, S_IF } from "../../ffi/libc.ts";

/** Tried after the server's PATH. */
const FALLBACK = ["/usr/bin", "/bin"];

/**
 * Whether `path` and every directory above it belong to root or to `uid` and no one else may
 * write them (a symbolic link's own mode means nothing: its owner alone can change it).
 */
function ownedAlong(path: string, uid: number): boolean {
  const parts = path.split("/").filter((p) => p !== "");
  for (let i = 0; i <= parts.length; i++) {
    const st = statAt(AT_FDCWD, `/${parts.slice(0, i).join("/")}`, AT.SYMLINK_NOFOLLOW);
    if (st === null || (st.uid !== 0 && st.uid !== uid)) return false;
    if (kind(st) !== S_IF.LNK && (st.mode & 0o022) !== 0) return false;
  }
  return true;
}

/**
 * The first `git` on `path` (a PATH value), then in `/usr/bin` and `/bin`, that no user but
 * root and `uid` can replace (see the module doc), as its real path; null when there is none.
 */
export function findHostGit(path: string, uid: number): string | null {
  const dirs = [...path.split(":").filter((dir) => dir.startsWith("/")), ...FALLBACK];
  for (const dir of dirs) {
    let real: string;
    let realDir: string;
    try {
      real = Deno.realPathSync(`${dir}/git`);
      realDir = Deno.realPathSync(dir);
    } catch {
      continue;
    }
    const st = statAt(AT_FDCWD, real, 0);
    if (st === null || kind(st) !== S_IF.REG || (st.mode & 0o111) === 0) continue;
    if ([dir, realDir, real].every((p) => ownedAlong(p, uid))) return real;
  }
  return null;
}

let found: string | null | undefined;

/** The server's `git` ({@link findHostGit} for its PATH and user, looked up once). */
export function hostGit(): string | null {
  if (found === undefined) found = findHostGit(Deno.env.get("PATH") ?? "", Deno.uid() ?? 0);
  return found;
}

/**
 * One configuration value as the host's git reports it outside any repository; undefined when
 * unset, or when there is no git the server trusts (or may run).
 */
export async function hostGitValue(key: string): Promise<string | undefined> {
  const git = hostGit();
  if (git === null) return undefined;
  try {
    const out = await new Deno.Command(git, {
      args: ["config", "--get", key],
      cwd: "/",
      stdin: "null",
      stderr: "null",
    }).output();
    const value = new TextDecoder().decode(out.stdout).replace(/\n$/, "");
    return out.success && value !== "" ? value : undefined;
  } catch {
    return undefined; // not allowed to run it (--allow-run)
  }
}

/**
 * What the operator should know about the host's git at start-up, or null: that there is no git
 * the server trusts, or that git honours bare repositories it discovers (`safe.bareRepository`
 * is not `explicit`), so a directory shaped like a repository is one to it. A hint only: the
 * guard takes apart what this server's sandbox plants (git_guard.ts).
 */
export async function hostGitHint(): Promise<string | null> {
  if (hostGit() === null) {
    return "no git on a path only root can write (PATH, /usr/bin, /bin): sessions' commits " +
      "carry no operator identity";
  }
  if (await hostGitValue("safe.bareRepository") === "explicit") return null;
  return "the host's git takes any directory shaped like a repository for one " +
    "(safe.bareRepository is not explicit); `git config --system safe.bareRepository explicit` " +
    "stops that for every user";
}
