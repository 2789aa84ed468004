/**
 * Which pathname unix sockets a sandbox domain must not reach. Landlock (ABI 7) does not
 * mediate `connect` on pathname sockets and seccomp cannot read the address, so a root
 * service's 0777 socket (`/run/docker.sock`, the D-Bus system bus, ...) would answer any child.
 * The kernel lists every bound pathname socket of a network namespace in `/proc/net/unix`; the
 * ones outside the policy's writable roots and not listed in its `unixSockets` are hidden by
 * `namespaces.ts` (a bind mount over each, in the domain's private mount namespace), so
 * `connect` finds no socket there and fails with ECONNREFUSED.
 *
 * Limits, stated honestly:
 * - the listing covers the server's network namespace only: a socket bound in another one
 *   (a container's) and reachable through a shared directory is not seen;
 * - only the path a socket was bound to is listed: one bound with a relative path, renamed
 *   after binding, or also reachable through a hard link or bind mount its owner made elsewhere
 *   is not hidden under those other names;
 * - the hiding is a snapshot, not a rule (issue 29 point 8, open): it is made when a domain's
 *   worker is created. {@link SocketListing} reads the listing again at most once per
 *   `maxAgeMs` (default 1 s) and the domain key includes the sockets to hide, so a socket bound
 *   later, or re-bound by a restarted service (the unlink removes the mount over the old one),
 *   gets a fresh worker for the next command; commands already running (a shell session, a
 *   long build) keep their worker's view and CAN REACH such a socket until they exit, directly
 *   or through a symlink, and a command started less than `maxAgeMs` after the socket appeared
 *   may still miss it. Churn costs at most one new worker per domain per `maxAgeMs`. The test
 *   that shows it is gated by `UEXEC_TEST_UNIX_SOCKET_RULE=1` in
 *   `tests/e2e/sandbox_sockets_http_test.ts`; the mechanisms that would make this a rule (Landlock
 *   ABI 9's `LANDLOCK_ACCESS_FS_RESOLVE_UNIX`; a seccomp supervisor below that; BPF LSM, whose
 *   programs this test host refuses to load) are weighed in `docs/isolation-unix-sockets.md`;
 * - hiding needs a root server (a mount namespace); a non-root server fails closed when there
 *   is a socket to hide.
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
