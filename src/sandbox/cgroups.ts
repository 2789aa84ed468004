/**
 * One cgroup per session, so that killing a session kills everything it started, whatever it
 * did with sessions, process groups or double forks (`cgroup.kill`), and so that its whole
 * tree is limited and accounted. Cgroups live at `<v2 root>/uexec/<instance>/<session>`; the
 * instance name records the server's pid and start time, so a later server can tell that an
 * instance is dead (even after pid reuse) and kill and remove what it left.
 *
 * On hybrid hosts, where the v1 hierarchies own the `pids` and `memory` controllers, each
 * session also gets a cgroup of the same name beneath this server's own v1 cgroup there, for
 * its limits and its memory peak; the v2 cgroup still does the killing and the CPU accounting
 * (`cpu.stat` needs no controller).
 *
 * A child is put in its cgroups by pid while it waits at a gate (see `limits.ts`), before the
 * command's first instruction. This module must never move the server itself, never kill
 * outside the cgroups it made (or that a dead instance made), and never fail open: a session
 * that cannot be contained is an error.
 *
 * @module
 */

import {
  cString,
  errno,
  libc,
  listDir,
  O,
  OsError,
  rawSyscall,
  readSmallFile,
} from "../ffi/libc.ts";
import type { Reactor } from "../io/reactor.ts";
import { SandboxUnavailableError } from "./errors.ts";
import type { ResourceLimits } from "./policy.ts";

const EPOLLPRI = 0x2;
const SYS_PREAD64 = 17;
const O_WRONLY = 1;
const EEXIST = 17;
const PARENT = "uexec";

/** How a limit is enforced by the kernel on this host. */
export type Enforcement = "cgroup-v2" | "cgroup-v1" | "rlimit" | "none";

/** What `/healthz` reports about containment. */
export interface ContainmentReport {
  containment: "cgroup" | "process-group";
  /** The directory holding this instance's session cgroups. */
  cgroup?: string;
  /** Why sessions are not in cgroups (process-group containment only). */
  reason?: string;
  /** How each kind of profile limit is enforced for a session's whole tree. */
  limits: { pids: Enforcement; memory: Enforcement; cpu: Enforcement };
}

/** What a session's whole process tree used. */
export interface Usage {
  cpu_seconds: number;
  /** Null where no memory accounting is available. */
  peak_memory_bytes: number | null;
}

/** A v1 hierarchy this server uses: where our own cgroup is in it. */
interface V1 {
  controller: "pids" | "memory";
  /** `<mount><our cgroup>/uexec/<instance>`. */
  dir: string;
}

/** A session's cgroups. */
export class SessionCgroup {
  #host: CgroupHost;
  readonly name: string;
  #killed?: Promise<void>;

  constructor(host: CgroupHost, name: string) {
    this.#host = host;
    this.name = name;
  }

  /** The v2 directory. */
  get dir(): string {
    return `${this.#host.dir}/${this.name}`;
  }

  /**
   * The `cgroup.procs` file of every cgroup of the session, opened for writing (close them
   * after use): whoever writes a pid there moves that process in with our credentials, which
   * the kernel checks at open.
   */
  openProcs(): number[] {
    const fds: number[] = [];
    for (const d of this.#host.dirsOf(this.name)) {
      const fd = libc().open(cString(`${d}/cgroup.procs`), O_WRONLY | O.CLOEXEC);
      if (fd < 0) {
        const code = errno();
        for (const f of fds) libc().close(f);
        throw new OsError(`open(${d}/cgroup.procs)`, code);
      }
      fds.push(fd);
    }
    return fds;
  }

  /** What the session's tree used so far (exited processes included). */
  usage(): Usage {
    const stat = readSmallFile(`${this.dir}/cpu.stat`) ?? "";
    const usec = Number(/^usage_usec (\d+)/m.exec(stat)?.[1] ?? 0);
    const memory = this.#host.v1Dir("memory", this.name);
    const peak = memory === undefined
      ? readSmallFile(`${this.dir}/memory.peak`)
      : readSmallFile(`${memory}/memory.max_usage_in_bytes`);
    return {
      cpu_seconds: usec / 1e6,
      peak_memory_bytes: peak === undefined ? null : Number(peak.trim()),
    };
  }

