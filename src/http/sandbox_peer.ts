/**
 * Defense in depth against a sandboxed command that reaches the API (under a network profile it
 * shares the host's network namespace): a request whose TCP peer socket belongs to a sandbox
 * uid is refused even with a valid token, so a token that leaks into the workspace still cannot
 * be used from inside the sandbox.
 *
 * A peer on an address of this host must be found (a real client holds its socket until the
 * answer); one that cannot be found is treated as sandboxed. Peers on other hosts are not
 * sandboxed commands of this server. Over a unix socket there is no TCP peer to look up (the
 * socket file is 0600 and the state directory unreadable, which keeps sandboxed commands out).
 * It must never let a lookup failure pass a local request.
 *
 * On the HTTP listener's connections the answer is found once per connection and kept for its
 * other requests: the server holds its end, so the 4-tuple, and with it the client's socket,
 * stays the same until the connection closes. The socket's owner could change only through
 * fchown, which a sandboxed process can do only to its own uid (see peer.ts). A failed lookup is
 * not kept: the request is refused and the next one looks again.
 *
 * @module
 */

import { type ConnectionInfo, connectionOf } from "./listener.ts";
import { type Endpoint, TcpPeers } from "./peer.ts";

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
 * A check for requests served at `server`: true when the request's peer is sandboxed (a uid for
 * which `isSandboxUid` holds, or a local peer that cannot be found). With a `connection` on the
 * info (see listener.ts) the lookup is made once per connection.
 */
export function sandboxedPeerCheck(
  server: Deno.NetAddr,
  isSandboxUid: (uid: number) => boolean,
): (info: Deno.ServeHandlerInfo | ConnectionInfo | undefined) => boolean {
  const peers = new TcpPeers();
  const local = localAddresses();
  const wildcard = WILDCARD.has(server.hostname);
  // Whether the peer at `remote` is sandboxed; undefined when the lookup failed.
  const lookup = (remote: Deno.Addr | undefined): boolean | undefined => {
    if (remote?.transport !== "tcp") return false;
    const client: Endpoint = { hostname: remote.hostname, port: remote.port };
    const host = bare(client.hostname);
    if (!local.has(host) && !host.startsWith("127.")) return false;
    // On a wildcard address a local client's connection ends at the address it came from.
    const at: Endpoint = {
      hostname: wildcard ? client.hostname : server.hostname,
      port: server.port,
    };
    let uid: number | undefined;
    try {
      uid = peers.uid(at, client);
    } catch (err) {
      console.error("uexec: peer lookup failed; refusing the request:", (err as Error).message);
      return undefined;
    }
    return uid === undefined || isSandboxUid(uid);
  };
  const known = new WeakMap<object, boolean>();
  return (info) => {
    const connection = connectionOf(info);
    const kept = connection && known.get(connection);
    if (kept !== undefined) return kept;
    const sandboxed = lookup(info?.remoteAddr);
    if (sandboxed === undefined) return true;
    if (connection) known.set(connection, sandboxed);
    return sandboxed;
  };
}
