/**
 * Which bound pathname unix sockets a domain's policy does not open to it, read from
 * `/proc/net/unix`. Landlock (ABI 7) does not mediate `connect` on pathname sockets and seccomp
 * cannot read the address, so a root service's 0777 socket (`/run/docker.sock`, the D-Bus
 * system bus, ...) would answer any child.
 *
 * A root server keeps every such socket out of reach by rule, whenever it is bound: its domains
 * run in a mount view where the host's file systems are overlays (mount_view.ts), and this
 * listing is not needed there. A server that is not root cannot make a mount view; it refuses to
 * start a domain's worker while a socket outside the policy's places is bound
 * (`applySandbox`), and the domain key carries the listing (view_keys.ts) so the next command
 * looks again. **Stated limit of a server that is not root:** a socket bound after its worker
 * started is reachable from the commands that worker runs (docs/isolation-unix-sockets.md).
 *
 * Only the path a socket was bound to is listed (one bound with a relative path, renamed, or
 * reached through another name is not seen), and only in the server's network namespace.
 *
 * This module only reads; it must never mount or change a file.
 *
 * @module
 */

import { readWholeFile } from "../../ffi/libc.ts";
import type { ResolvedPolicy } from "../policy/policy.ts";
import { isWithin } from "../policy/profiles.ts";

/** A bound, unconnected pathname socket (a listener or a datagram receiver). */
export interface BoundSocket {
  /** Absolute path it was bound to. */
  path: string;
  /** The socket's inode: a service that binds again gets a new one. */
  inode: number;
}

/**
 * `Num RefCount Protocol Flags Type St Inode Path`, the path starting after one space. State 01
 * is unconnected: accepted connections (03) repeat their listener's path with a new inode each.
 */
const LINE = /^\S+: \S+ \S+ \S+ \S+ 01 +(\d+) (\/.*)$/;

/**
 * The unconnected absolute-path entries of a `/proc/net/unix` text (abstract sockets, relative
 * paths and accepted connections dropped).
 */
export function parseUnixSockets(text: string): BoundSocket[] {
  const sockets: BoundSocket[] = [];
  for (const line of text.split("\n")) {
    const m = LINE.exec(line);
    if (m) sockets.push({ path: m[2], inode: Number(m[1]) });
  }
  return sockets;
}

/** Every bound pathname socket in the calling thread's network namespace. */
export function boundUnixSockets(): BoundSocket[] {
  return parseUnixSockets(readWholeFile("/proc/thread-self/net/unix"));
}

/** True when `policy` lets its children reach a socket at `path` (absolute, normalised). */
export function socketReachable(policy: ResolvedPolicy, path: string): boolean {
  const open = [...policy.writableRoots, ...policy.unixSockets ?? []];
  return open.some((root) => isWithin(path, root));
}

/**
 * The sockets `policy` must hide, by listed path, one entry per path (sockets still bound
 * to a path that was unlinked are listed too; hiding skips paths that are not sockets).
 */
export function socketsToHide(policy: ResolvedPolicy, sockets: BoundSocket[]): BoundSocket[] {
  const byPath = new Map<string, BoundSocket>();
  for (const s of sockets) {
    if (socketReachable(policy, s.path)) continue;
    const seen = byPath.get(s.path);
    if (!seen || s.inode > seen.inode) byPath.set(s.path, s);
  }
  return [...byPath.values()].sort((a, b) => a.path < b.path ? -1 : a.path > b.path ? 1 : 0);
}

/**
 * `/proc/net/unix`, read again only when the last read is older than `maxAgeMs`: reading it
 * costs about 85 µs with no socket and grows with their number (1.3 ms for 1,000), too much
 * for every spawn.
 */
export class SocketListing {
  #maxAgeMs: number;
  #read: () => BoundSocket[];
  #at = -Infinity;
  #sockets: BoundSocket[] = [];

  constructor(maxAgeMs = 1000, read: () => BoundSocket[] = boundUnixSockets) {
    this.#maxAgeMs = maxAgeMs;
    this.#read = read;
  }

  /** The listing, at most `maxAgeMs` old. */
  current(now = performance.now()): BoundSocket[] {
    if (now - this.#at >= this.#maxAgeMs) {
      this.#sockets = this.#read();
      this.#at = now;
    }
    return this.#sockets;
  }
}
