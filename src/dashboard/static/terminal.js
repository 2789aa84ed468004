/**
 * One session's live terminal: the session's output stream (`/v1/sessions/{id}/stream`, base64
 * so every byte arrives as sent) written into an xterm.js terminal, read-only until the operator
 * chooses to type; then keystrokes go to `POST /v1/write_stdin`, in order (those typed while a
 * write is in flight go together in the next). Output reaches the terminal only through
 * `Terminal.write`, never the DOM.
 *
 * @module
 */

import { api, openEventStream } from "./api.js";

// xterm.js exists only where the server serves it (from the npm package), not next to this file,
// so it is imported by URL at run time.
const { Terminal } = await import(new URL("xterm.mjs", import.meta.url).href);

/** The bytes of a base64 string. */
function decode(base64) {
  const binary = atob(base64);
  const out = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
  return out;
}

/** A terminal attached to one session, shown in `container`. */
export class SessionTerminal {
  #term;
  #stream;
  #typing = false;
  #unsent = "";
  #writing;
  #onError;

  /** Attach to session `id`; `onError(message)` reports failed writes. */
  constructor(container, id, onError) {
    this.id = id;
    this.#onError = onError;
    this.#term = new Terminal({
      disableStdin: true,
      cursorBlink: false,
      cols: 120,
      rows: 24,
      scrollback: 5000,
      fontSize: 13,
    });
    this.#term.open(container);
    this.#term.onData((chars) => this.#send(chars));
    this.#stream = openEventStream(`/v1/sessions/${id}/stream?encoding=base64`);
    this.#stream.addEventListener("output", (e) => {
      this.#term.write(decode(JSON.parse(e.data).base64));
    });
    this.#stream.addEventListener("exit", (e) => {
      const { exit_code: code } = JSON.parse(e.data);
      this.#term.write(`\r\n\x1b[2m[session ${id} exited with ${code}]\x1b[0m\r\n`);
      this.#stream.close();
    });
  }

  /** Whether keystrokes go to the session. */
  get typing() {
    return this.#typing;
  }

  /** Let the operator type into the session (or stop). */
  setTyping(on) {
    this.#typing = on;
    this.#term.options.disableStdin = !on;
    if (on) this.#term.focus();
  }

  /** Queue keystrokes; while one write is in flight, the next ones gather into one. */
  #send(chars) {
    if (!this.#typing) return;
    this.#unsent += chars;
    if (!this.#writing) this.#writing = this.#flush().finally(() => this.#writing = undefined);
  }

  async #flush() {
    while (this.#unsent) {
      const chars = this.#unsent;
      this.#unsent = "";
      try {
        await api("POST", "/v1/write_stdin", { session_id: this.id, chars, yield_time_ms: 250 });
      } catch (err) {
        this.#onError(err.message);
      }
    }
  }

  /** Stop streaming and remove the terminal. */
  dispose() {
    this.#stream.close();
    this.#term.dispose();
  }
}