  /** Send each of `signals`, in order, to every process in the session's cgroup now. */
  signal(...signals: number[]): void {
    if (this.#killed) return;
    const procs = (readSmallFile(`${this.dir}/cgroup.procs`, 1 << 20) ?? "").split("\n");
    for (const sig of signals) for (const pid of procs) if (pid) libc().kill(Number(pid), sig);
  }

  /** SIGKILL everything in the session's cgroup; resolves once it is empty and removed. */
  kill(): Promise<void> {
    this.#killed ??= killAndRemove(
      this.#host.reactor,
      this.dir,
      this.#host.dirsOf(this.name).slice(1),
    );
    return this.#killed;
  }
}

/** This server's instance of session cgroups. */
export class CgroupHost {
  readonly reactor: Reactor;
  /** `<root>/uexec/<instance>`. */
  readonly dir: string;
  readonly #v1: V1[];
  /** The controllers the v2 hierarchy has. */
  readonly #v2: Set<string>;
  #next = 0;
  /** A session cgroup made ahead for the next session with the same limits. */
  #spare?: { key: string; cgroup: SessionCgroup };
  #refill?: ReturnType<typeof setTimeout>;
  #closed = false;

  private constructor(reactor: Reactor, dir: string, v2: Set<string>, v1: V1[]) {
    this.reactor = reactor;
    this.dir = dir;
    this.#v2 = v2;
    this.#v1 = v1;
  }

  /**
   * Make this instance's cgroup directory beneath `root` (the v2 hierarchy) and the session
   * parents in the v1 `pids` and `memory` hierarchies where they exist; throws when `root` is
   * not a writable cgroup v2 hierarchy.
   */
  static open(reactor: Reactor, root: string): CgroupHost {
    if (readSmallFile(`${root}/cgroup.controllers`) === undefined) {
      throw new SandboxUnavailableError(`${root} is not a cgroup v2 hierarchy`);
    }
    const instance = instanceName(Deno.pid);
    const dir = `${root}/${PARENT}/${instance}`;
    mkdirs(dir);
    const v2 = enableControllers([root, `${root}/${PARENT}`, dir], ["pids", "memory"]);
    const v1: V1[] = [];
    for (const controller of ["pids", "memory"] as const) {
      if (v2.has(controller)) continue;
      const own = v1Own(controller);
      if (own === undefined) continue;
      const vdir = `${own}/${PARENT}/${instance}`;
      try {
        mkdirs(vdir);
        v1.push({ controller, dir: vdir });
      } catch {
        // Not writable here: that limit falls back to its rlimit.
      }
    }
    return new CgroupHost(reactor, dir, v2, v1);
  }

  /** Every directory of session `name`: the v2 one first. */
  dirsOf(name: string): string[] {
    return [`${this.dir}/${name}`, ...this.#v1.map((v) => `${v.dir}/${name}`)];
  }

  /** Session `name`'s directory in the v1 hierarchy of `controller`, when one is used. */
  v1Dir(controller: V1["controller"], name: string): string | undefined {
    const v = this.#v1.find((v) => v.controller === controller);
    return v && `${v.dir}/${name}`;
  }

  /** How each limit is enforced for a session's tree here. */
  limits(): ContainmentReport["limits"] {
    const by = (c: "pids" | "memory" | "cpu", fallback: Enforcement): Enforcement =>
      this.#v2.has(c)
        ? "cgroup-v2"
        : this.#v1.some((v) => v.controller === c)
        ? "cgroup-v1"
        : fallback;
    return { pids: by("pids", "rlimit"), memory: by("memory", "rlimit"), cpu: "rlimit" };
  }

  /** Make the cgroups of a new session, limited by `limits`. */
  create(limits: ResourceLimits): SessionCgroup {
    const key = `${limits.maxProcesses}/${limits.addressSpaceBytes}`;
    const spare = this.#spare;
    this.#spare = undefined;
    if (spare && spare.key !== key) {
      spare.cgroup.kill().catch((err) => console.error("uexec: cannot remove a cgroup:", err));
    }
    const cgroup = spare?.key === key ? spare.cgroup : this.#make(limits);
    // The next session's cgroup is made after this one has started, off its path.
    clearTimeout(this.#refill);
    this.#refill = setTimeout(() => {
      if (this.#closed || this.#spare) return;
      try {
        this.#spare = { key, cgroup: this.#make(limits) };
      } catch {
        // The next session makes its own (and reports why it cannot).
      }
    }, 0);
    return cgroup;
  }

  /** Make the cgroups of a session, limited by `limits`. */
  #make(limits: ResourceLimits): SessionCgroup {
    const name = `s${++this.#next}`;
    const [v2, ...rest] = this.dirsOf(name);
    mkdir(v2);
    for (const d of rest) mkdir(d);
    const pids = this.#v2.has("pids") ? v2 : this.v1Dir("pids", name);
    if (pids && limits.maxProcesses !== undefined) {
      writeFile(`${pids}/pids.max`, `${limits.maxProcesses}`);
    }
    const memory = limits.addressSpaceBytes;
    if (memory !== undefined) {
      if (this.#v2.has("memory")) {
        writeFile(`${v2}/memory.max`, `${memory}`);
        writeFile(`${v2}/memory.swap.max`, "0");
      } else {
        const m = this.v1Dir("memory", name);
        if (m) {
          writeFile(`${m}/memory.limit_in_bytes`, `${memory}`);
          // No swapping past the limit either, where swap is accounted.
          if (readSmallFile(`${m}/memory.memsw.limit_in_bytes`) !== undefined) {
            writeFile(`${m}/memory.memsw.limit_in_bytes`, `${memory}`);
          }
        }
      }
    }
    return new SessionCgroup(this, name);
  }

