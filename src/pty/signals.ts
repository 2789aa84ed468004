/**
 * Signals for whole sessions: a child is a session leader, so its process group and every
 * process that still belongs to its session (job-control jobs live in other groups) are found
 * and signalled together. It must never signal a process outside that session.
 *
 * @module
 */

import { libc, listDir, readSmallFile } from "../ffi/libc.ts";

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

/** Pids of the processes whose session id is `sid`, read from /proc. */
export function sessionMembers(sid: number): number[] {
  const members: number[] = [];
  for (const name of listDir("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    const stat = readSmallFile(`/proc/${name}/stat`);
    if (stat === undefined) continue;
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (Number(fields[3]) === sid) members.push(Number(name));
  }
  return members;
}

/** Send `sigs`, in order, to the group of `leader` and to every member of its session. */
export function killSession(leader: number, sigs: number[]): void {
  const c = libc();
  const members = sessionMembers(leader);
  for (const sig of sigs) {
    c.kill(-leader, sig);
    for (const pid of members) c.kill(pid, sig);
  }
}
