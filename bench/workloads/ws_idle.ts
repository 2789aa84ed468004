/**
 * Scale over the WebSocket (issue 34's idle sessions): open N idle `cat` sessions through one
 * WebSocket connection (64 `exec_command` requests in flight), then read the server's resident
 * memory and its open descriptors per session, time `/healthz` while they live, and time the
 * server's exit on SIGTERM with all of them live. On a host too slow to open all N within the workload's time limit
 * (less a reserve for the measurements), opening stops there and the rows say how many opened.
 * N beyond the kernel's PTY limit needs `kernel.pty.max` raised: as root the bench raises it for
 * the run, on a lease shared with other benches on the host (the last to end puts back the value
 * found first); otherwise the row says so. The sessions end with the server's
 * SIGTERM shutdown.
 * @module
 */

import { leaseAtLeast } from "../host_setting.ts";
import { log, ticker } from "../log.ts";
import { listProcDir } from "../procfs.ts";
import { noFigure, row } from "../report.ts";
import { connect, type Context, type Outcome, startServer } from "../workload.ts";
import { healthzLatency } from "./idle.ts";

const IN_FLIGHT = 64;
const PTY_MAX = "kernel.pty.max";
/** Of the workload's time limit, what is kept for the measurements after opening. */
const MEASURE_RESERVE = 0.25;

/** `sysctl` (Deno needs --allow-all to write /proc/sys itself); throws with its stderr. */
function sysctl(...args: string[]): string {
  const res = new Deno.Command("sysctl", { args, stdout: "piped", stderr: "piped" }).outputSync();
  const text = new TextDecoder();
  if (!res.success) throw new Error(text.decode(res.stderr).trim());
  return text.decode(res.stdout).trim();
}

/** Where benches on this host share their lease on kernel.pty.max (see host_setting.ts). */
const PTY_MAX_LEASES = "/run/uexec-bench/kernel.pty.max";

/**
 * Raises kernel.pty.max so that `more` terminals fit beside those in use on the machine now
 * (other servers, tests) when it is lower and settable, on a lease shared with the other benches
 * on the host; returns the restore step (the last bench to end puts the value found back).
 */
function raisePtyMax(more: number): { ok: boolean; note: string; restore: () => void } {
  const want = Number(sysctl("-n", "kernel.pty.nr")) + more;
  const knob = {
    read: () => Number(sysctl("-n", PTY_MAX)),
    write: (value: number) => void sysctl("-w", `${PTY_MAX}=${value}`),
  };
  try {
    const lease = leaseAtLeast(knob, want, PTY_MAX_LEASES);
    return {
      ok: true,
      note: lease.before >= want
        ? `kernel.pty.max ${lease.before}`
        : `kernel.pty.max raised from ${lease.before} to ${lease.now} for the run`,
      restore: lease.release,
    };
  } catch (err) {
    return {
      ok: false,
      note: `kernel.pty.max could not be raised to ${want}: ${(err as Error).message}`,
      restore: () => {},
    };
  }
}

/**
 * Opens `n` cat sessions over one WebSocket, `IN_FLIGHT` at a time, none sent after `stopAt` (on
 * the `performance.now()` clock); resolves once every one sent is open, with how many that is.
 */
async function openOverWebSocket(
  url: string,
  token: string,
  n: number,
  stopAt: number,
): Promise<{ socket: WebSocket; opened: number }> {
  const socket = new WebSocket(url, { headers: { authorization: `Bearer ${token}` } });
  await new Promise((resolve, reject) => {
    socket.onopen = resolve;
    socket.onerror = (e) => reject(new Error(`websocket: ${(e as ErrorEvent).message}`));
  });
  const tick = ticker("sessions open", n);
  let sent = 0;
  let opened = 0;
  const done = Promise.withResolvers<void>();
  const next = () => {
    const id = ++sent;
    socket.send(JSON.stringify({
      jsonrpc: "2.0",
      id,
      method: "exec_command",
      params: {
        cmd: "echo cat-ready; exec cat",
        shell: "/bin/sh",
        login: false,
        until: "cat-ready",
      },
    }));
  };
  socket.onclose = () => done.reject(new Error(`websocket closed after ${opened} sessions`));
  socket.onmessage = (e) => {
    const msg = JSON.parse(e.data as string);
    if (msg.error || msg.result?.session_id === undefined) {
      done.reject(new Error(`session ${opened + 1}: ${JSON.stringify(msg).slice(0, 300)}`));
      return;
    }
    tick(++opened);
    if (sent < n && performance.now() < stopAt) next();
    else if (opened === sent) done.resolve();
  };
  for (let i = 0; i < Math.min(IN_FLIGHT, n); i++) next();
  await done.promise;
  return { socket, opened };
}

/**
 * The sessions the server's descriptor limit (inherited from the bench, never raised) leaves
 * room for: each idle one holds one (its PTY; src/pty/reaper.ts), and 1,024 are kept for
 * everything else (the terminal probe's cache alone may hold 512).
 */
