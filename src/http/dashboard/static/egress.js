/**
 * The egress audit on the dashboard: every connection the egress proxy reports (an `egress`
 * event on `/v1/events`: host, port, address, method, decision and rule, bytes each way,
 * duration), kept per session while the page is open, counted in the session's row and listed
 * in the open session's panel. Hosts, rules and addresses are hostile (a command chose the
 * name): they are shown as text only, through dom.js, never as HTML. It keeps a bounded number
 * of connections and sessions, never everything a flood sends.
 *
 * @module
 */

import { bytes, el, fill, labelCells, visible } from "./dom.js";

/** Connections kept per session (the newest), and sessions kept (the last heard from). */
const PER_SESSION = 256;
const SESSIONS = 64;

/** The connections each session made since the page opened. */
export class EgressLog {
  /** session id → {records, total, denied}; in the order last heard from. */
  #sessions = new Map();

  /** An `egress` event; returns its session id, or undefined for one no session owned. */
  add(event) {
    const id = event.session_id;
    if (typeof id !== "number") return undefined;
    const entry = this.#sessions.get(id) ?? { records: [], total: 0, denied: 0 };
    this.#sessions.delete(id);
    this.#sessions.set(id, entry);
    if (this.#sessions.size > SESSIONS) this.#sessions.delete(this.#sessions.keys().next().value);
    entry.total++;
    if (event.decision === "denied") entry.denied++;
    entry.records.push(event);
    if (entry.records.length > PER_SESSION) entry.records.shift();
    return id;
  }

  /** Session `id`'s connections (the newest {@link PER_SESSION}), and how many in all. */
  of(id) {
    return this.#sessions.get(id) ?? { records: [], total: 0, denied: 0 };
  }
}

/** The badge of a session's row: `egress 3 · 1 denied`, or nothing before a connection. */
export function egressBadge({ total, denied }) {
  if (total === 0) return null;
  return el(
    "span",
    { className: denied > 0 ? "egress-badge denied" : "egress-badge" },
    `egress ${total}` + (denied > 0 ? ` · ${denied} denied` : ""),
  );
}

/** The decision as shown: `allowed (allow:*.example.org)`, `denied (not-allowed)`. */
function decision(record) {
  return `${record.decision} (${visible(record.rule)})`;
}

/** Show a session's connections (from {@link EgressLog.of}) in `section` (its table's body, its count); hidden when none. */
export function renderEgress(section, { records, total }) {
  section.hidden = total === 0;
  const count = section.querySelector(".egress-count");
  fill(
    count,
    total > records.length ? `${total} connections, the last ${records.length} shown` : `${total}`,
  );
  const rows = records.map((r) =>
    el(
      "tr",
      { className: `egress-${r.decision}` },
      el("td", {}, el("code", {}, `${visible(r.host)}:${r.port}`)),
      el("td", {}, visible(r.method)),
      el("td", { className: "decision" }, decision(r)),
      el("td", {}, visible(r.address ?? "")),
      el("td", {}, bytes(r.bytes_up)),
      el("td", {}, bytes(r.bytes_down)),
      el("td", {}, `${Math.round(r.duration_ms)} ms`),
    )
  );
  const table = section.querySelector("table");
  table.querySelector("tbody").replaceChildren(...rows);
  labelCells(table);
}
