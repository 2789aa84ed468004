/**
 * Whether a session's processes listen on a TCP port (a dev server that came up): the listening
 * sockets on that port in the session's network namespace (`/proc/<pid>/net/tcp` and `tcp6`),
 * matched by inode against the sockets the session's processes hold (`/proc/<pid>/fd` links
 * `socket:[inode]`). A listener of another process on the same port does not count.
 *
 * A point check through libc (Deno refuses /proc reads of other processes without
 * `--allow-all`); the session's processes are walked only when something listens on the port.
 * It must never wait and never touch a process or a socket.
 *
 * @module
 */

import { cString, libc, listDir, O, rawSyscall } from "../ffi/libc.ts";
import { sessionMembers } from "../pty/signals.ts";

const SYS_READLINK = 89;
/** `st` of a listening socket in /proc/net/tcp. */
const TCP_LISTEN = "0A";
const CHUNK = 65536;

/** A /proc file read whole through libc; undefined if it cannot be opened. */
function readProcFile(path: string): string | undefined {
  const c = libc();
  const fd = c.open(cString(path), O.CLOEXEC);
  if (fd < 0) return undefined;
  const decoder = new TextDecoder();
  const buf = new Uint8Array(CHUNK);
  let text = "";
  try {
    for (;;) {
      const n = c.read(fd, buf, BigInt(CHUNK));
      if (n <= 0) return text;
      text += decoder.decode(buf.subarray(0, n), { stream: true });
    }
  } finally {
    c.close(fd);
  }
}

/** The inodes of the sockets listening on `port` in a /proc/net/tcp{,6} text. */
export function listeningInodes(table: string, port: number): string[] {
  const inodes: string[] = [];
  for (const line of table.split("\n").slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f[3] !== TCP_LISTEN) continue;
    const local = f[1];
    if (parseInt(local.slice(local.lastIndexOf(":") + 1), 16) === port) inodes.push(f[9]);
  }
  return inodes;
}

function readLink(path: string): string | undefined {
  const buf = new Uint8Array(256);
  const n = rawSyscall(SYS_READLINK, cString(path), buf, buf.length);
  return n < 0 ? undefined : new TextDecoder().decode(buf.subarray(0, n));
}

function descriptors(pid: number): string[] {
  try {
    return listDir(`/proc/${pid}/fd`);
  } catch {
    return [];
  }
}

/** The inodes of sockets listening on `port` in the network namespace of `pid`. */
function listenersIn(pid: number, port: number): Set<string> | undefined {
  const tables = ["tcp", "tcp6"].map((t) => readProcFile(`/proc/${pid}/net/${t}`));
  if (tables.every((t) => t === undefined)) return undefined;
  return new Set(tables.flatMap((t) => listeningInodes(t ?? "", port)));
}

/** True when a process of the session led by `leader` listens on TCP `port`. */
export function sessionListens(leader: number, port: number): boolean {
  // The session's network namespace, seen through its leader (or, once it is gone, a member).
  let members: number[] | undefined;
  let inodes = listenersIn(leader, port);
  if (inodes === undefined) {
    members = sessionMembers(new Set([leader]));
    inodes = members.length > 0 ? listenersIn(members[0], port) : undefined;
  }
  if (!inodes || inodes.size === 0) return false;
  members ??= sessionMembers(new Set([leader]));
  return members.some((pid) =>
    descriptors(pid).some((fd) => {
      const link = readLink(`/proc/${pid}/fd/${fd}`);
      return link?.startsWith("socket:[") === true && inodes.has(link.slice(8, -1));
    })
  );
}
