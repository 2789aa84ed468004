/**
 * The live sessions view: one row per session (agent, command, profile, workdir, age, and CPU
 * and memory where the server can read them), kept current by lifecycle events, narrowed by a
 * filter box, each row with its actions: open the session's terminal (what it holds, then live),
 * Ctrl-C (typed into the session, so its terminal interrupts the foreground process), download
 * what it holds, and kill (two clicks: "Kill", then "Confirm kill"; leaving the button disarms
 * it). Usage is read again on each event and on "Refresh", never on a timer. Rows are updated in
 * place, so focus and a pending confirmation survive updates. Every field is shown as text. Each
 * session's connections through the egress proxy (`egress` events, egress.js) are counted in its
 * row and listed, live, under its open terminal.
 */

import { api } from "./api.js";
import { bytes, download, duration, el, fill, labelCells, matches, visible } from "./dom.js";
import { egressBadge, EgressLog, renderEgress } from "./egress.js";
import { decode, SessionTerminal } from "./terminal.js";

/** Type Ctrl-C into session `id` (its terminal sends SIGINT to the foreground process group). */
export function interrupt(id) {
  return api("POST", "/v1/write_stdin", { session_id: id, chars: "\u0003", yield_time_ms: 250 });
}

/** Download what session `id` still holds, byte for byte. */
export async function downloadOutput(id) {
  const held = await api("GET", `/v1/sessions/${id}/output?encoding=base64`);
  download(decode(held.base64), `uexec-session-${id}.log`);
}

/** The sessions table and its terminal panel. */
export class SessionsView {
  #sessions = new Map();
  #ended = new Map();
  #usage = new Map();
  /** Each session's table row, made once and updated in place. */
  #rows = new Map();
  /** The usage request in flight, and whether another is wanted after it. */
  #reading;
  #readAgain = false;
  #terminal;
  #egress = new EgressLog();
  #filter;
  #onCount;
  #onError;

  constructor({ onCount, onError }) {
    this.#onCount = onCount;
    this.#onError = onError;
    this.#filter = document.getElementById("sessions-filter");
    this.#filter.addEventListener("input", () => this.render());
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
    document.getElementById("terminal-interrupt").addEventListener("click", () => {
      if (this.#terminal) this.#act("Ctrl-C", this.#terminal.id, interrupt);
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
    } else if (type === "egress") {
      const id = this.#egress.add(data);
      if (id === undefined) return;
      const row = this.#rows.get(id);
      if (row) fill(row.egress, egressBadge(this.#egress.of(id)));
      if (this.#terminal?.id === id) this.#renderEgress();
    }
  }

  render() {
    const body = document.querySelector("#sessions-table tbody");
    const now = Date.now();
    for (const id of [...this.#rows.keys()]) {
      if (!this.#sessions.has(id)) {
        this.#rows.get(id).tr.remove();
        this.#rows.delete(id);
      }
    }
    const sessions = [...this.#sessions.values()].sort((a, b) => a.session_id - b.session_id);
    let shown = 0;
    for (const s of sessions) {
      let row = this.#rows.get(s.session_id);
      if (!row) this.#rows.set(s.session_id, row = this.#row(s.session_id));
      const usage = this.#usage.get(s.session_id);
      fill(row.agent, s.agent);
      fill(row.command, el("code", {}, visible(s.command)));
      fill(row.profile, s.profile ?? "");
      fill(row.egress, egressBadge(this.#egress.of(s.session_id)));
      fill(row.workdir, visible(s.workdir));
      fill(row.age, duration((now - Date.parse(s.started_at)) / 1000));
      fill(row.cpu, usage ? duration(usage.cpu_seconds) : "");
      fill(row.memory, usage ? bytes(usage.rss_bytes) : "");
      const fields = { agent: s.agent, command: s.command, profile: s.profile };
      row.tr.hidden = !matches(this.#filter.value, fields);
      if (!row.tr.hidden) shown++;
      body.append(row.tr); // in id order; moving a row keeps its focus and state
    }
    labelCells(document.getElementById("sessions-table"));
    const empty = document.getElementById("sessions-empty");
    fill(empty, sessions.length === 0 ? "No live sessions." : "No session matches the filter.");
    empty.hidden = shown > 0;
    this.#onCount(sessions.length);
  }

  /** A session's row: its cells (filled by `render`) and its action buttons. */
  #row(id) {
    const row = {
      agent: el("td"),
      command: el("td", { className: "command" }),
      // The profile, and the session's egress count beside it.
      profile: el("span"),
      egress: el("span"),
      workdir: el("td", { className: "path" }),
      age: el("td"),
      cpu: el("td", { className: "cpu" }),
      memory: el("td", { className: "memory" }),
    };
    const button = (className, text, onclick) =>
      el("button", { type: "button", className, onclick }, text);
    const kill = button("kill", "Kill", () => {
      if (!kill.classList.contains("confirm")) {
        kill.classList.add("confirm");
        kill.textContent = "Confirm kill";
        return;
      }
      kill.disabled = true;
      // On success the session's end event removes the row; on failure the button comes back.
      this.#act("Kill", id, (id) => api("DELETE", `/v1/sessions/${id}`))
        .then(() => kill.disabled = false);
    });
    // Leaving the button (focus elsewhere, a click elsewhere) takes the armed kill back.
    kill.addEventListener("blur", () => {
      kill.classList.remove("confirm");
      kill.textContent = "Kill";
    });
    row.tr = el(
      "tr",
      { dataset: { session: String(id) } },
      el("td", {}, String(id)),
      row.agent,
      row.command,
      el("td", {}, row.profile, row.egress),
      row.workdir,
      row.age,
      row.cpu,
      row.memory,
      el(
        "td",
        { className: "row-actions" },
        button("open-terminal", "Terminal", () => this.openTerminal(this.#sessions.get(id))),
        button("interrupt", "Ctrl-C", () => this.#act("Ctrl-C", id, interrupt)),
        button("download", "Download", () => this.#act("Download", id, downloadOutput)),
        kill,
      ),
    );
    return row;
  }

  async #act(what, id, action) {
    try {
      await action(id);
    } catch (err) {
      this.#onError(`${what} on session ${id}: ${err.message}`);
    }
  }

  /** Show session `info`'s terminal: what it holds, then live (read-only until "Type"). */
  openTerminal(info) {
    this.closeTerminal();
    const panel = document.getElementById("terminal-panel");
    panel.hidden = false;
    fill(
      document.getElementById("terminal-title"),
      `session ${info.session_id} · ${visible(info.agent)} · `,
      el("code", {}, visible(info.command)),
    );
    const dropped = document.getElementById("terminal-dropped");
    dropped.hidden = true;
    const container = document.getElementById("terminal");
    container.replaceChildren();
    this.#terminal = new SessionTerminal(container, info.session_id, {
      onError: this.#onError,
      onDropped: (n) => {
        fill(
          dropped,
          `Older output not shown: ${n} bytes dropped (a session keeps its newest 1 MiB).`,
        );
        dropped.hidden = false;
      },
    });
    this.#renderTypeButton();
    this.#renderEgress();
  }

  /** The open session's egress connections, under its terminal. */
  #renderEgress() {
    const section = document.getElementById("terminal-egress");
    if (this.#terminal) renderEgress(section, this.#egress.of(this.#terminal.id));
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
