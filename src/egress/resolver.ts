/**
 * Name resolution for the egress proxy: the operator's hosts file (`UEXEC_EGRESS_HOSTS`, in
 * `/etc/hosts` form, read again whenever its modification time or size changed, so edits apply
 * at once) first, then DNS through
 * `Deno.resolveDns` (A, then AAAA). The proxy dials one of the addresses returned here and
 * nothing else: a name is looked up once per connection, so the address judged is the address
 * connected to (no second lookup a rebinding server could answer differently).
 *
 * It must never connect anywhere itself, nor cache an answer beyond one lookup.
 *
 * @module
 */

import { canonicalHost, parseAddress } from "./rules.ts";
import { AT_FDCWD, errno, OsError } from "../ffi/libc.ts";
import { statAt } from "../sandbox/fs/entries.ts";

/**
 * What changes when the file at `path` is replaced or written: its inode, size and modification
 * time (to the nanosecond), from one `stat` on this thread (a few microseconds, where
 * `Deno.statSync` costs tens). Throws {@link OsError} when it cannot be stat-ed.
 */
export function fileStamp(path: string): string {
  const st = statAt(AT_FDCWD, path, 0);
  if (!st) throw new OsError(`stat(${path})`, errno());
  return `${st.ino} ${st.size} ${st.mtimeNs}`;
}

/** Looks names up. */
export class Resolver {
  #hostsFile?: string;
  #parsed?: { stamp: string; names: Map<string, string[]> };

  constructor(hostsFile?: string) {
    this.#hostsFile = hostsFile;
  }

  /**
   * The addresses of `host` (canonical): itself when it is an address literal. An answer known
   * at once (a literal, the hosts file) is returned as is, not as a promise: the proxy then
   * dials without another turn of the event loop.
   */
  resolve(host: string): string[] | Promise<string[]> {
    if (parseAddress(host)) return [host];
    const listed = this.#fromHostsFile(host);
    return listed.length > 0 ? listed : this.#lookUp(host);
  }

  async #lookUp(host: string): Promise<string[]> {
    const found: string[] = [];
    for (const type of ["A", "AAAA"] as const) {
      try {
        found.push(...await Deno.resolveDns(host, type));
      } catch {
        // No such record (or no answer): the other family, or nothing.
      }
      if (found.length > 0) break;
    }
    return found;
  }

  #fromHostsFile(host: string): string[] {
    if (!this.#hostsFile) return [];
    // A stat on this thread costs microseconds; an asynchronous read a trip through a pool.
    const stamp = fileStamp(this.#hostsFile);
    if (this.#parsed?.stamp !== stamp) {
      this.#parsed = { stamp, names: parseHosts(Deno.readTextFileSync(this.#hostsFile)) };
    }
    return this.#parsed.names.get(host) ?? [];
  }
}

/** The entries of a file in `/etc/hosts` form: canonical name to addresses, in file order. */
export function parseHosts(text: string): Map<string, string[]> {
  const names = new Map<string, string[]>();
  for (const raw of text.split("\n")) {
    const [address, ...aliases] = raw.replace(/#.*/, "").trim().split(/\s+/);
    if (!address || !parseAddress(address)) continue;
    for (const alias of aliases) {
      const name = canonicalHost(alias);
      if (name === undefined) continue;
      names.set(name, [...names.get(name) ?? [], address]);
    }
  }
  return names;
}
