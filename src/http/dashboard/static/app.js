/**
 * The dashboard page: signs in with the link's one-time code (`#code=…`, taken out of the
 * address bar at once) or the browser session this tab already holds, opens the lifecycle event
 * stream (`/v1/events`, which drives every live update: no polling), then loads each view and
 * switches between them. It holds no token: api.js keeps the browser session id and sends it.
 *
 * @module
 */

import { api, ApiError, hasSession, openEventStream, signIn, signOut } from "./api.js";
import { AgentsView } from "./agents.js";
import { ApprovalsView } from "./approvals.js";
import { fill } from "./dom.js";
import { HistoryView } from "./history.js";
import { SessionsView } from "./sessions.js";
import { initTheme } from "./theme.js";

const notice = document.getElementById("notice");
const status = document.getElementById("status");

function showNotice(message) {
  fill(notice, message);
  notice.hidden = false;
}

function count(id) {
  return (n) => fill(document.getElementById(id), n > 0 ? String(n) : "");
}

function show(view) {
  for (const tab of document.querySelectorAll(".tab")) {
    tab.classList.toggle("selected", tab.dataset.view === view);
  }
  for (const section of document.querySelectorAll(".view")) {
    section.hidden = section.id !== `view-${view}`;
  }
}

/**
 * Resolves once the stream is open, so lists loaded afterwards miss no event. When the stream
 * reconnects by itself (it broke), `reopened` reloads what may have been missed.
 */
function openEvents(handlers, reopened) {
  const events = openEventStream("/v1/events");
  const { promise, resolve } = Promise.withResolvers();
  let opened = false;
  events.addEventListener("open", () => {
    fill(status, "live");
    status.className = "status live";
    if (opened) reopened();
    opened = true;
    resolve();
  });
  events.addEventListener("error", () => {
    fill(status, events.readyState === events.CLOSED ? "disconnected" : "reconnecting…");
    status.className = "status down";
  });
  for (const type of ["begin", "end", "approval_requested", "approval_decided", "egress"]) {
    events.addEventListener(type, (e) => {
      const data = JSON.parse(e.data);
      for (const handle of handlers) handle(type, data);
    });
  }
  return promise;
}

/** The code of a sign-in link (`#code=…`), removed from the address bar and history entry. */
function takeCode() {
  const match = /^#code=([^&]*)$/.exec(location.hash);
  if (!match) return undefined;
  history.replaceState(null, "", location.pathname + location.search);
  try {
    return decodeURIComponent(match[1]);
  } catch {
    return match[1];
  }
}

/** Show why the page is not signed in; nothing else runs. */
function signedOut(message) {
  showNotice(message);
  fill(status, "signed out");
  document.querySelector("main").classList.add("signed-out");
}

const HOW_TO_SIGN_IN = "Open the dashboard with the link the server prints at start-up " +
  "(uexec dashboard: http://…/#code=…), or a fresh one from POST /v1/dashboard/sign-in-links " +
  "with the operator's token. A link works once, for a few minutes.";

async function main() {
  initTheme(document.getElementById("theme"));
  const onError = (message) => showNotice(message);
  const code = takeCode();
  if (code !== undefined) {
    try {
      await signIn(code);
    } catch (err) {
      if (err instanceof ApiError && err.status < 500) return signedOut(err.message);
      return signedOut(`Signing in failed: ${err.message}`);
    }
  }
  if (!hasSession()) return signedOut(`Not signed in. ${HOW_TO_SIGN_IN}`);
  try {
    await api("GET", "/v1/agents");
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) {
      await signOut().catch(() => {});
      return signedOut(
        `This browser session has ended (signed out, expired or the server restarted). ${HOW_TO_SIGN_IN}`,
      );
    }
    showNotice(`The server refused the dashboard: ${err.message}`);
    return;
  }
  const sessions = new SessionsView({ onCount: count("count-sessions"), onError });
  const approvals = new ApprovalsView({ onCount: count("count-approvals"), onError });
  const history = new HistoryView();
  const agents = new AgentsView({ onError });
  for (const tab of document.querySelectorAll(".tab")) {
    tab.addEventListener("click", () => {
      show(tab.dataset.view);
      if (tab.dataset.view === "history") history.search();
    });
  }
  document.getElementById("sign-out").addEventListener("click", async () => {
    await signOut().catch(() => {});
    location.replace("/");
  });
  show("sessions");
  const load = () => Promise.all([sessions.load(), approvals.load(), agents.load()]);
  await openEvents(
    [(type, data) => sessions.event(type, data), (type, data) => approvals.event(type, data)],
    () => load().catch((err) => showNotice(`Reloading after a reconnect: ${err.message}`)),
  );
  await load();
  document.body.dataset.ready = "true";
}

main().catch((err) => showNotice(`Dashboard error: ${err.message}`));
