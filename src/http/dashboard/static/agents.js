/**
 * The agents view: every agent and its limits, minting a new agent (its token shown this once,
 * as text) and revoking one (two clicks: "Revoke", then "Confirm"). Every field is text.
 *
 * @module
 */

import { api } from "./api.js";
import { el, fill, labelCells } from "./dom.js";

/** The agents table and the mint form. */
export class AgentsView {
  #onError;

  constructor({ onError }) {
    this.#onError = onError;
    document.getElementById("agent-form").addEventListener("submit", (e) => {
      e.preventDefault();
      this.#mint(e.target);
    });
  }

  async load() {
    const { agents } = await api("GET", "/v1/agents");
    const rows = agents.map((a) =>
      el(
        "tr",
        { dataset: { agent: a.name } },
        el("td", {}, a.name),
        el("td", {}, a.max_profile ?? "(no cap)"),
        el("td", {}, a.max_sessions === null ? "(default)" : String(a.max_sessions)),
        el("td", {}, a.created_at),
        el("td", {}, this.#revokeButton(a.name)),
      )
    );
    fill(document.querySelector("#agents-table tbody"), ...rows);
    labelCells(document.getElementById("agents-table"));
  }

  #revokeButton(name) {
    const button = el("button", { type: "button", className: "revoke" }, "Revoke");
    button.addEventListener("click", async () => {
      if (!button.classList.contains("confirm")) {
        button.classList.add("confirm");
        button.textContent = `Confirm: revoke ${name} and kill its sessions`;
        return;
      }
      button.disabled = true;
      try {
        await api("DELETE", `/v1/agents/${encodeURIComponent(name)}`);
      } catch (err) {
        this.#onError(`revoking ${name}: ${err.message}`);
      }
      await this.load();
    });
    return button;
  }

  async #mint(form) {
    const data = new FormData(form);
    const body = { name: String(data.get("name")).trim() };
    const profile = String(data.get("max_profile") ?? "").trim();
    if (profile) body.max_profile = profile;
    const sessions = String(data.get("max_sessions") ?? "").trim();
    if (sessions) body.max_sessions = Number(sessions);
    try {
      const minted = await api("POST", "/v1/agents", body);
      fill(document.getElementById("agent-minted-name"), minted.name);
      fill(document.getElementById("agent-minted-token"), minted.token);
      document.getElementById("agent-minted").hidden = false;
      form.reset();
    } catch (err) {
      this.#onError(`minting ${body.name}: ${err.message}`);
    }
    await this.load();
  }
}
