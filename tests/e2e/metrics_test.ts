/**
 * `GET /metrics` and the log lines end to end: a real server scraped right after it started
 * (process metrics checked against its own `/proc` entries, build info, every labelled counter
 * at 0) and before and after real commands, the exposition parsed with a Prometheus text-format
 * parser (no string matching), and its stderr read back as JSON lines.
 *
 * @module
 */

import assert from "node:assert/strict";
import parsePrometheus from "parse-prometheus-text-format";
import { Logger } from "../../src/log.ts";
import { VERSION } from "../../src/version.ts";
import { startServer, type TestServer } from "../helpers/server.ts";

interface Family {
  name: string;
  type: string;
  metrics: { value?: string; labels?: Record<string, string>; count?: string; sum?: string }[];
}

async function scrape(server: TestServer): Promise<Map<string, Family>> {
  const res = await fetch(`${server.url}/metrics`, { headers: server.operator.auth });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  const families = parsePrometheus(await res.text()) as Family[];
  return new Map(families.map((f) => [f.name, f]));
}

/** The value of the sample of `name` with exactly `labels` (0 when absent). */
function value(families: Map<string, Family>, name: string, labels: Record<string, string> = {}) {
  const family = families.get(name);
  assert.ok(family, `no metric ${name}`);
  const sample = family.metrics.find((m) =>
    JSON.stringify(Object.entries(m.labels ?? {}).sort()) ===
      JSON.stringify(Object.entries(labels).sort())
  );
  return sample === undefined ? 0 : Number(sample.value ?? sample.count);
}

/** The samples of `name`, each as its labels (sorted `k=v` joined by `,`) and its value. */
function samples(families: Map<string, Family>, name: string, type: string): Map<string, number> {
  const family = families.get(name);
  assert.equal(family?.type, type, name);
  return new Map(family.metrics.map((m) => [
    Object.entries(m.labels ?? {}).map(([k, v]) => `${k}=${v}`).sort().join(","),
    Number(m.value ?? m.count),
  ]));
}

