/**
 * Terminal output as a reader sees it, line by line (`output_mode: "plain"`): escape sequences
 * (CSI, OSC, DCS, SOS, PM, APC and two- or three-byte ESC sequences) are removed, carriage
 * returns and backspaces move the cursor within the line and later text overwrites what was
 * there (so a progress bar redrawn a thousand times leaves its last state), `\r\n` ends a line
 * as `\n` does, erase-in-line (`CSI K`) and horizontal cursor moves (`CSI C`, `D`, `G`) are
 * applied, tabs are kept and other control characters dropped.
 *
 * It is a streaming state machine over decoded text: a sequence or a line split across feeds
 * is carried in the state (never as buffered escape bytes: only up to `MAX_PARAMS` parameter
 * characters), so nothing leaks or is lost at a seam, and each character is looked at once,
 * so time is linear in the input. It must never grow without bound: an unfinished line longer
 * than `MAX_LINE` is forgotten once it has been shown. Columns are UTF-16 code units (a
 * surrogate pair moves as one); wide characters are not measured. Cursor moves between lines
 * are ignored: full-screen programs want `screen` mode.
 *
 * @module
 */

/** An unfinished line longer than this is dropped from the state once it has been shown. */
export const MAX_LINE = 64 * 1024;
/** Cursor moves go at most this far right (a terminal is at most 1,000 columns here). */
const MAX_COLUMN = 4096;
/** Parameter characters of a CSI sequence kept (the rest of a longer one is skipped). */
const MAX_PARAMS = 32;

const enum State {
  Ground,
  /** After ESC. */
  Escape,
  /** After ESC and intermediate bytes (0x20-0x2f), before the final byte. */
  EscapeIntermediate,
  /** Inside `ESC [`, before the final byte. */
  Csi,
  /** Inside an OSC, DCS, SOS, PM or APC string, until BEL (OSC) or ST (`ESC \`). */
  String,
  /** ESC seen inside a string: `\` ends it, anything else is the start of a new sequence. */
  StringEscape,
}

const ESC = 0x1b;
const BEL = 0x07;
const BS = 0x08;
const LF = 0x0a;
const VT = 0x0b;
const FF = 0x0c;
const CR = 0x0d;

/** The characters that are not printed: C0 controls but tab, DEL and C1 controls. */
// deno-lint-ignore no-control-regex
const CONTROL = /[\x00-\x08\x0a-\x1f\x7f-\x9f]/g;

function isLowSurrogate(code: number): boolean {
  return code >= 0xdc00 && code <= 0xdfff;
}

const utf16 = new TextDecoder("utf-16le");
const EMPTY_LINE = new Uint16Array(0);

/** The plain renderer of one stream; feed it text in order, take what it produced. */
export class PlainRenderer {
  #state = State.Ground;
  #params = "";
  /**
   * The line being drawn: while text only ever went on its end, the pieces of it (no copy);
   * once something moved the cursor back and wrote, its UTF-16 code units in `#line`. Plus
   * its length and the cursor in it.
   */
  #pieces: string[] = [];
  #line = EMPTY_LINE;
  #length = 0;
  #col = 0;
  /** How much of the line a `take` already showed (it was unfinished then). */
  #shown = 0;
  /** True when a shown part of the line was changed since: it is shown again whole. */
  #redrawn = false;
  #out: string[] = [];

