/**
 * The live sessions view: one row per session (agent, command, profile, workdir, age, and CPU
 * and memory where the server can read them), kept current by lifecycle events, each row opening
 * the session's live terminal. Usage is read again on each event and on "Refresh", never on a
 * timer. Every field is shown as text.
 *
 * @module
 */

import { api } from "./api.js";
import { bytes, duration, el, fill, visible } from "./dom.js";
import { SessionTerminal } from "./terminal.js";

/** The sessions table and its terminal panel. */
export class SessionsView {
  #sessions = new Map();
  #ended = new Map();
  #usage = new Map();
  /** The usage request in flight, and whether another is wanted after it. */
  #reading;
  #readAgain = false;
  #terminal;
  #onCount;
  #onError;

  constructor({ onCount, onError }) {
    this.#onCount = onCount;
    this.#onError = onError;
    document.getElementById("usage-refresh").addEventListener(
      "click",
      () => this.refreshUsage().catch((err) => this.#onError(err.message)),
    );
    document.getElementById("terminal-close").addEventListener("click", () => this.closeTerminal());
    document.getElementById("terminal-type").addEventListener("click", () => {
      if (!this.#terminal) return;
      this.#terminal.setTyping(!this.#terminal.typing);
      this.#renderTypeButton();
    });
  }

  /** Load the current sessions (after the event stream opened or reopened). */
  async load() {
    const known = [...this.#sessions.keys()];
    const { sessions } = await api("GET", "/v1/sessions");
    const listed = new Set(sessions.map((info) => info.session_id));
    // Known before the list was asked for and not in it: ended while no event could tell.
    for (const id of known) if (!listed.has(id)) this.#sessions.delete(id);
    for (const info of sessions) {
      if (!this.#ended.has(info.session_id)) this.#sessions.set(info.session_id, info);
    }
    this.render();
    await this.refreshUsage();
  }

  /** Read every session's CPU and memory now (one request at a time; bursts coalesce). */
  refreshUsage() {
    if (this.#reading) {
      this.#readAgain = true;
      return this.#reading;
    }
    this.#reading = (async () => {
      do {
        this.#readAgain = false;
        const { usage } = await api("GET", "/v1/usage");
        this.#usage = new Map(usage.map((u) => [u.session_id, u]));
        fill(document.getElementById("usage-time"), new Date().toLocaleTimeString());
        this.render();
      } while (this.#readAgain);
    })().finally(() => this.#reading = undefined);
    return this.#reading;
  }

  /** A lifecycle event. */
  async event(type, data) {
    if (type === "begin") {
      this.#sessions.set(data.session_id, { ...data, started_at: new Date().toISOString() });
      this.render();
      try {
        const info = await api("GET", `/v1/sessions/${data.session_id}`);
        if (this.#sessions.has(info.session_id)) this.#sessions.set(info.session_id, info);
      } catch {
        // Gone already: its end event removes it.
      }
      this.render();
      await this.refreshUsage().catch(() => {});
    } else if (type === "end") {
      this.#sessions.delete(data.session_id);
      this.#ended.set(data.session_id, data);
      this.#usage.delete(data.session_id);
      this.render();
      await this.refreshUsage().catch(() => {});
    }
  }

  render() {
    const body = document.querySelector("#sessions-table tbody");
    const now = Date.now();
    const rows = [...this.#sessions.values()].sort((a, b) => a.session_id - b.session_id).map(
      (s) => {
        const usage = this.#usage.get(s.session_id);
        return el(
          "tr",
          { dataset: { session: String(s.session_id) } },
          el("td", {}, String(s.session_id)),
          el("td", {}, s.agent),
          el("td", { className: "command" }, el("code", {}, visible(s.command))),
          el("td", {}, s.profile ?? ""),
          el("td", { className: "path" }, visible(s.workdir)),
          el("td", {}, duration((now - Date.parse(s.started_at)) / 1000)),
          el("td", { className: "cpu" }, usage ? duration(usage.cpu_seconds) : ""),
          el("td", { className: "memory" }, usage ? bytes(usage.rss_bytes) : ""),
          el(
            "td",
            {},
            el("button", {
              type: "button",
              className: "open-terminal",
              onclick: () => this.openTerminal(s),
            }, "Terminal"),
          ),
        );
      },
    );
    fill(body, ...rows);
    document.getElementById("sessions-empty").hidden = rows.length > 0;
    this.#onCount(rows.length);
  }

  /** Show session `info`'s live terminal (read-only until "Type"). */
  openTerminal(info) {
    this.closeTerminal();
    const panel = document.getElementById("terminal-panel");
    panel.hidden = false;
    fill(
      document.getElementById("terminal-title"),
      `session ${info.session_id} · ${visible(info.agent)} · `,
      el("code", {}, visible(info.command)),
    );
    const container = document.getElementById("terminal");
    container.replaceChildren();
    this.#terminal = new SessionTerminal(container, info.session_id, this.#onError);
    this.#renderTypeButton();
  }

  closeTerminal() {
    this.#terminal?.dispose();
    this.#terminal = undefined;
    document.getElementById("terminal-panel").hidden = true;
  }

  #renderTypeButton() {
    const typing = this.#terminal?.typing ?? false;
    const button = document.getElementById("terminal-type");
    button.textContent = typing ? "Stop typing" : "Type";
    button.classList.toggle("active", typing);
    document.getElementById("terminal-panel").classList.toggle("typing", typing);
  }
}
