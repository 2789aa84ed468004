/**
 * `GET /metrics` and the log lines end to end: a real server scraped before and after real
 * commands, the exposition parsed with a Prometheus text-format parser (no string matching),
 * and its stderr read back as JSON lines.
 *
 * @module
 */

import assert from "node:assert/strict";
import parsePrometheus from "parse-prometheus-text-format";
import { Logger } from "../src/log.ts";
import { startServer, type TestServer } from "./helpers/server.ts";

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

/** The number of observations of the unlabelled histogram `name`. */
function observations(families: Map<string, Family>, name: string): number {
  const family = families.get(name);
  assert.equal(family?.type, "HISTOGRAM", name);
  return Number(family.metrics[0]?.count ?? 0);
}

Deno.test("metrics: counters move when commands run; operator only", async (t) => {
  const server = await startServer();
  let stopped = false;
  try {
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
      assert.ok(value(after, "uexec_process_resident_memory_bytes") > 0);
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