  /** Render `text`, the next piece of the stream. */
  feed(text: string): void {
    const n = text.length;
    let i = 0;
    while (i < n) {
      if (this.#state === State.Ground) {
        CONTROL.lastIndex = i;
        const j = CONTROL.test(text) ? CONTROL.lastIndex - 1 : n;
        if (j > i) {
          this.#write(text, i, j);
          i = j;
          if (i === n) break;
        }
        this.#control(text.charCodeAt(i));
        i++;
        continue;
      }
      const code = text.charCodeAt(i++);
      switch (this.#state) {
        case State.Escape:
          this.#escape(code);
          break;
        case State.EscapeIntermediate:
          if (code === ESC) this.#state = State.Escape;
          else if (code < 0x20 || code > 0x2f) this.#state = State.Ground;
          break;
        case State.Csi:
          if (code >= 0x40 && code <= 0x7e) {
            this.#state = State.Ground;
            this.#csi(code);
          } else if (code === ESC) {
            this.#state = State.Escape;
          } else if (code >= 0x20 && code <= 0x3f) {
            if (this.#params.length < MAX_PARAMS) this.#params += text[i - 1];
          } else if (code < 0x20) {
            this.#control(code);
          } else {
            this.#state = State.Ground;
          }
          break;
        case State.String:
          if (code === BEL) this.#state = State.Ground;
          else if (code === ESC) this.#state = State.StringEscape;
          break;
        case State.StringEscape:
          if (code === 0x5c) this.#state = State.Ground;
          else {
            this.#state = State.Escape;
            this.#escape(code);
          }
          break;
      }
    }
  }

  /**
   * Everything rendered since the last take: finished lines, then the unfinished one as it
   * stands (only its new end when it just grew since it was last shown).
   */
  take(): string {
    this.#out.push(this.#unshown());
    this.#shown = this.#length;
    this.#redrawn = false;
    if (this.#length > MAX_LINE) this.#newLine();
    const text = this.#out.join("");
    this.#out = [];
    return text;
  }

  /** What of the line the reader has not seen: its new end, or all of it when redrawn. */
  #unshown(): string {
    const from = this.#redrawn ? 0 : this.#shown;
    if (from >= this.#length) return "";
    if (this.#line.length === 0) {
      const whole = this.#pieces.join("");
      this.#pieces = [whole];
      return whole.slice(from);
    }
    return utf16.decode(this.#line.subarray(from, this.#length));
  }

  #escape(code: number): void {
    switch (code) {
      case 0x5b: // [
        this.#state = State.Csi;
        this.#params = "";
        return;
      case 0x5d: // ] OSC
      case 0x50: // P DCS
      case 0x58: // X SOS
      case 0x5e: // ^ PM
      case 0x5f: // _ APC
        this.#state = State.String;
        return;
      case ESC:
        return;
    }
    if (code >= 0x20 && code <= 0x2f) this.#state = State.EscapeIntermediate;
    else if (code < 0x20) {
      this.#state = State.Ground;
      this.#control(code);
    } else this.#state = State.Ground;
  }

  #control(code: number): void {
    switch (code) {
      case ESC:
        this.#state = State.Escape;
        return;
      case CR:
        this.#col = 0;
        return;
      case LF:
      case VT:
      case FF:
        this.#endLine();
        return;
      case BS:
        if (this.#col > 0) this.#col--;
        if (this.#col > 0 && this.#col < this.#length && isLowSurrogate(this.#line[this.#col])) {
          this.#col--;
        }
        return;
    }
  }

  /** A CSI sequence ended with `final`: apply the ones that act within a line. */
  #csi(final: number): void {
    const params = this.#params;
    if (params.length > 0 && (params.charCodeAt(0) < 0x30 || params.charCodeAt(0) > 0x3b)) return;
    const n = parseInt(params, 10);
    const count = Number.isNaN(n) || n === 0 ? 1 : Math.min(n, MAX_COLUMN);
    switch (final) {
      case 0x4b: { // K: erase in line
        const mode = Number.isNaN(n) ? 0 : n;
        if (mode === 0) this.#truncate(Math.min(this.#col, this.#length));
        else if (mode === 2) this.#truncate(0);
        else if (mode === 1) {
          if (this.#line.length === 0) this.#toCodeUnits();
          const end = Math.min(this.#col + 1, this.#length);
          this.#line.fill(0x20, 0, end);
          if (end > 0 && this.#shown > 0) this.#redrawn = true;
        }
        return;
      }
      case 0x43: // C: cursor forward
        this.#col = Math.min(this.#col + count, MAX_COLUMN);
        return;
      case 0x44: // D: cursor back
        this.#col = Math.max(0, this.#col - count);
        return;
      case 0x47: // G: cursor to column
      case 0x60: // `: the same
        this.#col = count - 1;
        return;
    }
  }

  #truncate(length: number): void {
    if (length >= this.#length) return;
    if (length < this.#shown) this.#redrawn = true;
    if (length === 0) this.#pieces = [];
    else if (this.#line.length === 0) this.#toCodeUnits();
    this.#length = length;
  }

  /** Put `text[from, to)` on the line at the cursor, over what was there. */
  #write(text: string, from: number, to: number): void {
    const col = this.#col;
    const end = col + (to - from);
    if (this.#line.length === 0) {
      if (col === this.#length) {
        this.#pieces.push(text.slice(from, to));
        this.#col = this.#length = end;
        return;
      }
      this.#toCodeUnits();
    }
    if (end > this.#line.length) {
      const grown = new Uint16Array(Math.max(end, this.#line.length * 2));
      grown.set(this.#line.subarray(0, this.#length));
      this.#line = grown;
    }
    const line = this.#line;
    if (col > this.#length) line.fill(0x20, this.#length, col);
    if (col < this.#shown) this.#redrawn = true;
    for (let i = from, k = col; i < to; i++, k++) line[k] = text.charCodeAt(i);
    this.#col = end;
    if (end > this.#length) this.#length = end;
  }

  /** Move the line from its pieces into code units, to be written over. */
  #toCodeUnits(): void {
    const whole = this.#pieces.join("");
    this.#pieces = [];
    this.#line = new Uint16Array(Math.max(256, whole.length * 2));
    for (let i = 0; i < whole.length; i++) this.#line[i] = whole.charCodeAt(i);
  }

  #endLine(): void {
    this.#out.push(this.#unshown(), "\n");
    this.#newLine();
  }

  #newLine(): void {
    this.#pieces = [];
    this.#line = EMPTY_LINE;
    this.#length = 0;
    this.#shown = 0;
    this.#redrawn = false;
    this.#col = 0;
  }
}
