/**
 * The weight of a child's whole process session against everything else on the host. With
 * autogroup scheduling (`/proc/sys/kernel/sched_autogroup_enabled`, on by default) each process
 * session is one scheduling group, and each PTY session's child leads one (it calls `setsid`):
 * the nice value of its processes only ranks them among themselves, and the group's own nice,
 * in `/proc/<pid>/autogroup`, is what weighs against the server and the other sessions.
 *
 * It must never write for a process that does not lead its own session (that would weigh
 * whichever group it shares, the server's included), and the caller must never pass a pid it
 * has reaped (it could name another process by then).
 *
 * @module
 */

import { libc, O, openFile, rawSyscall } from "../ffi/libc.ts";

/** The autogroup nice of a session in the background: the kernel's weakest (weight 15). */
export const BACKGROUND_NICE = 19;

const GETSID = Deno.build.arch === "x86_64" ? 124 : 156;
const encoder = new TextEncoder();

/**
 * Set the autogroup nice of the session `pid` leads; false where it cannot be (not a session
 * leader, no autogroups on this host, or not permitted).
 */
export function setAutogroupNice(pid: number, nice: number): boolean {
  if (rawSyscall(GETSID, pid) !== pid) return false;
  const fd = openFile(`/proc/${pid}/autogroup`, O.WRONLY | O.CLOEXEC);
  if (fd < 0) return false;
  try {
    const text = encoder.encode(`${nice}`);
    return libc().write(fd, text, BigInt(text.length)) === text.length;
  } finally {
    libc().close(fd);
  }
}
