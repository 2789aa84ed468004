/**
 * Deadlines for many concurrent calls on one timer: a min-heap of due times with a single
 * `setTimeout` armed for the earliest. Setting a deadline costs a heap push and cancelling one
 * a heap removal, where a timer per call costs a runtime timer object each time. A cancelled
 * deadline leaves the heap at once, so nothing it holds outlives its call. It never polls: the
 * one timer fires only when the earliest deadline is due.
 *
 * @module
 */

/** A deadline's callback, fired once when it passes unless cancelled first. */
export type OnDeadline = () => void;

interface Entry {
  due: number;
  fire: OnDeadline;
  /** Position in the heap; -1 once fired or cancelled. */
  index: number;
}

/** A pending deadline. */
export interface Deadline {
  /** Forget it: its callback will not be called. */
  cancel(): void;
}

/** A deadline scheduler. */
export class Deadlines {
  #heap: Entry[] = [];
  #timer?: ReturnType<typeof setTimeout>;
  #armedFor = Infinity;

  /** Call `fire` `ms` milliseconds from now, unless cancelled first. */
  after(ms: number, fire: OnDeadline): Deadline {
    const entry: Entry = { due: performance.now() + ms, fire, index: this.#heap.length };
    this.#heap.push(entry);
    this.#up(entry.index);
    if (entry.due < this.#armedFor) this.#arm();
    return { cancel: () => this.#remove(entry) };
  }

  /** Deadlines waiting to pass. */
  get size(): number {
    return this.#heap.length;
  }

  #remove(entry: Entry): void {
    const i = entry.index;
    if (i < 0) return;
    entry.index = -1;
    const last = this.#heap.pop()!;
    if (last === entry) return;
    this.#place(last, i);
    this.#down(i);
    this.#up(last.index);
  }

  #arm(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#armedFor = Infinity;
    if (this.#heap.length === 0) return;
    const due = this.#heap[0].due;
    this.#armedFor = due;
    this.#timer = setTimeout(() => this.#fire(), Math.max(0, due - performance.now()));
  }

  #fire(): void {
    const now = performance.now();
    while (this.#heap.length > 0 && this.#heap[0].due <= now) {
      const entry = this.#heap[0];
      this.#remove(entry);
      entry.fire();
    }
    this.#arm();
  }

  #place(entry: Entry, i: number): void {
    this.#heap[i] = entry;
    entry.index = i;
  }

  #up(i: number): void {
    const heap = this.#heap;
    const entry = heap[i];
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (heap[parent].due <= entry.due) break;
      this.#place(heap[parent], i);
      i = parent;
    }
    this.#place(entry, i);
  }

  #down(i: number): void {
    const heap = this.#heap;
    const entry = heap[i];
    for (;;) {
      const l = 2 * i + 1, r = l + 1;
      let m = l;
      if (l >= heap.length) break;
      if (r < heap.length && heap[r].due < heap[l].due) m = r;
      if (heap[m].due >= entry.due) break;
      this.#place(heap[m], i);
      i = m;
    }
    this.#place(entry, i);
  }
}
