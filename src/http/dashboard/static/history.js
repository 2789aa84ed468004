/**
 * The history view: finished sessions from `GET /v1/history`, filtered by agent, exit status,
 * denial and text, page by page through its cursor, and one entry's output tail on click. A
 * filter box narrows the rows shown by agent, command and profile (as on the sessions view). On a
 * server without history (404) it says so instead of failing. Every field is shown as text.
 *
 * @module
 */

import { api, ApiError } from "./api.js";
import { duration, el, fill, labelCells, matches, visible } from "./dom.js";

const PAGE = 50;

/** The history table and its filters. */
export class HistoryView {
  #cursor = null;
  #filters = new URLSearchParams();
  /** The latest request; an older one's late reply is dropped. */
  #latest = 0;
  /** What the filter box matches in each row. */
  #fields = new WeakMap();
  #filter;

  constructor() {
    this.#filter = document.getElementById("history-filter");
    this.#filter.addEventListener("input", () => this.#narrow());
    document.getElementById("history-filters").addEventListener("submit", (e) => {
      e.preventDefault();
      this.search();
    });
    document.getElementById("history-more").addEventListener("click", () => this.#page(true));
  }

  /** Search with the form's filters from the newest entry on. */
  search() {
    const form = new FormData(document.getElementById("history-filters"));
    const params = new URLSearchParams();
    for (const name of ["agent", "q"]) {
      const value = String(form.get(name) ?? "").trim();
      if (value) params.set(name, value);
    }
    const status = form.get("denied") ? "denied" : String(form.get("status") ?? "");
    if (status) params.set("status", status);
    params.set("limit", String(PAGE));
    this.#filters = params;
    this.#cursor = null;
    return this.#page(false);
  }

  async #page(more) {
    const params = new URLSearchParams(this.#filters);
    if (more && this.#cursor) params.set("cursor", this.#cursor);
    const body = document.querySelector("#history-table tbody");
    const message = document.getElementById("history-message");
    const request = ++this.#latest;
    let reply;
    try {
      reply = await api("GET", `/v1/history?${params}`);
    } catch (err) {
      if (request !== this.#latest) return;
      const text = err instanceof ApiError && err.status === 404 && err.code === "not_found"
        ? "History is not available on this server (GET /v1/history answered 404)."
        : `History: ${err.message}`;
      fill(message, text);
      message.hidden = false;
      fill(body);
      document.getElementById("history-more").hidden = true;
      return;
    }
    if (request !== this.#latest) return;
    const rows = reply.items.map((item) => this.#row(item));
    if (more) body.append(...rows);
    else fill(body, ...rows);
    labelCells(document.getElementById("history-table"));
    this.#narrow();
    this.#cursor = reply.next_cursor ?? null;
    // Which search the table shows (for tests and for anyone reading the DOM).
    document.getElementById("history-table").dataset.query = String(this.#filters);
    document.getElementById("history-more").hidden = !this.#cursor;
  }

  /** Show the rows the filter box matches (or say none does). */
  #narrow() {
    const message = document.getElementById("history-message");
    let shown = 0;
    for (const tr of document.querySelectorAll("#history-table tbody tr")) {
      tr.hidden = !matches(this.#filter.value, this.#fields.get(tr));
      if (!tr.hidden) shown++;
    }
    fill(message, "No matching sessions.");
    message.hidden = shown > 0;
  }

  #row(item) {
    const denial = item.denial
      ? [item.denial.kind, item.denial.path, item.denial.port].filter((x) => x !== undefined)
        .join(" ")
      : "";
    const tr = el(
      "tr",
      { dataset: { history: String(item.id), status: String(item.status ?? "") } },
      el("td", {}, String(item.id)),
      el("td", {}, item.agent),
      el(
        "td",
        { className: "command" },
        el(
          "button",
          { type: "button", className: "link", onclick: () => this.#detail(item.id) },
          visible(item.command),
        ),
      ),
      el("td", {}, item.profile ?? ""),
      el("td", { className: "path" }, visible(item.workdir ?? "")),
      el("td", {}, item.started_at ?? ""),
      el("td", {}, duration(item.duration_seconds)),
      el("td", { className: "state" }, item.status ?? ""),
      el(
        "td",
        {},
        item.exit_code === null || item.exit_code === undefined ? "" : String(item.exit_code),
      ),
      el("td", {}, item.end_reason ?? ""),
      el("td", {}, denial),
    );
    this.#fields.set(tr, { agent: item.agent, command: item.command, profile: item.profile });
    return tr;
  }

  async #detail(id) {
    const detail = document.getElementById("history-detail");
    try {
      const entry = await api("GET", `/v1/history/${encodeURIComponent(id)}`);
      fill(detail, entry.output_tail ?? "(no output kept)");
    } catch (err) {
      fill(detail, `History entry ${id}: ${err.message}`);
    }
    detail.hidden = false;
  }
}
