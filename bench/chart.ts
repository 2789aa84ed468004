/**
 * The bench's chart: one group of bars per goal row, as ratios on a logarithmic axis, written
 * as hand-made SVG (no browser, no library). Each group shows uexec, its same-run baseline (1x,
 * by definition) and the Codex peer divided by that same baseline, with the goal as a dashed
 * line and the verdict beside it. A row whose goal is an absolute figure without a baseline
 * (server CPU per round trip) is drawn against its goal instead: the goal is then the 1x.
 *
 * It only draws what the rows say; it must never measure, round a verdict, or read the clock.
 * @module
 */

import type { Row } from "./report.ts";

/** One group of the chart: the ratios drawn, what they are relative to, the goal and verdict. */
export interface Bar {
  label: string;
  /** What 1x is: the baseline's label, or "goal". */
  reference: string;
  uexec: number;
  peer?: number;
  goal: number;
  /** True when more is better (a `>=` goal). */
  higher: boolean;
  pass: boolean;
}

/** The axis spans these ratios; a bar beyond them is cut at the edge and marked. */
const MIN = 0.1;
const MAX = 30;
const WIDTH = 960;
const LEFT = 380;
const RIGHT = 70;
const TOP = 64;
const GROUP = 46;
const BAR = 11;
const COLORS = { uexec: "#2563eb", baseline: "#9ca3af", peer: "#f59e0b", goal: "#dc2626" };

/** The rows that can be drawn: a numeric goal, and a baseline or a goal figure to divide by. */
export function bars(rows: Row[]): Bar[] {
  const out: Bar[] = [];
  for (const r of rows) {
    const t = r.target;
    if (!t || typeof r.uexec !== "number" || (r.status !== "pass" && r.status !== "fail")) continue;
    const by = t.on === "ratio" ? r.baseline : r.baseline ?? t.value;
    if (by === null || !(by > 0)) continue;
    const goal = t.on === "ratio" ? t.value : t.value / by;
    const label = `${r.workload}${r.metric ? `, ${r.metric}` : ""}`;
    out.push({
      label,
      reference: r.baseline === null ? "goal" : r.baseline_label,
      uexec: r.uexec / by,
      ...(typeof r.peer === "number" ? { peer: r.peer / by } : {}),
      goal,
      higher: t.op === ">=",
      pass: r.status === "pass",
    });
  }
  return out;
}

function x(ratio: number): number {
  const clamped = Math.min(MAX, Math.max(MIN, ratio));
  const span = Math.log(MAX) - Math.log(MIN);
  return LEFT + ((Math.log(clamped) - Math.log(MIN)) / span) * (WIDTH - LEFT - RIGHT);
}

function escape(text: string): string {
  return text.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;")
    .replaceAll('"', "&quot;");
}

function ratioText(r: number): string {
  return `${r >= 10 ? r.toFixed(0) : r >= 1 ? r.toFixed(2) : r.toFixed(3)}x`;
}

function bar(y: number, ratio: number, color: string, name: string): string {
  const end = x(ratio);
  const cut = ratio > MAX ? " (cut)" : "";
  return `<rect x="${LEFT}" y="${y}" width="${Math.max(1, end - LEFT).toFixed(1)}" ` +
    `height="${BAR}" fill="${color}"><title>${escape(`${name}: ${ratioText(ratio)}${cut}`)}` +
    `</title></rect>` +
    `<text x="${(end + 3).toFixed(1)}" y="${y + BAR - 2}" font-size="9">${ratioText(ratio)}` +
    `${cut}</text>`;
}

/** The chart of `rows` as an SVG document; `caption` goes under the title. */
export function chartSvg(rows: Row[], caption: string): string {
  const groups = bars(rows);
  const height = TOP + groups.length * GROUP + 40;
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" ` +
    `viewBox="0 0 ${WIDTH} ${height}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="#ffffff"/>`,
    `<text x="12" y="20" font-size="15" font-weight="bold">uexec bench: ratios to the same-run ` +
    `baseline (log scale)</text>`,
    `<text x="12" y="37" fill="#4b5563">${escape(caption)}</text>`,
    legend(),
  ];
  for (const tick of [0.1, 0.2, 0.5, 1, 2, 5, 10, 20]) {
    const tx = x(tick).toFixed(1);
    parts.push(
      `<line x1="${tx}" y1="${TOP - 6}" x2="${tx}" y2="${height - 34}" stroke="#e5e7eb"/>`,
      `<text x="${tx}" y="${height - 20}" text-anchor="middle" fill="#4b5563">${tick}x</text>`,
    );
  }
  groups.forEach((g, i) => {
    const y = TOP + i * GROUP;
    parts.push(
      `<text x="${LEFT - 8}" y="${y + 14}" text-anchor="end">${escape(clip(g.label, 62))}</text>`,
      `<text x="${LEFT - 8}" y="${y + 27}" text-anchor="end" fill="#6b7280" font-size="9">` +
        escape(
          `1x = ${clip(g.reference, 40)}; goal ${g.higher ? ">=" : "<="} ${ratioText(g.goal)}`,
        ) + "</text>",
      bar(y, g.uexec, COLORS.uexec, "uexec"),
      bar(y + BAR + 1, 1, COLORS.baseline, g.reference),
    );
    if (g.peer !== undefined) parts.push(bar(y + 2 * (BAR + 1), g.peer, COLORS.peer, "codex"));
    const gx = x(g.goal).toFixed(1);
    parts.push(
      `<line x1="${gx}" y1="${y - 3}" x2="${gx}" y2="${y + 3 * (BAR + 1) + 2}" ` +
        `stroke="${COLORS.goal}" stroke-width="2" stroke-dasharray="4 2"/>`,
      `<text x="${WIDTH - 8}" y="${y + 14}" text-anchor="end" font-weight="bold" ` +
        `fill="${g.pass ? "#15803d" : COLORS.goal}">${g.pass ? "PASS" : "FAIL"}</text>`,
    );
  });
  parts.push("</svg>");
  return parts.join("\n") + "\n";
}

function clip(text: string, n: number): string {
  return text.length <= n ? text : `${text.slice(0, n - 1)}…`;
}

function legend(): string {
  const items: [string, string][] = [
    ["uexec", COLORS.uexec],
    ["baseline (1x)", COLORS.baseline],
    ["codex peer", COLORS.peer],
  ];
  const out = items.map(([name, color], i) =>
    `<rect x="${12 + i * 130}" y="46" width="12" height="10" fill="${color}"/>` +
    `<text x="${28 + i * 130}" y="55">${name}</text>`
  );
  out.push(
    `<line x1="402" y1="51" x2="420" y2="51" stroke="${COLORS.goal}" stroke-width="2" ` +
      `stroke-dasharray="4 2"/><text x="426" y="55">goal</text>`,
  );
  return out.join("\n");
}
