/**
 * The pending approvals view: each request as the approver must see it (the exact command with
 * control characters shown as escapes by the server, workdir, profile, agent, justification,
 * what approving grants, the denial evidence) and its decisions. Records arrive and leave by
 * lifecycle events. Each card counts down the seconds left before its timeout denies it (a display
 * timer, once a second while any approval is pending: the server's own timer decides, the page
 * only shows it; the server's clock is trusted as the page's, skew shows as an offset). Every
 * field is shown as text, never markup.
 *
 * @module
 */

import { api } from "./api.js";
import { el, fill } from "./dom.js";

/** The pending approvals. */
export class ApprovalsView {
  #pending = new Map();
  #decided = new Set();
  #onCount;
  #onError;
  /** The once-a-second countdown display timer, running while any approval is pending. */
  #ticker;

  constructor({ onCount, onError }) {
    this.#onCount = onCount;
    this.#onError = onError;
  }

  /** Load the pending approvals (after the event stream opened or reopened). */
  async load() {
    const known = [...this.#pending.keys()];
    const { approvals } = await api("GET", "/v1/approvals");
    const listed = new Set(approvals.map((a) => a.id));
    // Known before the list was asked for and not in it: decided while no event could tell.
    for (const id of known) if (!listed.has(id)) this.#pending.delete(id);
    for (const a of approvals) {
      if (a.status === "pending" && !this.#decided.has(a.id)) this.#pending.set(a.id, a);
    }
    this.render();
  }

  /** A lifecycle event. */
  event(type, data) {
    if (type === "approval_requested") {
      if (!this.#decided.has(data.approval.id)) this.#pending.set(data.approval.id, data.approval);
    } else if (type === "approval_decided") {
      this.#decided.add(data.approval.id);
      this.#pending.delete(data.approval.id);
    } else return;
    this.render();
  }

  render() {
    const cards = [...this.#pending.values()].map((a) => this.#card(a));
    fill(document.getElementById("approvals-list"), ...cards);
    document.getElementById("approvals-empty").hidden = cards.length > 0;
    this.#onCount(cards.length);
    this.#tick();
    if (cards.length > 0 && this.#ticker === undefined) {
      this.#ticker = setInterval(() => this.#tick(), 1000);
    } else if (cards.length === 0 && this.#ticker !== undefined) {
      clearInterval(this.#ticker);
      this.#ticker = undefined;
    }
  }

  /** Show each card's seconds left. */
  #tick() {
    const now = Date.now();
    for (const node of document.querySelectorAll("#approvals-list .countdown")) {
      const left = Math.max(0, Math.ceil((Date.parse(node.dataset.expires) - now) / 1000));
      node.dataset.seconds = String(left);
      fill(node, left > 0 ? `denied in ${left} s unless decided` : "timing out…");
      node.classList.toggle("soon", left <= 10);
    }
  }

  #card(a) {
    const field = (name, value) =>
      value === null || value === undefined || value === ""
        ? null
        : el("div", { className: "field" }, el("dt", {}, name), el("dd", {}, value));
    const denial = a.denial
      ? el(
        "div",
        { className: "denial" },
        el("dt", {}, "denial"),
        el(
          "dd",
          {},
          [a.denial.kind, a.denial.path, a.denial.port].filter((x) => x !== undefined).join(" "),
          el("pre", { className: "evidence" }, a.denial.evidence ?? ""),
        ),
      )
      : null;
    const decide = (decision, extra = {}) => async (event) => {
      for (const b of event.target.parentElement.querySelectorAll("button")) b.disabled = true;
      try {
        await api("POST", `/v1/approvals/${encodeURIComponent(a.id)}`, { decision, ...extra });
        this.#decided.add(a.id);
        this.#pending.delete(a.id);
        this.render();
      } catch (err) {
        this.#onError(`deciding ${a.id}: ${err.message}`);
        for (const b of event.target.parentElement.querySelectorAll("button")) b.disabled = false;
      }
    };
    return el(
      "article",
      { className: "approval", dataset: { approval: a.id } },
      el("p", { className: "countdown", dataset: { expires: a.expires_at } }),
      el("pre", { className: "command" }, a.command),
      el(
        "dl",
        {},
        field("agent", a.agent),
        field("workdir", a.workdir),
        field("profile", a.profile),
        field("runs", a.runs),
        field("justification", a.justification),
        field("reason", a.reason === a.justification ? null : a.reason),
        field("shell", `${a.shell}${a.login ? " (login)" : ""}${a.tty ? ", tty" : ""}`),
        field("env", Object.keys(a.env ?? {}).length ? JSON.stringify(a.env) : null),
        denial,
        field("asked", a.created_at),
      ),
      el(
        "div",
        { className: "actions" },
        el(
          "button",
          { type: "button", className: "approve", onclick: decide("approved") },
          "Approve",
        ),
        el(
          "button",
          { type: "button", className: "approve-session", onclick: decide("approved_for_session") },
          "Approve for session",
        ),
        a.can_choose_unsandboxed
          ? el(
            "button",
            {
              type: "button",
              className: "approve-unsandboxed",
              onclick: decide("approved", { unsandboxed: true }),
            },
            "Approve unsandboxed",
          )
          : null,
        el("button", { type: "button", className: "deny", onclick: decide("denied") }, "Deny"),
      ),
    );
  }
}
