/**
 * Result rows (one measured figure each, next to its same-run baseline, the Codex peer and its
 * goal), the pass/fail verdict, the printed table and the JSON file.
 * @module
 */

/** Verdict of a row: a goal met or missed, a figure without a goal, or no figure. */
export type Status = "pass" | "fail" | "info" | "skipped" | "error";

/** A goal on the uexec figure, or on its ratio to the baseline. */
export interface Goal {
  op: "<=" | "<" | ">=" | "==";
  value: number | boolean;
  on?: "ratio";
  text: string;
}

/** One line of the table. */
export interface Row {
  workload: string;
  metric: string;
  unit: string;
  uexec: number | boolean | null;
  baseline: number | null;
  baseline_label: string;
  /** uexec / baseline. */
  ratio: number | null;
  /** The Codex peer's figure, null when it has none for this metric, "skipped" without the peer. */
  peer: number | null | "skipped";
  goal: string;
  /** The goal as a figure, for the chart (absent without a numeric goal). */
  target?: { op: Goal["op"]; value: number; on?: "ratio" };
  status: Status;
  note?: string;
}

/** What a workload declares for a row; ratio and status are derived. */
export interface RowSpec {
  workload: string;
  metric: string;
  unit: string;
  uexec: number | boolean;
  baseline?: { value: number; label: string };
  peer?: number | null | "skipped";
  goal?: Goal;
  note?: string;
}

function meets(x: number | boolean, goal: Goal): boolean {
  const v = goal.value;
  switch (goal.op) {
    case "==":
      return x === v;
    case "<=":
      return x <= v;
    case "<":
      return x < v;
    case ">=":
      return x >= v;
  }
}

/** Builds a row, computing the ratio and whether the goal is met. */
export function row(spec: RowSpec): Row {
  const ratio = spec.baseline && typeof spec.uexec === "number" && spec.baseline.value > 0
    ? Math.round((spec.uexec / spec.baseline.value) * 100) / 100
    : null;
  let status: Status = "info";
  if (spec.goal) {
    const subject = spec.goal.on === "ratio" ? ratio : spec.uexec;
    // A goal against a baseline this run has not got (the Codex peer not set up) is not judged.
    status = subject === null ? "skipped" : meets(subject, spec.goal) ? "pass" : "fail";
  }
  return {
    workload: spec.workload,
    metric: spec.metric,
    unit: spec.unit,
    uexec: spec.uexec,
    baseline: spec.baseline?.value ?? null,
    baseline_label: spec.baseline?.label ?? "",
    ratio,
    peer: spec.peer ?? null,
    goal: spec.goal?.text ?? "",
    ...(spec.goal && typeof spec.goal.value === "number"
      ? { target: { op: spec.goal.op, value: spec.goal.value, on: spec.goal.on } }
      : {}),
    status,
    ...(spec.note ? { note: spec.note } : {}),
  };
}

/** A row for a workload that produced no figure (skipped or failed). */
export function noFigure(workload: string, status: "skipped" | "error", note: string): Row {
  return {
    workload,
    metric: "",
    unit: "",
    uexec: null,
    baseline: null,
    baseline_label: "",
    ratio: null,
    peer: null,
    goal: "",
    status,
    note,
  };
}

function fmt(x: number | boolean | null | "skipped", unit = ""): string {
  if (x === null) return "-";
  if (typeof x === "boolean") return x ? "yes" : "no";
  if (x === "skipped") return "skipped";
  const digits = Math.abs(x) >= 100 ? 0 : Math.abs(x) >= 10 ? 1 : Math.abs(x) >= 1 ? 2 : 3;
  const n = x.toLocaleString("en-US", { maximumFractionDigits: digits });
  return unit ? `${n} ${unit}` : n;
}

/** The table as text: one line per row, then the rows' notes. */
export function formatTable(rows: Row[]): string {
  const header = [
    "workload",
    "metric",
    "uexec",
    "baseline",
    "ratio",
    "peer (codex)",
    "goal",
    "result",
  ];
  const cells = rows.map((r) => [
    r.workload,
    r.metric,
    fmt(r.uexec, r.unit),
    r.baseline === null ? "-" : `${fmt(r.baseline, r.unit)} (${r.baseline_label})`,
    r.ratio === null ? "-" : `${fmt(r.ratio)}x`,
    fmt(r.peer, typeof r.peer === "number" ? r.unit : ""),
    r.goal || "-",
    r.status.toUpperCase(),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i].length)));
  const line = (c: string[]) => c.map((x, i) => x.padEnd(widths[i])).join(" | ").trimEnd();
  const out = [line(header), widths.map((w) => "-".repeat(w)).join("-|-"), ...cells.map(line)];
  const notes = rows.filter((r) => r.note);
  if (notes.length > 0) {
    out.push("", "notes:");
    for (const r of notes) {
      out.push(`- ${r.workload}${r.metric ? ` (${r.metric})` : ""}: ${r.note}`);
    }
  }
  return out.join("\n");
}

/** Writes `data` as JSON to `path` atomically (temporary file, then rename). */
export async function writeJson(path: string, data: unknown): Promise<void> {
  await writeText(path, JSON.stringify(data, null, 2) + "\n");
}

/** Writes `text` to `path` atomically (temporary file, then rename). */
export async function writeText(path: string, text: string): Promise<void> {
  const tmp = `${path}.tmp`;
  await Deno.writeTextFile(tmp, text);
  await Deno.rename(tmp, path);
}
