/**
 * One session's terminal: what the session still holds (`GET /v1/sessions/{id}/output`, base64
 * so every byte arrives as sent), then its live output stream (`/v1/sessions/{id}/stream`),
 * written into an xterm.js terminal with neither a gap nor a duplicate: every byte has an offset,
 * so bytes the stream repeats from the held output are skipped and lost ones are counted and
 * reported. It is read-only until the operator chooses to type; then keystrokes go to
 * `POST /v1/write_stdin`, in order (those typed while a write is in flight go together in the
 * next). Output reaches the terminal only through `Terminal.write`, never the DOM.
 *
 * @module
 */

import { api, openEventStream } from "./api.js";

// xterm.js exists only where the server serves it (from the npm package), not next to this file,
// so it is imported by URL at run time.
const { Terminal } = await import(new URL("xterm.mjs", import.meta.url).href);

/** The bytes of a base64 string. */
export function decode(base64) {
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
  #onDropped;
  /** The offset after the last byte written to the terminal; undefined until the replay. */
  #written;
  /** Stream events that arrived before the replay was written, in order. */
  #early = [];
  #dropped = 0;
  #disposed = false;

  /**
   * Attach to session `id`. `onError(message)` reports failed calls; `onDropped(bytes)` says how
   * many bytes of the session's output are not shown (older than what it holds, or skipped by a
   * stream that fell behind), each time that number grows.
   */
  constructor(container, id, { onError, onDropped }) {
    this.id = id;
    this.#onError = onError;
    this.#onDropped = onDropped;
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
    // The stream starts at the output's end when it opens; what it holds is read after that, so
    // the two overlap (the offsets trim it) and never leave a hole between them.
    this.#stream = openEventStream(`/v1/sessions/${id}/stream?encoding=base64`);
    // Only the first open replays: a reconnect resumes by itself from its Last-Event-ID.
    const opened = new Promise((resolve) => this.#stream.addEventListener("open", resolve));
    for (const type of ["output", "gap", "exit"]) {
      this.#stream.addEventListener(type, (e) => this.#streamed(type, e));
    }
    opened.then(() => this.#replay()).catch((err) => {
      // Without the held output the offsets have nowhere to start: stop rather than guess.
      this.#stream.close();
      this.#onError(`session ${id}: its output could not be read: ${err.message}`);
    });
  }

  /** Write what the session holds, then the stream events that came meanwhile. */
  async #replay() {
    const held = await api("GET", `/v1/sessions/${this.id}/output?encoding=base64`);
    if (this.#disposed) return;
    if (held.since > 0) this.#drop(held.since);
    this.#term.write(decode(held.base64));
    this.#written = held.end;
    for (const [type, e] of this.#early.splice(0)) this.#apply(type, e);
  }

  #streamed(type, e) {
    if (this.#written === undefined) this.#early.push([type, e]);
    else this.#apply(type, e);
  }

  #apply(type, e) {
    const data = JSON.parse(e.data);
    if (type === "output") {
      const bytes = decode(data.base64);
      const end = Number(e.lastEventId);
      const start = end - bytes.length;
      if (end <= this.#written) return;
      if (start > this.#written) this.#drop(start - this.#written);
      this.#term.write(bytes.subarray(Math.max(0, this.#written - start)));
      this.#written = end;
    } else if (type === "gap") {
      const resumes = Number(e.lastEventId);
      if (resumes > this.#written) this.#drop(resumes - this.#written);
      this.#written = Math.max(this.#written, resumes);
    } else if (type === "exit") {
      this.#term.write(`\r\n\x1b[2m[session ${this.id} exited with ${data.exit_code}]\x1b[0m\r\n`);
      this.#stream.close();
    }
  }

  #drop(bytes) {
    this.#dropped += bytes;
    this.#onDropped(this.#dropped);
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
    this.#disposed = true;
    this.#stream.close();
    this.#term.dispose();
  }
}
