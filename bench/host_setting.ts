/**
 * A host-wide setting that a bench raises for its run (`kernel.pty.max`), shared by every bench
 * on the host at once. Each run takes a lease: the first one records the value it found, every
 * lease raises the setting to at least what it needs, and the value found first is put back when
 * the last living holder lets go. Leases are kept in a state file under an exclusive `flock`, so
 * benches that start and end in any order never leave the host raised; the lease of a bench that
 * was killed (its process gone, or its pid reused: the start time is part of the holder's name) is
 * dropped by the next one, which then puts the recorded value back when it ends.
 *
 * It must never put back anything but the value found before the first raise, and never lower the
 * setting while a living holder needs it raised.
 *
 * @module
 */

import { statFields } from "./procs.ts";

/** The setting: read it, write it. */
export interface Knob {
  read(): number;
  write(value: number): void;
}

/** One run's hold on the setting. */
export interface Lease {
  /** The value the setting had before this run took it. */
  before: number;
  /** The value now, after the raise. */
  now: number;
  /** Let go: the last living holder puts the recorded value back. */
  release(): void;
}

interface State {
  original: number;
  holders: string[];
}

/**
 * A process named by its pid and its start time (so that a reused pid is another process).
 * Read through the bench's FFI /proc reader: Deno's own file API refuses /proc/<pid> files
 * without --allow-all, which `deno task bench` does not have.
 */
function holderName(pid: number): string | undefined {
  try {
    return `${pid}:${statFields(pid)[19]}`;
  } catch {
    return undefined;
  }
}

/** Whether the process that took the lease `holder` (`pid:start:n`) still runs. */
function alive(holder: string): boolean {
  const [pid, start] = holder.split(":");
  return holderName(Number(pid)) === `${pid}:${start}`;
}

/** Leases taken by this process so far (each holder name is one lease's). */
let taken = 0;

/** Runs `fn` holding the exclusive lock of `dir`. */
function locked<T>(dir: string, fn: () => T): T {
  Deno.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const lock = Deno.openSync(`${dir}/lock`, { create: true, write: true });
  try {
    lock.lockSync(true);
    return fn();
  } finally {
    lock.close();
  }
}

function readState(file: string): State | undefined {
  try {
    return JSON.parse(Deno.readTextFileSync(file)) as State;
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return undefined;
    throw err;
  }
}

/**
 * Takes a lease on `knob` needing at least `want`, with the shared state in `dir` (one directory
 * per setting). Throws when the setting cannot be written (the lease is then not taken).
 */
export function leaseAtLeast(knob: Knob, want: number, dir: string): Lease {
  const file = `${dir}/state.json`;
  const me = `${holderName(Deno.pid)}:${++taken}`;
  return locked(dir, () => {
    const state = readState(file);
    const before = knob.read();
    const original = state?.original ?? before;
    const holders = (state?.holders ?? []).filter(alive);
    if (before < want) knob.write(want);
    Deno.writeTextFileSync(file, JSON.stringify({ original, holders: [...holders, me] }));
    let released = false;
    return {
      before,
      now: Math.max(before, want),
      release: () => {
        if (released) return;
        released = true;
        locked(dir, () => {
          const state = readState(file);
          if (!state) return;
          const left = state.holders.filter((h) => h !== me && alive(h));
          if (left.length > 0) {
            Deno.writeTextFileSync(file, JSON.stringify({ ...state, holders: left }));
            return;
          }
          knob.write(state.original);
          Deno.removeSync(file);
        });
      },
    };
  });
}
