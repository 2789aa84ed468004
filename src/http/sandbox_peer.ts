/**
 * Defense against a sandboxed command that reaches the API (under a network profile it shares
 * the host's network namespace): a connection whose TCP peer socket belongs to a sandbox uid is
 * refused at accept (see listener.ts), before it holds a slot of the connection cap and whatever
 * token it carries, so a token that leaks into the workspace still cannot be used from inside
 * the sandbox, and a sandboxed flood of connections leaves the cap to everyone else.
 *
 * Every peer is looked up first (a socket found is local, whatever its address); a peer on an
 * address of this host must be found (a real client holds its socket while it is connected);
 * one that cannot be found is treated as sandboxed. Peers on other hosts are not
 * sandboxed commands of this server. Over a unix socket there is no TCP peer to look up (the
 * socket file is 0600 and the state directory unreadable, which keeps sandboxed commands out).
 * The answer found at accept holds for the connection: the server holds its end, so the
 * 4-tuple, and with it the client's socket, stays the same until the connection closes; its
 * owner could change only through fchown, which a sandboxed process can do only to its own uid
 * (see sandbox/identity/tcp_peers.ts). It must never let a lookup failure pass a local
 * connection on a root server.
 *
 * @module
 */

import type { Peer } from "./listener.ts";
import { type Endpoint, TcpPeers } from "../sandbox/identity/tcp_peers.ts";

const WILDCARD = new Set(["0.0.0.0", "::", "[::]"]);

function bare(host: string): string {
  const unbracketed = host.replace(/^\[(.*)\]$/, "$1").toLowerCase();
  return unbracketed.startsWith("::ffff:") && unbracketed.includes(".")
    ? unbracketed.slice("::ffff:".length)
    : unbracketed;
}

/** The addresses of this host's interfaces (loopback included). */
function localAddresses(): Set<string> {
  const found = new Set(["127.0.0.1", "::1"]);
  for (const iface of Deno.networkInterfaces()) found.add(bare(iface.address));
  return found;
}

/**
 * Who the TCP client at `remote` of a server at `server` is, found once at accept (see
 * listener.ts): sandboxed when its socket's uid is one for which `isSandboxUid` holds, or when
 * a local peer cannot be found (or the lookup fails); keyed for the per-peer cap by its uid when
 * local, by its address otherwise. Without `isSandboxUid` (a server that is not root, whose
 * children run as itself) nothing is sandboxed, and a local peer whose lookup fails is keyed by
 * its address. Throws if the lookups cannot be made at all (a root server must not start then).
 */
export function peerClassifier(
  server: Deno.NetAddr,
  isSandboxUid?: (uid: number) => boolean,
): (remote: Deno.NetAddr) => Peer {
  let peers: TcpPeers | undefined;
  try {
    peers = new TcpPeers();
  } catch (err) {
    if (isSandboxUid) throw err;
  }
  let local = localAddresses();
  /**
   * Whether `host` is an address of this host; the interfaces are read again for one not known
   * (an address added since: a new IPv6 temporary address, a new interface), which would else
   * pass a sandboxed command connecting from it as a remote peer.
   */
  const isLocal = (host: string) => {
    if (host.startsWith("127.") || local.has(host)) return true;
    local = localAddresses();
    return local.has(host);
  };
  const wildcard = WILDCARD.has(server.hostname);
  return (remote) => {
    const host = bare(remote.hostname);
    const byAddress = { sandboxed: false, key: `address ${host}` };
    if (!peers) return byAddress;
    // On a wildcard address a local client's connection ends at the address it came from.
    const at: Endpoint = {
      hostname: wildcard ? remote.hostname : server.hostname,
      port: server.port,
    };
    let uid: number | undefined;
    try {
      uid = peers.uid(at, { hostname: remote.hostname, port: remote.port });
    } catch (err) {
      console.error("uexec: peer lookup failed:", (err as Error).message);
    }
    if (uid !== undefined) return { sandboxed: isSandboxUid?.(uid) ?? false, key: `uid ${uid}` };
    // Not found here: a peer on another host, or a local one whose lookup failed.
    return isSandboxUid && isLocal(host) ? { sandboxed: true } : byAddress;
  };
}
