/**
 * A wake-up signal: waiters get a promise that resolves on the next `fire()`. Firing with no
 * waiter costs nothing, so it can be fired on every output chunk. It never uses a timer.
 *
 * @module
 */

/** A resettable wake-up signal. */
export class Pulse {
  #resolve?: () => void;
  #promise?: Promise<void>;

  /** A promise that resolves on the next `fire()`. */
  wait(): Promise<void> {
    if (!this.#promise) {
      const { promise, resolve } = Promise.withResolvers<void>();
      this.#promise = promise;
      this.#resolve = resolve;
    }
    return this.#promise;
  }

  /** Wake every current waiter. */
  fire(): void {
    const resolve = this.#resolve;
    this.#promise = this.#resolve = undefined;
    resolve?.();
  }
}
