/**
 * Signals for whole sessions: a child is a session leader, so its process group and every
 * process that still belongs to its session (job-control jobs live in other groups) are found
 * and signalled together. One /proc scan serves a whole batch of sessions. It must never
 * signal a process outside those sessions.
 *
 * @module
 */

import { libc, listDir, noDescriptorFree, OsError, readSmallFile } from "../ffi/libc.ts";

/** Signal names accepted from clients, with their numbers on Linux x86_64. */
export const SIGNALS: Readonly<Record<string, number>> = {
  SIGHUP: 1,
  SIGINT: 2,
  SIGQUIT: 3,
  SIGKILL: 9,
  SIGUSR1: 10,
  SIGUSR2: 12,
  SIGTERM: 15,
  SIGCONT: 18,
  SIGSTOP: 19,
  SIGTSTP: 20,
  SIGWINCH: 28,
};

/** Pids of the processes whose session id is in `sids`, read from /proc in one pass. */
export function sessionMembers(sids: ReadonlySet<number>): number[] {
  const members: number[] = [];
  for (const name of listDir("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    const stat = readSmallFile(`/proc/${name}/stat`);
    if (stat === undefined) continue;
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (sids.has(Number(fields[3]))) members.push(Number(name));
  }
  return members;
}

/**
 * Send `sigs`, in order, to the groups of `leaders` and to every member of their sessions;
 * returns the members found. Out of file descriptors (the /proc scan needs one), the groups
 * still get every signal, so ending sessions can free descriptors; members that moved to
 * other groups are found by the next call.
 */
export function killSessions(leaders: number[], sigs: number[]): number[] {
  if (leaders.length === 0) return [];
  const c = libc();
  let members: number[] = [];
  try {
    members = sessionMembers(new Set(leaders));
  } catch (err) {
    if (!(err instanceof OsError && noDescriptorFree(err.errno))) throw err;
  }
  for (const sig of sigs) {
    for (const leader of leaders) c.kill(-leader, sig);
    for (const pid of members) c.kill(pid, sig);
  }
  return members;
}
