/**
 * Progress of one waiting tool call, for an MCP client that gave a progress token: each time
 * output arrives, the client is told how many bytes this call has seen so far. Notifications
 * are driven by output alone (nothing is sent while nothing arrives) and spaced at least
 * `intervalMs` apart: a burst gives one now and one when the interval ends. It must never send
 * after {@link ProgressReporter.stop}, and never fail the call because a notification could not
 * be delivered.
 *
 * @module
 */

/** Sends one progress notification (`progress` must grow from one to the next). */
export type SendProgress = (progress: number, message: string) => Promise<void>;

const DEFAULT_INTERVAL_MS = 250;

/** Turns a call's output into throttled progress notifications. */
export class ProgressReporter {
  #send: SendProgress;
  #intervalMs: number;
  #bytes = 0;
  #sentBytes = 0;
  #lastSent = -Infinity;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #stopped = false;

  constructor(send: SendProgress, intervalMs = DEFAULT_INTERVAL_MS) {
    this.#send = send;
    this.#intervalMs = intervalMs;
  }

  /** Output arrived (an `OutputWatcher`). */
  readonly output = (bytes: Uint8Array): void => {
    this.#bytes += bytes.length;
    if (this.#stopped || this.#timer !== undefined) return;
    const wait = this.#lastSent + this.#intervalMs - performance.now();
    if (wait <= 0) this.#flush();
    else this.#timer = setTimeout(() => this.#flush(), wait);
  };

  /** The call is over: send nothing more. */
  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #flush(): void {
    this.#timer = undefined;
    if (this.#stopped || this.#bytes === this.#sentBytes) return;
    this.#sentBytes = this.#bytes;
    this.#lastSent = performance.now();
    // A client that has gone away cannot be told; the call itself still completes.
    this.#send(this.#bytes, `${this.#bytes} bytes of output so far`).catch(() => {});
  }
}