  /**
   * SIGKILL everything in every session cgroup of this instance with one `cgroup.kill`;
   * resolves once all of them are empty (server shutdown; each session's `kill` then only
   * removes its directories).
   */
  killAll(): Promise<void> {
    return killTree(this.reactor, this.dir);
  }

  /** Remove this instance's (empty) directories (server shutdown, after every session). */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#refill);
    await this.#spare?.cgroup.kill();
    for (const d of [this.dir, ...this.#v1.map((v) => v.dir)]) {
      try {
        rmdir(d);
      } catch {
        // A session cgroup still draining; the next start removes it.
      }
    }
  }

  /**
   * Kill and remove what instances that no longer run left beneath `root`; resolves to how
   * many of their session cgroups were removed.
   */
  static async reapDead(reactor: Reactor, root: string): Promise<number> {
    const parent = `${root}/${PARENT}`;
    let instances: string[];
    try {
      instances = listDir(parent).filter((n) => /^i\d+-\d+$/.test(n));
    } catch {
      return 0;
    }
    let count = 0;
    for (const instance of instances) {
      const [pid, start] = instance.slice(1).split("-").map(Number);
      if (startTime(pid) === start) continue;
      const dir = `${parent}/${instance}`;
      const sessions = listDir(dir).filter((n) => /^s\d+$/.test(n));
      const v1 = (["pids", "memory"] as const).map(v1Own).filter((d) => d !== undefined)
        .map((d) => `${d}/${PARENT}/${instance}`);
      for (const s of sessions) {
        await killAndRemove(reactor, `${dir}/${s}`, v1.map((d) => `${d}/${s}`));
        count++;
      }
      for (const d of [dir, ...v1]) {
        try {
          rmdir(d);
        } catch {
          // Gone already, or never made in that hierarchy.
        }
      }
    }
    return count;
  }
}

/** The writable cgroup v2 hierarchy: `configured`, else the unified one of this host. */
export function cgroupRoot(configured: string | undefined): string | undefined {
  if (configured) return configured;
  for (const candidate of ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]) {
    if (readSmallFile(`${candidate}/cgroup.controllers`) !== undefined) return candidate;
  }
  return undefined;
}

/** The instance directory name of process `pid`: its pid and start time. */
function instanceName(pid: number): string {
  return `i${pid}-${startTime(pid)}`;
}

/** Process `pid`'s start time in clock ticks since boot, or undefined when it is gone. */
function startTime(pid: number): number | undefined {
  const stat = readSmallFile(`/proc/${pid}/stat`);
  if (stat === undefined) return undefined;
  // Fields after the command name (which may hold spaces) start at field 3; starttime is 22.
  const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(rest[19]);
}

/**
 * Enable `wanted` controllers (where available) for the children of each of `path`, top down;
 * returns those the last one's children get.
 */