/** CPU seconds (user and system) `/proc/<pid>/stat` gives the process `pid`. */
async function cpuSeconds(pid: number): Promise<number> {
  const stat = await Deno.readTextFile(`/proc/${pid}/stat`);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/** The number of observations of the unlabelled histogram `name`. */
function observations(families: Map<string, Family>, name: string): number {
  const family = families.get(name);
  assert.equal(family?.type, "HISTOGRAM", name);
  return Number(family.metrics[0]?.count ?? 0);
}

Deno.test("metrics: counters move when commands run; operator only", async (t) => {
  const launched = Date.now() / 1000;
  const server = await startServer();
  const ready = Date.now() / 1000;
  let stopped = false;
  try {
    await t.step("right after start: process metrics, build info, every counter at 0", async () => {
      const cpuBefore = await cpuSeconds(server.pid);
      const first = await scrape(server);
      const cpuAfter = await cpuSeconds(server.pid);

      const cpu = value(first, "process_cpu_seconds_total");
      assert.equal(first.get("process_cpu_seconds_total")?.type, "COUNTER");
      assert.ok(cpu >= cpuBefore && cpu <= cpuAfter, `cpu ${cpu} in [${cpuBefore}, ${cpuAfter}]`);
      // Its start (10 ms clock ticks, uptime to 10 ms) between the test's launch and the server's first line.
      const start = value(first, "process_start_time_seconds");
      assert.ok(
        start >= launched - 0.05 && start <= ready + 0.05,
        `${start}: ${launched}-${ready}`,
      );
      const limits = await Deno.readTextFile(`/proc/${server.pid}/limits`);
      const maxFds = Number(/^Max open files\s+(\d+)/m.exec(limits)?.[1]);
      assert.equal(value(first, "process_max_fds"), maxFds);
      const openFds = value(first, "process_open_fds");
      assert.ok(openFds > 3 && openFds < maxFds, `open fds ${openFds}`);
      assert.ok(value(first, "process_resident_memory_bytes") > 10_000_000);
      const virtual = value(first, "process_virtual_memory_bytes");
      assert.ok(virtual > value(first, "process_resident_memory_bytes"));

      assert.deepEqual(
        samples(first, "uexec_build_info", "GAUGE"),
        new Map([[`deno=${Deno.version.deno},version=${VERSION}`, 1]]),
      );
      const zeros = (labels: string[]) => new Map(labels.map((l) => [l, 0]));
      assert.deepEqual(
        samples(first, "uexec_commands_ended_total", "COUNTER"),
        zeros(["exit", "kill", "prune", "revoke", "shutdown", "timeout"].map((r) => `reason=${r}`)),
      );
      assert.deepEqual(
        samples(first, "uexec_denials_total", "COUNTER"),
        zeros(["fs-read", "fs-write", "network", "signal", "syscall"].map((k) => `kind=${k}`)),
      );
      const decisions = ["approved", "approved_for_session", "denied", "timed_out"]
        .map((d) => `decision=${d}`);
      assert.deepEqual(samples(first, "uexec_approvals_total", "COUNTER"), zeros(decisions));
      // The parser folds a labelled histogram into one sample: its count lines, read as text.
      assert.equal(first.get("uexec_approval_wait_seconds")?.type, "HISTOGRAM");
      const text = await (await fetch(`${server.url}/metrics`, { headers: server.operator.auth }))
        .text();
      assert.deepEqual(
        text.split("\n").filter((line) => line.startsWith("uexec_approval_wait_seconds_count")),
        decisions.map((d) => `uexec_approval_wait_seconds_count{${d.replace("=", '="')}"} 0`),
      );
      // Each owner (the default agent, the operator) with each profile the server has.
      const started = samples(first, "uexec_commands_started_total", "COUNTER");
      const live = samples(first, "uexec_sessions_live", "GAUGE");
      for (const agent of ["default", "operator"]) {
        for (
          const profile of ["read-only", "workspace-write", "workspace-write-net", "full-access"]
        ) {
          assert.equal(started.get(`agent=${agent},profile=${profile}`), 0, `${agent} ${profile}`);
          assert.equal(live.get(`agent=${agent},profile=${profile}`), 0, `${agent} ${profile}`);
        }
      }
      assert.deepEqual(new Set(started.values()), new Set([0]));
      assert.deepEqual([...started.keys()].sort(), [...live.keys()].sort());
    });

    await t.step("operator only", async () => {
      const agent = await server.get("/metrics");
      assert.equal(agent.status, 403);
      assert.equal(agent.body.error.code, "forbidden");
      const none = await server.raw("/metrics", { headers: { authorization: "" } });
      assert.equal(none.status, 401);
      const origin = await server.raw("/metrics", {
        headers: { authorization: `Bearer ${server.operatorToken}`, origin: "https://x.example" },
      });
      assert.equal(origin.status, 403);
    });

    await t.step("counters, histograms and gauges", async () => {
      const before = await scrape(server);
      const agent = { agent: "default", profile: "workspace-write" };
      for (const cmd of ["printf 12345", "printf abc; exit 4"]) {
        const r = await server.post("/v1/exec_command", { cmd, tty: false, login: false });
        assert.equal(r.status, 200);
      }
      const live = await server.post("/v1/exec_command", {
        cmd: "sleep 600",
        tty: false,
        yield_time_ms: 100,
      });
      const denied = await server.post("/v1/exec_command", {
        cmd: "echo x > /etc/uexec-metrics-test",
        tty: false,
        login: false,
      });
      assert.equal(denied.body.sandbox.denial.kind, "fs-write");
      const after = await scrape(server);
      const delta = (name: string, labels: Record<string, string> = {}) =>
        value(after, name, labels) - value(before, name, labels);
      assert.equal(delta("uexec_commands_started_total", agent), 4);
      assert.equal(delta("uexec_commands_ended_total", { reason: "exit" }), 3);
      assert.equal(delta("uexec_output_bytes_total"), 8 + denied.body.output.length);
      assert.equal(delta("uexec_denials_total", { kind: "fs-write" }), 1);
      const execs = (families: Map<string, Family>) =>
        observations(families, "uexec_exec_command_seconds");
      assert.equal(execs(after) - execs(before), 4);
      assert.equal(value(after, "uexec_sessions_live", agent), 1);
      assert.ok(value(after, "process_resident_memory_bytes") > 0);
      assert.ok(value(after, "uexec_spawner_workers", { state: "bound" }) >= 1);
      assert.equal(after.get("uexec_event_loop_lag_seconds")?.type, "GAUGE");
      assert.equal(after.get("uexec_approval_wait_seconds")?.type, "HISTOGRAM");
      await server.del(`/v1/sessions/${live.body.session_id}`);
      const killed = await scrape(server);
      assert.equal(value(killed, "uexec_sessions_live", agent), 0);
      assert.equal(
        value(killed, "uexec_commands_ended_total", { reason: "kill" }) -
          value(before, "uexec_commands_ended_total", { reason: "kill" }),
        1,
      );
    });

    await t.step("the log: one JSON line per request, no token, no output", async () => {
      const marker = `out-${crypto.randomUUID()}`;
      const half = marker.length / 2;
      const cmd = `printf '%s%s' '${marker.slice(0, half)}' '${marker.slice(half)}'`;
      const r = await server.post("/v1/exec_command", { cmd, tty: false });
      assert.equal(r.body.output, marker);
      const { stderr } = await server.stop();
      stopped = true;
      assert.ok(!stderr.includes(marker));
      assert.ok(!stderr.includes(server.agentToken) && !stderr.includes(server.operatorToken));
      const lines = stderr.trim().split("\n").map((l) => JSON.parse(l));
      const requests = lines.filter((l) => l.msg === "request");
      const forbidden = requests.find((l) => l.route === "/metrics" && l.status === 403);
      assert.equal(forbidden.agent, "default");
      const execs = requests.filter((l) => l.route === "/v1/exec_command");
      assert.equal(execs.length, 5);
      for (const line of execs) {
        assert.deepEqual(Object.keys(line).sort(), [
          "agent",
          "level",
          "method",
          "ms",
          "msg",
          "request_id",
          "route",
          "status",
          "time",
        ]);
        assert.equal(line.method, "POST");
        assert.equal(line.status, 200);
        assert.equal(typeof line.ms, "number");
      }
      const unauthenticated = requests.find((l) => l.status === 401);
      assert.equal(unauthenticated.agent, null);
      const ends = lines.filter((l) => l.msg === "session_end");
      assert.deepEqual(ends.map((l) => l.reason).sort(), ["exit", "exit", "exit", "exit", "kill"]);
    });
  } finally {
    if (!stopped) await server.stop();
  }
});

Deno.test("log: pretty lines are key=value text; off writes nothing", () => {
  const lines: string[] = [];
  new Logger("pretty", (line) => lines.push(line)).info("request", {
    agent: "default",
    status: 200,
    route: "/v1/history/:id",
    skipped: undefined,
  });
  assert.equal(lines.length, 1);
  assert.match(
    lines[0],
    /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO request agent="default" status=200 route="\/v1\/history\/:id"\n$/,
  );
  new Logger("off", (line) => lines.push(line)).warn("x", {});
  assert.equal(lines.length, 1);
});
