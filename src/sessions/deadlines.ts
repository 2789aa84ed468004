/**
 * Deadlines for many concurrent calls on one timer: a min-heap of due times with a single
 * `setTimeout` armed for the earliest. Setting and cancelling a deadline costs a heap push and
 * a flag, where a timer per call costs a runtime timer object each time. It never polls: the
 * one timer fires only when the earliest live deadline is due.
 *
 * @module
 */

interface Entry {
  due: number;
  fire: () => void;
  cancelled: boolean;
}

/** A pending deadline. */
export interface Deadline {
  /** Resolves when the deadline passes (never, once cancelled). */
  readonly reached: Promise<void>;
  /** True once it passed. */
  readonly expired: boolean;
  /** Forget it; the promise then never resolves. */
  cancel(): void;
}

/** A deadline scheduler. */
export class Deadlines {
  #heap: Entry[] = [];
  #timer?: ReturnType<typeof setTimeout>;
  #armedFor = Infinity;

  /** A deadline `ms` milliseconds from now. */
  after(ms: number): Deadline {
    const { promise, resolve } = Promise.withResolvers<void>();
    let expired = false;
    const entry: Entry = {
      due: performance.now() + ms,
      fire: () => {
        expired = true;
        resolve();
      },
      cancelled: false,
    };
    this.#push(entry);
    if (entry.due < this.#armedFor) this.#arm();
    return {
      reached: promise,
      get expired() {
        return expired;
      },
      cancel: () => entry.cancelled = true,
    };
  }

  #arm(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#armedFor = Infinity;
    while (this.#heap.length > 0 && this.#heap[0].cancelled) this.#pop();
    if (this.#heap.length === 0) return;
    const due = this.#heap[0].due;
    this.#armedFor = due;
    this.#timer = setTimeout(() => this.#fire(), Math.max(0, due - performance.now()));
  }

  #fire(): void {
    const now = performance.now();
    while (this.#heap.length > 0 && (this.#heap[0].cancelled || this.#heap[0].due <= now)) {
      const entry = this.#pop();
      if (!entry.cancelled) entry.fire();
    }
    this.#arm();
  }

  #push(entry: Entry): void {
    const heap = this.#heap;
    heap.push(entry);
    for (let i = heap.length - 1; i > 0;) {
      const parent = (i - 1) >> 1;
      if (heap[parent].due <= heap[i].due) break;
      [heap[parent], heap[i]] = [heap[i], heap[parent]];
      i = parent;
    }
  }

  #pop(): Entry {
    const heap = this.#heap;
    const top = heap[0];
    const last = heap.pop()!;
    if (heap.length > 0) {
      heap[0] = last;
      for (let i = 0;;) {
        const l = 2 * i + 1, r = l + 1;
        let m = i;
        if (l < heap.length && heap[l].due < heap[m].due) m = l;
        if (r < heap.length && heap[r].due < heap[m].due) m = r;
        if (m === i) break;
        [heap[m], heap[i]] = [heap[i], heap[m]];
        i = m;
      }
    }
    return top;
  }
}
