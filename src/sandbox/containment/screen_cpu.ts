/**
 * The CPU weight of the server's screen worker (output/screen_worker.ts), the thread that runs
 * every `screen` session's terminal emulator. Emulation costs several times the CPU of the
 * output it follows, and a screen session's child runs at its emulator's pace (output/screen.ts
 * pauses it behind a backlog), so the weight of that one thread decides what a screen session's
 * flood takes from everyone else. The thread is put in a v1 `cpu` cgroup of its own,
 * `<cpu mount><our own cgroup>/uexec-screens-<instance>`, at the lowest weight (`cpu.shares` 2)
 * while no call waits on a screen, and at a task's usual weight (1024) while one does: a screen
 * nobody is looking at catches up on CPU nobody else wants; a call waiting on one gets the
 * emulator's full share back at once.
 *
 * The nice value the worker gives itself is no substitute: with autogroup scheduling (each
 * process session a group of its own) nice only ranks the threads within the server's group, and
 * the group's weight follows whichever of its threads has work. The cgroup is flat, beside the
 * server rather than beneath `uexec/<instance>`, because a v1 group's `cpu.shares` counts only
 * among its siblings: nested in a parent of the default weight, the parent's 1024 would compete.
 *
 * It must never move a thread but the worker's (the one it is given; threads that one starts,
 * such as its runtime's blocking pool, the kernel puts beside it), never leave a thread in the
 * cgroup when closed (each goes back to our own cgroup first), and never fail a session: where
 * the cgroup cannot be made or written, screens run as before, on the worker's own nice value.
 *
 * @module
 */

import { E, listDir, OsError, readSmallFile } from "../../ffi/libc.ts";
import type { ScreenWeight } from "../../output/screen.ts";
import { mkdirs, v1Own } from "./hierarchy.ts";
import { removeDirs, writeFile } from "./cgroup_fs.ts";

/** `cpu.shares` while no call waits on a screen: the kernel's minimum. */
export const IDLE_SHARES = 2;
/** `cpu.shares` while a call waits on a screen: a nice-0 task's. */
export const LOOKED_SHARES = 1024;

/** The screen worker's cgroup of instance `instance` beneath `own` (our own v1 `cpu` cgroup). */
export function screenCpuDir(own: string, instance: string): string {
  return `${own}/${PREFIX}${instance}`;
}

const PREFIX = "uexec-screens-";

/** The instances that have a screen worker's cgroup beneath `own`, with the directory of each. */
export function screenCpuDirs(own: string): { instance: string; dir: string }[] {
  try {
    return listDir(own).filter((n) => n.startsWith(PREFIX)).map((n) => ({
      instance: n.slice(PREFIX.length),
      dir: `${own}/${n}`,
    }));
  } catch {
    return [];
  }
}

/** The v1 `cpu` cgroup holding the screen worker's thread. */
export class ScreenCpuGroup implements ScreenWeight {
  readonly dir: string;
  #home: string;
  #looked = false;

  private constructor(home: string, dir: string) {
    this.#home = home;
    this.dir = dir;
  }

  /** Make instance `instance`'s cgroup at the lowest weight; undefined without a v1 `cpu`. */
  static open(instance: string, own = v1Own("cpu")): ScreenCpuGroup | undefined {
    if (own === undefined) return undefined;
    const dir = screenCpuDir(own, instance);
    try {
      mkdirs(dir);
      writeFile(`${dir}/cpu.shares`, `${IDLE_SHARES}`);
    } catch {
      removeDirs([dir]);
      return undefined;
    }
    return new ScreenCpuGroup(own, dir);
  }

  /** Move the thread `tid` (a thread id of this process) into the cgroup. */
  adopt(tid: number): void {
    writeFile(`${this.dir}/tasks`, `${tid}`);
  }

  /** A call waits on a screen (`looked`), or none does: the weight follows. */
  look(looked: boolean): void {
    if (looked === this.#looked) return;
    writeFile(`${this.dir}/cpu.shares`, `${looked ? LOOKED_SHARES : IDLE_SHARES}`);
    this.#looked = looked;
  }

  /** Move the threads in it back to our own cgroup (those that have not ended); remove it. */
  close(): void {
    const tids = (readSmallFile(`${this.dir}/tasks`, 1 << 16) ?? "").split("\n").filter((t) => t);
    for (const tid of tids) {
      try {
        writeFile(`${this.#home}/tasks`, tid);
      } catch (err) {
        if (!(err instanceof OsError && err.errno === E.ESRCH)) throw err;
      }
    }
    removeDirs([this.dir]);
  }
}