function fdRoom(): { sessions: number; limit: number } {
  const out = new Deno.Command("sh", { args: ["-c", "ulimit -n"], stdout: "piped" }).outputSync();
  const limit = Number(new TextDecoder().decode(out.stdout).trim());
  return { sessions: Number.isFinite(limit) ? limit - 1024 : Infinity, limit };
}

/** How many descriptors process `pid` has open (through libc: Deno asks --allow-all for it). */
function openDescriptors(pid: number): number {
  return listProcDir(`/proc/${pid}/fd`).length;
}

export async function wsIdleSessions(ctx: Context): Promise<Outcome> {
  const room = fdRoom();
  const n = Math.min(ctx.sizes.wsIdleSessions, room.sessions);
  const capped = n < ctx.sizes.wsIdleSessions
    ? `; ${ctx.sizes.wsIdleSessions.toLocaleString("en-US")} wanted, the descriptor limit ` +
      `(${room.limit}, not raisable here) allows ${n.toLocaleString("en-US")}`
    : "";
  const workload = `${n.toLocaleString("en-US")} live idle sessions over a WebSocket`;
  const pty = raisePtyMax(n + 2048);
  if (!pty.ok) return { rows: [noFigure(workload, "skipped", pty.note)], details: {} };
  try {
    await using server = await startServer(ctx, { UEXEC_MAX_SESSIONS: String(n + 100) });
    const client = connect(ctx, server);
    const healthzBefore = await healthzLatency(client, ctx.sizes.healthzRuns);
    const memBefore = server.memory();
    const fdsBefore = openDescriptors(server.pid);
    const wsUrl = (await client.healthz() as { websocket: string }).websocket;
    log(`opening ${n} idle cat sessions over one WebSocket, ${IN_FLIGHT} in flight (${pty.note})`);
    const t0 = performance.now();
    const stopAt = ctx.deadline - (ctx.deadline - t0) * MEASURE_RESERVE;
    const { socket, opened } = await openOverWebSocket(wsUrl, server.token, n, stopAt);
    const openS = (performance.now() - t0) / 1000;
    // Goals are set for all n: with fewer open the rows are information, not a verdict.
    const all = opened === n;
    const cut = all
      ? ""
      : `only ${opened.toLocaleString("en-US")} of ${
        n.toLocaleString("en-US")
      } opened within the workload's time limit (a slow host); figures are for those`;
    const memAfter = server.memory();
    const fdsAfter = openDescriptors(server.pid);
    const perSession = Math.round((fdsAfter - fdsBefore) / opened * 1000) / 1000;
    log(
      `${opened} open in ${openS.toFixed(2)} s, server RSS ${memAfter.rssMiB} MiB, ` +
        `${fdsAfter} descriptors open (${perSession} per session)`,
    );
    // A fresh client: the first one's keep-alive connection outlived the server's idle timeout.
    const healthzDuring = await healthzLatency(connect(ctx, server), ctx.sizes.healthzRuns);
    socket.onclose = null;
    socket.close();
    log(`SIGTERM with ${opened} sessions live`);
    const stop = await server.stop();
    return {
      rows: [
        row({
          workload,
          metric: all ? "time to open all" : `time to open ${opened.toLocaleString("en-US")}`,
          unit: "s",
          uexec: Math.round(openS * 100) / 100,
          goal: all ? { op: "<=", value: 20, text: "<= 20 s" } : undefined,
          note: pty.note + capped + (all ? "" : `; ${cut}`),
        }),
        row({
          workload,
          metric: "descriptors per session",
          unit: "",
          uexec: perSession,
          goal: { op: "<=", value: 1.1, text: "<= 1.1" },
          note: `${fdsAfter} open with them (${fdsBefore} before) of the limit ${room.limit}, ` +
            "not raised; the terminal probe's cache holds at most 512 of them",
        }),
        row({
          workload,
          metric: "server RSS",
          unit: "MiB",
          uexec: memAfter.rssMiB,
          baseline: { value: memBefore.rssMiB, label: "no sessions" },
          goal: all ? { op: "<=", value: 1024, text: "<= 1 GiB" } : undefined,
          note: cut,
        }),
        row({
          workload,
          metric: "/healthz p99",
          unit: "ms",
          uexec: healthzDuring.p99,
          baseline: { value: healthzBefore.p99, label: "no sessions" },
          goal: all ? { op: "<=", value: 10, text: "<= 10 ms" } : undefined,
          note: cut,
        }),
        row({
          workload,
          metric: "server exit on SIGTERM",
          unit: "ms",
          uexec: stop.exitMs,
          goal: all ? { op: "<=", value: 3000, text: "<= 3 s" } : undefined,
          note: `with all ${opened.toLocaleString("en-US")} sessions live` +
            (stop.killed ? "; SIGKILL was needed" : "") +
            (stop.orphans.length > 0 ? `; ${stop.orphans.length} processes left behind` : ""),
        }),
      ],
      details: {
        wanted: n,
        opened,
        open_seconds: openS,
        memory_before: memBefore,
        memory_after: memAfter,
        descriptors_before: fdsBefore,
        descriptors_after: fdsAfter,
        stop,
      },
    };
  } finally {
    pty.restore();
  }
}
