/**
 * What of the host a domain's worker saw when it was made, and when that calls for a fresh
 * worker: the part of the domain key that is about the mount view (a root server,
 * mount_view.ts) or, on a server that is not root, about the bound unix sockets it must
 * refuse to run beside (unix_sockets.ts). Also where the views are built.
 *
 * This module only reads the host (the socket listing, files' identity, a clock) and makes one
 * empty directory in the instance's own; it must never mount anything.
 *
 * @module
 */

import { AT, AT_FDCWD } from "../../ffi/libc.ts";
import type { ResolvedPolicy } from "../policy/policy.ts";
import { statAt } from "../fs/entries.ts";
import { SocketListing, socketsToHide } from "./unix_sockets.ts";

/** How old a domain's mount view may get, by default (`UEXEC_VIEW_MAX_AGE_S`). */
export const DEFAULT_VIEW_MAX_AGE_MS = 60_000;
/** The directory of the instance's that workers mount their staging tmpfs over. */
const STAGING = "view";

/**
 * Which file `path` is now: inode and change time to the nanosecond (a file system may give a
 * new file the inode number of one just removed), or null when there is none or it cannot be
 * looked at.
 */
function fileIdentity(path: string): string | null {
  try {
    const st = statAt(AT_FDCWD, path, AT.SYMLINK_NOFOLLOW);
    return st && `${st.ino} ${st.ctimeNs}`;
  } catch {
    return null;
  }
}

/** Settings of {@link DomainViews}. */
export interface DomainViewOptions {
  /**
   * Where a server that is not root learns the bound unix sockets (default: `/proc/net/unix`, at
   * most 1 s old).
   */
  sockets?: SocketListing;
  /** How old a view may get before new commands get a fresh one (default 60 s). */
  maxAgeMs?: number;
  /** The clock views age by, in ms (default `performance.now`). */
  now?: () => number;
}

/** A domain's view, as far as {@link DomainViews} keeps track of it. */
export interface ViewAge {
  /** When its current view was first asked for. */
  viewSince?: number;
}

/** The view part of domain keys, for all the domains of one server. */
export class DomainViews {
  #sockets: SocketListing;
  #maxAgeMs: number;
  #now: () => number;
  #staging?: string;

  constructor(opts: DomainViewOptions = {}) {
    this.#sockets = opts.sockets ?? new SocketListing();
    this.#maxAgeMs = opts.maxAgeMs ?? DEFAULT_VIEW_MAX_AGE_MS;
    this.#now = opts.now ?? (() => performance.now());
  }

  /**
   * What makes a root server's domain need a fresh worker: its view's age, past `maxAgeMs`,
   * and each listed place's file (a service that binds its socket again makes a new one, which
   * the old view's bind mount does not show).
   */
  key(domain: ViewAge, policy: ResolvedPolicy): unknown[] {
    const now = this.#now();
    if (domain.viewSince === undefined || now - domain.viewSince >= this.#maxAgeMs) {
      domain.viewSince = now;
    }
    return [domain.viewSince, (policy.unixSockets ?? []).map(fileIdentity)];
  }

  /**
   * For a server that is not root: the bound sockets out of `policy`'s places, which its worker
   * refuses to run beside; one bound since the worker looked needs a fresh look (a fresh
   * worker) at the next command.
   */
  socketsBound(policy: ResolvedPolicy): string[] {
    return socketsToHide(policy, this.#sockets.current()).map((s) => `${s.inode} ${s.path}`);
  }

  /**
   * The empty directory, in `instanceDir`, that domains' workers build their views over: made
   * on first use, then the same for every worker.
   */
  staging(instanceDir: string): string {
    const dir = `${instanceDir}/${STAGING}`;
    if (this.#staging === dir) return dir;
    try {
      Deno.mkdirSync(dir, { mode: 0o700 });
    } catch (e) {
      if (!(e instanceof Deno.errors.AlreadyExists)) throw e;
    }
    this.#staging = dir;
    return dir;
  }
}
