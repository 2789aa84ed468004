/**
 * The cgroup hierarchies of this host as a server sees them: where the writable v2 hierarchy
 * is, the controllers it enables for its children, this process's own cgroup in a v1
 * hierarchy, and killing a v2 cgroup's whole tree (`cgroup.kill`, woken by `cgroup.events`,
 * never polling). It must never kill outside the directory it is given, and never report a
 * kill that did not happen (a kill that finds no descriptor free throws).
 *
 * @module
 */

import {
  cString,
  E,
  errno,
  libc,
  noDescriptorFree,
  O,
  openFile,
  OsError,
  readSmallFile,
  readWholeFile,
} from "../../ffi/libc.ts";
import type { Reactor, Registration } from "../../io/reactor.ts";
import { parseMountInfo } from "../fs/mountinfo.ts";
import { removeDirs, writeFile } from "./cgroup_fs.ts";

const EPOLLPRI = 0x2;

/** The directory beneath which, in each hierarchy, every instance of uexec makes its own. */
export const PARENT = "uexec";

/** The writable cgroup v2 hierarchy: `configured`, else the unified one of this host. */
export function cgroupRoot(configured: string | undefined): string | undefined {
  if (configured) return configured;
  for (const candidate of ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]) {
    if (readSmallFile(`${candidate}/cgroup.controllers`) !== undefined) return candidate;
  }
  return undefined;
}

/**
 * Enable `wanted` controllers (where available) for the children of each of `path`, top down;
 * returns those the last one's children get.
 */
export function enableControllers(path: string[], wanted: string[]): Set<string> {
  for (const dir of path) {
    const available = (readSmallFile(`${dir}/cgroup.controllers`) ?? "").split(/\s+/);
    for (const c of wanted.filter((c) => available.includes(c))) {
      try {
        writeFile(`${dir}/cgroup.subtree_control`, `+${c}`);
      } catch {
        // Not ours to enable (or processes live there): that limit is not enforced by v2.
      }
    }
  }
  const last = path[path.length - 1];
  return new Set((readSmallFile(`${last}/cgroup.subtree_control`) ?? "").split(/\s+/));
}

/** The v1 cgroup hierarchies mounted here: each mount point and the controllers it holds. */
export function v1Mounts(): { path: string; controllers: string[] }[] {
  return parseMountInfo(readWholeFile("/proc/self/mountinfo"))
    .filter((m) => m.fsType === "cgroup")
    .map((m) => ({ path: m.mountPoint, controllers: m.superOptions }));
}

/** `<mount><our own cgroup>` in the v1 hierarchy of `controller`, when one is mounted. */
export function v1Own(controller: string): string | undefined {
  const mount = v1Mounts().findLast((m) => m.controllers.includes(controller))?.path;
  if (mount === undefined) return undefined;
  for (const line of (readSmallFile("/proc/self/cgroup") ?? "").split("\n")) {
    const [, names, path] = line.split(":");
    if (names?.split(",").includes(controller)) return path === "/" ? mount : mount + path;
  }
  return undefined;
}

/** A `cgroup.events` read (read and decoded at once, so one buffer serves every cgroup). */
const eventsText = new Uint8Array(256);
const latin1 = new TextDecoder("latin1");

/**
 * `cgroup.kill` on the v2 cgroup `dir` (which kills everything beneath it too), then wait
 * (woken by `cgroup.events`, no polling) until it is empty; false when it held nothing.
 */
export async function killTree(reactor: Reactor, dir: string, room?: () => void): Promise<boolean> {
  const watch = watchEmpty(reactor, dir, room);
  if (!watch) return false; // gone already
  try {
    // Emptied already (the common case: a command that left nothing): no kill, no watch.
    if (!watch.populated()) return false;
    writeFile(`${dir}/cgroup.kill`, "1", false, room);
    await watch.emptied();
    return true;
  } finally {
    watch.close();
  }
}

/** A watch on a v2 cgroup's `cgroup.events` (see {@link watchEmpty}). */
export interface EmptyWatch {
  /** Whether anything runs in it (or beneath it) now. */
  populated(): boolean;
  /** Resolves once nothing runs in it or beneath it (at once when nothing does now). */
  emptied(): Promise<void>;
  /** Stop watching (close the file). */
  close(): void;
}

/**
 * Watch the v2 cgroup `dir` until nothing runs in it or beneath it (woken by `cgroup.events`,
 * no polling); undefined when it is gone. A watch that finds no descriptor free throws (never
 * a kill or a wait that silently did nothing).
 */
export function watchEmpty(
  reactor: Reactor,
  dir: string,
  room?: () => void,
): EmptyWatch | undefined {
  const c = libc();
  const fd = openFile(`${dir}/cgroup.events`, O.CLOEXEC, room);
  if (fd < 0) {
    const code = errno();
    if (noDescriptorFree(code)) throw new OsError(`open(${dir}/cgroup.events)`, code);
    return undefined;
  }
  const populated = () => {
    const n = c.pread(fd, eventsText, BigInt(eventsText.length), 0n);
    return n > 0 && /^populated 1$/m.test(latin1.decode(eventsText.subarray(0, n)));
  };
  const { promise, resolve } = Promise.withResolvers<void>();
  let reg: Registration | undefined;
  let closed = false;
  const close = () => {
    if (closed) return;
    closed = true;
    if (reg) reactor.remove(reg);
    c.close(fd);
  };
  return {
    populated,
    emptied() {
      if (closed || reg !== undefined) return promise;
      if (!populated()) resolve();
      else {
        reg = reactor.add(fd, EPOLLPRI, { readable: () => populated() || resolve() });
        // Emptied between the look and the watch: no event would come.
        if (!populated()) resolve();
      }
      return promise;
    },
    close,
  };
}

/** {@link killTree} on the v2 cgroup `dir`, then remove it and its v1 twins `v1`. */
export async function killAndRemove(reactor: Reactor, dir: string, v1: string[]): Promise<boolean> {
  const killed = await killTree(reactor, dir);
  removeDirs([dir, ...v1]);
  return killed;
}

/** Make `path` and the parents it lacks. */
export function mkdirs(path: string): void {
  let at = "";
  for (const part of path.split("/").slice(1)) {
    at += `/${part}`;
    if (libc().mkdir(cString(at), 0o755) < 0 && errno() !== E.EEXIST) {
      throw new OsError(`mkdir(${at})`, errno());
    }
  }
}
