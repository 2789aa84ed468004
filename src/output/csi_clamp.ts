/**
 * Bounds the counts of terminal control sequences before a terminal emulator parses them. A
 * session's output is hostile: `ESC [ 999999999 L` (insert lines), `x ESC [ 999999999 b` (repeat
 * the last character) and their kin make xterm.js loop, or allocate, as many times as the count
 * says, which froze the shared screen worker for minutes. A count beyond what the screen can
 * show has the same effect as the screen's size, so such counts are cut down to it: lines
 * (IL, DL, SU, SD) to the rows, characters and tab stops (ICH, DCH, ECH, REP, CHT, CBT) to the
 * columns. A CSI longer than any real one ({@link MAX_SEQUENCE} bytes of parameters) is dropped
 * whole. A CSI is recognised wherever the emulator (xterm.js) starts one: `ESC [` (with C0
 * controls or DEL between them, which its escape state passes over) and U+009B from any state.
 *
 * It keeps its state across chunks (a sequence may be cut anywhere) and must never reorder
 * what the emulator sees beyond holding a sequence's parameter bytes back until its final byte,
 * never change a sequence it has no reason to, and never copy a chunk it leaves unchanged.
 *
 * @module
 */

/** Parameter and intermediate bytes of one CSI kept at most; a longer one is dropped. */
export const MAX_SEQUENCE = 256;

const ESC = 0x1b;
const LEFT_BRACKET = 0x5b;
/** UTF-8 lead byte of U+0080-U+00BF; followed by 0x9b it is the C1 CSI, U+009B. */
const C2 = 0xc2;
const C1_CSI = 0x9b;
const CAN = 0x18;
const SUB = 0x1a;

/** Final bytes whose counts are bounded by the rows. */
const BY_ROWS = new Set(["L", "M", "S", "T", "^"].map((c) => c.charCodeAt(0)));
/** Final bytes whose counts are bounded by the columns. */
const BY_COLS = new Set(["@", "P", "X", "b", "I", "Z"].map((c) => c.charCodeAt(0)));

const enum State {
  Ground,
  Escape,
  /** Inside a CSI, collecting parameter and intermediate bytes. */
  Csi,
  /** Inside a CSI too long to be real: everything up to its final byte is dropped. */
  Drop,
}

/** One session's filter. */
export class CsiClamp {
  #state = State.Ground;
  /** The previous chunk ended on a 0xC2 byte (in the ground state). */
  #afterC2 = false;
  /** The current CSI's bytes after its introducer that earlier chunks held back. */
  #held: number[] = [];
  /** The current CSI's length after its introducer, in every chunk so far. */
  #length = 0;

  /**
   * `chunk` as the emulator should see it, for a screen of `cols` x `rows`: the same array
   * when nothing in it needed changing or holding back.
   */
  filter(chunk: Uint8Array, cols: number, rows: number): Uint8Array {
    let out: number[] | undefined;
    // Bytes of `chunk` before `copied` are settled: in `out`, or (while `out` is undefined)
    // passed on as they are.
    let copied = 0;
    // Where the current CSI's bytes after its introducer begin in this chunk.
    let start = 0;
    const take = (end: number) => {
      out ??= [];
      for (let j = copied; j < end; j++) out.push(chunk[j]);
      copied = end;
    };
    for (let i = 0; i < chunk.length; i++) {
      const byte = chunk[i];
      switch (this.#state) {
        case State.Ground:
          if (byte === ESC) this.#state = State.Escape;
          else if (byte === C1_CSI && this.#afterC2) start = this.#enterCsi(i);
          this.#afterC2 = byte === C2;
          continue;
        case State.Escape:
          // As the emulator's escape state: a CSI on `[` or on U+009B; C0 controls but CAN and
          // SUB, and DEL, are executed or ignored there without leaving it.
          if (byte === LEFT_BRACKET || (byte === C1_CSI && this.#afterC2)) {
            start = this.#enterCsi(i);
          } else if (byte !== ESC && byte !== C2 && !staysInEscape(byte)) {
            this.#state = State.Ground;
          }
          this.#afterC2 = byte === C2;
          continue;
        case State.Drop:
          // Nothing of it reaches the emulator, up to and with its final byte.
          if (byte === ESC || byte === CAN || byte === SUB || (byte >= 0x40 && byte <= 0x7e)) {
            this.#state = byte === ESC ? State.Escape : State.Ground;
          }
          copied = i + 1;
          continue;
        case State.Csi: {
          const aborts = byte === ESC || byte === CAN || byte === SUB;
          const final = byte >= 0x40 && byte <= 0x7e;
          if (!aborts && !final) {
            if (++this.#length > MAX_SEQUENCE) {
              // Too long to be real: drop it whole (what earlier chunks held goes too), and
              // cancel it (CAN) for the emulator, which saw its introducer.
              take(start);
              out!.push(CAN);
              this.#held = [];
              this.#state = State.Drop;
              copied = i + 1;
            }
            continue;
          }
          const bound = !final ? 0 : BY_ROWS.has(byte) ? rows : BY_COLS.has(byte) ? cols : 0;
          if (this.#held.length > 0 || bound > 0) {
            const body = [...this.#held, ...chunk.subarray(start, i)];
            if (this.#held.length > 0 || exceeds(body, bound)) {
              take(start);
              out!.push(...(bound > 0 ? bounded(body, bound) : body));
              copied = i;
            }
          }
          this.#held = [];
          this.#state = byte === ESC ? State.Escape : State.Ground;
          continue;
        }
      }
    }
    if (this.#state === State.Csi) {
      // Cut at the chunk's end: what it has so far waits for the rest.
      this.#held.push(...chunk.subarray(start));
      if (out === undefined) return chunk.subarray(copied, start);
      take(start);
      return Uint8Array.from(out);
    }
    if (out === undefined) return copied === 0 ? chunk : chunk.subarray(copied);
    take(chunk.length);
    return Uint8Array.from(out);
  }

  /** A CSI begins after the introducer byte at `i`; returns where its bytes begin. */
  #enterCsi(i: number): number {
    this.#state = State.Csi;
    this.#held = [];
    this.#length = 0;
    return i + 1;
  }
}

/** Bytes the emulator's escape state executes or ignores and stays in: C0 but CAN, SUB, ESC; DEL. */
function staysInEscape(byte: number): boolean {
  return (byte < 0x20 && byte !== CAN && byte !== SUB && byte !== ESC) || byte === 0x7f;
}

function isDigit(byte: number): boolean {
  return byte >= 0x30 && byte <= 0x39;
}

/** The numbers (runs of digits) of `params`, each as a value. */
function* numbers(params: number[]): Generator<[start: number, end: number, value: number]> {
  for (let i = 0; i < params.length;) {
    if (!isDigit(params[i])) {
      i++;
      continue;
    }
    let end = i;
    let value = 0;
    while (end < params.length && isDigit(params[end])) {
      value = Math.min(value * 10 + params[end] - 0x30, Number.MAX_SAFE_INTEGER);
      end++;
    }
    yield [i, end, value];
    i = end;
  }
}

function exceeds(params: number[], bound: number): boolean {
  for (const [, , value] of numbers(params)) if (value > bound) return true;
  return false;
}

/** `params` with each number above `bound` written as `bound`. */
function bounded(params: number[], bound: number): number[] {
  const out: number[] = [];
  let at = 0;
  for (const [start, end, value] of numbers(params)) {
    if (value <= bound) continue;
    out.push(...params.slice(at, start), ...[...String(bound)].map((c) => c.charCodeAt(0)));
    at = end;
  }
  out.push(...params.slice(at));
  return out;
}
