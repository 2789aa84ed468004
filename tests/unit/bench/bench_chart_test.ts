import assert from "node:assert/strict";
import { bars, chartSvg } from "../../../bench/chart.ts";
import { noFigure, row } from "../../../bench/report.ts";

const ROWS = [
  row({
    workload: "exec echo hi",
    metric: "p50",
    unit: "ms",
    uexec: 2,
    baseline: { value: 1.6, label: "sh -c true" },
    peer: 3.2,
    goal: { op: "<=", value: 1.3, on: "ratio", text: "<= 1.3x raw spawn" },
  }),
  row({
    workload: "cats, Node http",
    metric: "server CPU per round trip",
    unit: "ms",
    uexec: 0.1,
    goal: { op: "<=", value: 0.08, text: "<= 0.08 ms" },
  }),
  row({
    workload: "PTY throughput",
    metric: "MB/s",
    unit: "MB/s",
    uexec: 100,
    baseline: { value: 80, label: "script" },
    peer: "skipped",
    goal: { op: ">=", value: 1, on: "ratio", text: ">= 1.0x script" },
  }),
  row({ workload: "info only", metric: "p99", unit: "ms", uexec: 5 }),
  row({
    workload: "HTTP keep-alive",
    metric: "connections closed",
    unit: "",
    uexec: true,
    goal: { op: "==", value: true, text: "yes" },
  }),
  noFigure("broken", "error", "it failed"),
];

Deno.test("bench chart: each goal row becomes ratios to its baseline, or to its goal", () => {
  assert.deepEqual(bars(ROWS), [
    {
      label: "exec echo hi, p50",
      reference: "sh -c true",
      uexec: 1.25,
      peer: 2,
      goal: 1.3,
      higher: false,
      pass: true,
    },
    {
      label: "cats, Node http, server CPU per round trip",
      reference: "goal",
      uexec: 0.1 / 0.08,
      goal: 1,
      higher: false,
      pass: false,
    },
    {
      label: "PTY throughput, MB/s",
      reference: "script",
      uexec: 1.25,
      goal: 1,
      higher: true,
      pass: true,
    },
  ]);
});

Deno.test("bench chart: the SVG has a group, a goal line and a verdict per goal row", () => {
  const svg = chartSvg(ROWS, "caption <with> & marks");
  assert(svg.startsWith('<svg xmlns="http://www.w3.org/2000/svg"'));
  assert(svg.trimEnd().endsWith("</svg>"));
  assert.doesNotMatch(svg, /<(?![a-zA-Z/])|&(?!(?:amp|lt|gt|quot);)/, "markup characters escaped");
  assert(svg.includes("1x = sh -c true; goal &lt;= 1.30x"));
  assert(svg.includes("caption &lt;with&gt; &amp; marks"));
  assert.deepEqual(svg.match(/stroke-dasharray="4 2"/g)?.length, 3 + 1); // three goals, the legend
  assert.deepEqual(svg.match(/>PASS</g)?.length, 2);
  assert.deepEqual(svg.match(/>FAIL</g)?.length, 1);
  assert(svg.includes("<title>uexec: 1.25x</title>"));
  assert(svg.includes("<title>codex: 2.00x</title>"));
  assert(!svg.includes("info only"));
});

Deno.test("bench rows: a goal on a ratio is judged against the baseline, and skipped without one", () => {
  const goal = { op: "<=" as const, value: 1.1, on: "ratio" as const, text: "<= 1.1x codex" };
  const spec = { workload: "w", metric: "p50", unit: "ms", uexec: 1, goal };
  assert.equal(row({ ...spec, baseline: { value: 1, label: "codex" } }).status, "pass");
  assert.equal(row({ ...spec, baseline: { value: 0.5, label: "codex" } }).status, "fail");
  assert.equal(row(spec).status, "skipped");
});