function enableControllers(path: string[], wanted: string[]): Set<string> {
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

/** `<mount><our own cgroup>` in the v1 hierarchy of `controller`, when one is mounted. */
function v1Own(controller: string): string | undefined {
  const mounts = readSmallFile("/proc/self/mountinfo", 1 << 16) ?? "";
  let mount: string | undefined;
  for (const line of mounts.split("\n")) {
    const [left, right] = line.split(" - ");
    if (!right) continue;
    const [fstype, , options] = right.split(" ");
    if (fstype === "cgroup" && options.split(",").includes(controller)) {
      mount = left.split(" ")[4];
    }
  }
  if (mount === undefined) return undefined;
  for (const line of (readSmallFile("/proc/self/cgroup") ?? "").split("\n")) {
    const [, names, path] = line.split(":");
    if (names?.split(",").includes(controller)) return path === "/" ? mount : mount + path;
  }
  return undefined;
}

/**
 * `cgroup.kill` on the v2 cgroup `dir` (which kills everything beneath it too), then wait
 * (woken by `cgroup.events`, no polling) until it is empty.
 */
async function killTree(reactor: Reactor, dir: string): Promise<void> {
  const c = libc();
  const fd = c.open(cString(`${dir}/cgroup.events`), O.CLOEXEC);
  if (fd < 0) return;
  try {
    const buf = new Uint8Array(256);
    const populated = () => {
      const n = rawSyscall(SYS_PREAD64, fd, buf, buf.length, 0);
      return n > 0 && /^populated 1$/m.test(new TextDecoder().decode(buf.subarray(0, n)));
    };
    const { promise, resolve } = Promise.withResolvers<void>();
    const reg = reactor.add(fd, EPOLLPRI, {
      readable: () => {
        if (!populated()) resolve();
      },
    });
    try {
      if (populated()) {
        writeFile(`${dir}/cgroup.kill`, "1");
        if (populated()) await promise;
      }
    } finally {
      reactor.remove(reg);
    }
  } finally {
    c.close(fd);
  }
}

/** {@link killTree} on the v2 cgroup `dir`, then remove it and its v1 twins `v1`. */
async function killAndRemove(reactor: Reactor, dir: string, v1: string[]): Promise<void> {
  await killTree(reactor, dir);
  for (const d of [dir, ...v1]) {
    try {
      rmdir(d);
    } catch {
      // Never made in that hierarchy.
    }
  }
}

/** This server's containment: cgroups where possible (or required), else process groups. */
export interface Containment {
  host?: CgroupHost;
  report: ContainmentReport;
  /** Session cgroups of dead instances removed at start-up. */
  reaped: number;
}

/**
 * Set up containment for this server: reap what dead instances left, then open this
 * instance's cgroups under `root` (see {@link cgroupRoot}); `mode` `cgroup` makes their absence
 * an error, `process-group` skips them.
 */
export async function openContainment(
  reactor: Reactor,
  mode: "auto" | "cgroup" | "process-group",
  configuredRoot: string | undefined,
): Promise<Containment> {
  const fallback = (reason: string): Containment => ({
    reaped: 0,
    report: {
      containment: "process-group",
      reason,
      limits: { pids: "rlimit", memory: "rlimit", cpu: "rlimit" },
    },
  });
  if (mode === "process-group") return fallback("UEXEC_CONTAINMENT=process-group");
  const root = cgroupRoot(configuredRoot);
  try {
    if (root === undefined) throw new Error("no cgroup v2 hierarchy is mounted");
    const reaped = await CgroupHost.reapDead(reactor, root);
    const host = CgroupHost.open(reactor, root);
    return {
      host,
      reaped,
      report: { containment: "cgroup", cgroup: host.dir, limits: host.limits() },
    };
  } catch (err) {
    const reason = `no writable cgroup v2 hierarchy: ${(err as Error).message}`;
    if (mode === "cgroup") throw new SandboxUnavailableError(reason, { cause: err });
    return fallback(reason);
  }
}

/*
 * The cgroup files are written through libc: Deno's own file APIs want every permission for
 * anything beneath /sys.
 */

/** Write `text` to the cgroup file `path`. */
function writeFile(path: string, text: string): void {
  const c = libc();
  const fd = c.open(cString(path), O_WRONLY | O.CLOEXEC);
  if (fd < 0) throw new OsError(`open(${path})`, errno());
  try {
    const bytes = new TextEncoder().encode(text);
    if (Number(c.write(fd, bytes, BigInt(bytes.length))) !== bytes.length) {
      throw new OsError(`write(${path})`, errno());
    }
  } finally {
    c.close(fd);
  }
}

/** Make the directory `path`. */
function mkdir(path: string): void {
  if (libc().mkdir(cString(path), 0o755) < 0) throw new OsError(`mkdir(${path})`, errno());
}

/** Make `path` and the parents it lacks. */
function mkdirs(path: string): void {
  let at = "";
  for (const part of path.split("/").slice(1)) {
    at += `/${part}`;
    if (libc().mkdir(cString(at), 0o755) < 0 && errno() !== EEXIST) {
      throw new OsError(`mkdir(${at})`, errno());
    }
  }
}

/** Remove the (empty) cgroup directory `path`. */
function rmdir(path: string): void {
  if (libc().rmdir(cString(path)) < 0) throw new OsError(`rmdir(${path})`, errno());
}
