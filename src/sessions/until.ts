/**
 * The `until` pattern: compiled for V8's linear-time RegExp engine (the `l` flag, enabled by
 * `--enable-experimental-regexp-engine`) and matched against a window of a call's output sized
 * so that one match costs a bounded amount of work. A pattern without any regular-expression
 * syntax (a marker, a prompt's text) is found as a substring instead: it means the same, and
 * building a linear-engine RegExp costs several microseconds a request; literals joined by
 * `[\s\S]*` (a marker, then its echo) are found as substrings in order. Output is written by the
 * command, so a pattern that backtracks would let a repository's output stall the server; this
 * module must never run a pattern on the backtracking engine, and never match over unbounded
 * text. As output arrives, only what a new match could span is tested: the new text and, for a
 * pattern whose matches are at most L characters long, the L - 1 before it; a pattern whose
 * matches have no bound (`.*`, `+`) is tested over the text held at once while that costs at
 * most twice the new text, else once the burst of output ends, so a flood costs each character
 * about two tests, not one window per chunk, and a short answer waits for nothing.
 *
 * @module
 */

import { CharCarry } from "../output/carry.ts";

/** A pattern that cannot be used; the message says why (the caller names the field). */
export class UntilPatternError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UntilPatternError";
  }
}

/** Whether this process runs with V8's linear-time engine (the `l` RegExp flag). */
export const LINEAR_ENGINE = (() => {
  try {
    new RegExp("", "l");
    return true;
  } catch {
    return false;
  }
})();

/** The V8 flag that enables the linear-time engine. */
export const LINEAR_ENGINE_FLAG = "--enable-experimental-regexp-engine";

/** The largest copy count V8's linear engine accepts for a counted repetition. */
const MAX_REPLICATION = 16;
/**
 * Match work allowed per test, in characters matched times pattern size (see `states`). The
 * linear engine spends about 75 ns per character plus up to about 30 ns per unit: the slowest
 * pattern measured, a starred alternation, took 15 ms per test on a loaded 2-core machine.
 */
const WORK_PER_TEST = 1 << 19;
/** The largest pattern size accepted: its window is then WORK_PER_TEST / MAX_STATES = 1,024. */
const MAX_STATES = 512;
/** The window for small patterns. */
const MAX_WINDOW = 16 * 1024;

/**
 * An upper bound on the pattern's size in the linear engine (which copies a counted repetition
 * once per allowed count): its length times its largest finite repetition count.
 */
function states(source: string): number {
  let most = 1;
  for (const m of source.matchAll(/\{(\d+)(?:,(\d*))?\}/g)) {
    most = Math.max(most, Math.min(MAX_REPLICATION, Number(m[2] || m[1])));
  }
  return source.length * most;
}

/**
 * The first construct in `source` that V8's linear engine refuses: a backreference, a
 * lookahead, a case-insensitive group, a capture inside a lookbehind or a counted repetition
 * beyond 16 copies. Scans the JavaScript (non-unicode) pattern syntax.
 */
export function refusedConstruct(source: string): string {
  const captures = (source.match(/\((?!\?)|\(\?<[^=!]/g) ?? []).length;
  const groups: string[] = [];
  let counted: string | undefined;
  for (let i = 0; i < source.length; i++) {
    const c = source[i];
    if (c === "\\") {
      const ref = /^(?:[1-9]\d*|k<[^>]*>)/.exec(source.slice(i + 1))?.[0];
      if (ref && (ref[0] === "k" || Number(ref) <= captures)) return `backreference \\${ref}`;
      i++;
    } else if (c === "[") {
      for (i++; i < source.length && source[i] !== "]"; i++) if (source[i] === "\\") i++;
    } else if (c === "(") {
      const head = /^\((?:\?(?:[=!]|<[=!]|<|[a-zA-Z]*(?:-[a-zA-Z]*)?:))?/.exec(source.slice(i))![0];
      if (head === "(?=" || head === "(?!") return `lookahead ${head}…)`;
      if (/^\(\?[a-zA-Z]*i[a-zA-Z]*(?:-[a-zA-Z]*)?:$/.test(head)) {
        return `case-insensitive group ${head}…)`;
      }
      const capture = head === "(" || head === "(?<";
      if (capture && groups.includes("(?<=")) return "capture group inside a lookbehind (?<=…)";
      groups.push(head);
      i += head.length - 1;
    } else if (c === ")") {
      groups.pop();
    } else if (c === "{" && counted === undefined) {
      const m = /^\{(\d+)(?:,(\d*))?\}/.exec(source.slice(i));
      if (m && Math.max(Number(m[1]), Number(m[2] || 0)) > MAX_REPLICATION) counted = m[0];
    }
  }
  return counted
    ? `counted repetition ${counted} (at most ${MAX_REPLICATION} copies, nested counts multiply)`
    : `counted repetitions nested past ${MAX_REPLICATION} copies`;
}

/** Characters with a meaning in a (non-unicode) JavaScript regular expression. */
const SYNTAX = /[\\^$.|?*+()[\]{}]/;
/** Any run of characters, line ends included: what joins the literals of an in-order pattern. */
const ANY_RUN = "[\\s\\S]*";

/**
 * The literals of `source` when it is two or more of them joined by {@link ANY_RUN}, else
 * undefined. Such a pattern matches where each literal is found after the one before it ends:
 * taking each at its first place leaves the most text for the next, so that is exact.
 */
function literalsInOrder(source: string): string[] | undefined {
  const parts = source.split(ANY_RUN);
  return parts.length > 1 && !parts.some((p) => SYNTAX.test(p)) ? parts : undefined;
}

/** Whether `text` holds each of `parts`, in order, without overlap. */
function inOrder(text: string, parts: string[]): boolean {
  let at = 0;
  for (const part of parts) {
    const found = text.indexOf(part, at);
    if (found < 0) return false;
    at = found + part.length;
  }
  return true;
}

/**
 * A compiled `until` pattern (made by {@link compileUntil} alone): what it is tested with, and
 * how many of a call's latest output characters it is tested against.
 */
export class UntilPattern {
  readonly #test: (text: string) => boolean;
  /** How many of the latest characters of a call's output it is matched against. */
  readonly window: number;
  /** The longest match it can make, in UTF-16 code units; undefined when there is no bound. */
  readonly maxLength: number | undefined;

  private constructor(
    readonly source: string,
    size: number,
    test: (text: string) => boolean,
    maxLength: number | undefined,
  ) {
    this.#test = test;
    this.window = windowFor(size);
    this.maxLength = maxLength;
  }

  /**
   * `source` compiled: as a substring when it has no syntax, as substrings in order when it is
   * literals joined by `[\s\S]*` (a marker then its echo), else for the linear engine.
   */
  static compile(source: string): UntilPattern {
    if (!SYNTAX.test(source)) {
      return new UntilPattern(
        source,
        bounded(source),
        (text) => text.includes(source),
        source.length,
      );
    }
    const parts = literalsInOrder(source);
    if (parts) {
      return new UntilPattern(source, bounded(source), (text) => inOrder(text, parts), undefined);
    }
    const { regexp, size } = linear(source);
    return new UntilPattern(source, size, (text) => regexp.test(text), maxMatchLength(source));
  }

  /** Whether `text` holds a match. */
  test(text: string): boolean {
    return this.#test(text);
  }

  /** As the regular expression it is (what makes two requests' bodies the same). */
  toJSON(): string {
    return `/${this.source}/`;
  }
}

/** How many compiled patterns are kept for reuse (the least recently used goes first). */
export const CACHED_PATTERNS = 128;
/**
 * Compiled patterns by source, least recently used first. Sharing one is safe: it keeps no
 * state between tests (a RegExp without the `g` or `y` flag neither reads nor sets `lastIndex`).
 */
const compiled = new Map<string, UntilPattern>();

/**
 * Compile `source` (see {@link UntilPattern}). A syntax error, a construct the linear engine
 * refuses or a pattern too large for a useful window is an `UntilPatternError` naming it; a
 * process without the engine throws a plain Error for any pattern but a substring. The same
 * source gives the same pattern while it is among the last CACHED_PATTERNS compiled.
 */
export function compileUntil(source: string): UntilPattern {
  const cached = compiled.get(source);
  if (cached) {
    compiled.delete(source);
    compiled.set(source, cached);
    return cached;
  }
  const pattern = UntilPattern.compile(source);
  if (compiled.size >= CACHED_PATTERNS) compiled.delete(compiled.keys().next().value!);
  compiled.set(source, pattern);
  return pattern;
}

/**
 * `source` as a linear-engine RegExp, with its size (see `states`), or an `UntilPatternError`
 * saying why it cannot be.
 */
function linear(source: string): { regexp: RegExp; size: number } {
  if (!LINEAR_ENGINE) throw new Error(`V8 runs without ${LINEAR_ENGINE_FLAG}`);
  let regexp: RegExp;
  try {
    regexp = new RegExp(source, "l");
  } catch {
    try {
      new RegExp(source);
    } catch (err) {
      throw new UntilPatternError(`invalid regular expression: ${(err as Error).message}`);
    }
    throw new UntilPatternError(
      `cannot be matched in linear time: ${refusedConstruct(source)} is not supported`,
    );
  }
  return { regexp, size: bounded(source) };
}

/**
 * The size of `source` (see `states`); an `UntilPatternError` when it is too large to match in
 * bounded time.
 */
function bounded(source: string): number {
  const size = states(source);
  if (size > MAX_STATES) {
    throw new UntilPatternError(
      `too large to match in bounded time: length times largest repetition count is ${size}, ` +
        `at most ${MAX_STATES}`,
    );
  }
  return size;
}

/** How many of the latest characters of a call's output a pattern of `size` is matched against. */
function windowFor(size: number): number {
  return Math.min(MAX_WINDOW, Math.floor(WORK_PER_TEST / size));
}

const decoder = new TextDecoder();

/**
 * A call's output, decoded and kept to the pattern's window, tested as it arrives (see the module
 * doc for how much is tested when).
 */
export class UntilMatcher {
  #text = "";
  /** A trailing incomplete UTF-8 sequence, decoded once the rest of it arrives. */
  #carry = new CharCarry();
  #matched = false;
  /** Characters at the end of `#text` that no test has covered yet. */
  #untested = 0;
  /** Whether the window was tested once (the first feed, what a call starts with, is at once). */
  #tested = false;
  #later?: ReturnType<typeof setTimeout>;

  /**
   * `onLateMatch` is called when a test put off until the end of a burst of output matches (a
   * pattern without a bound on its matches' length); without it every feed tests at once.
   */
  constructor(readonly pattern: UntilPattern, readonly onLateMatch?: () => void) {}

  get matched(): boolean {
    return this.#matched;
  }

  /** Add output and test what a new match could span; returns whether the pattern matched. */
  feed(bytes: Uint8Array): boolean {
    if (this.#matched) return true;
    const added = decoder.decode(this.#carry.complete(bytes));
    this.#text += added;
    this.#untested += added.length;
    const { window, maxLength } = this.pattern;
    if (this.#text.length > window) this.#text = this.#text.slice(-window);
    if (maxLength !== undefined) {
      const span = this.#untested + maxLength - 1;
      this.#untested = 0;
      return this.#matched = this.pattern.test(
        span >= this.#text.length ? this.#text : this.#text.slice(-span),
      );
    }
    // A test costs the text held. It runs now while that is at most twice the text it has not
    // seen (always for a short answer: no wait added), else it is put off until this burst of
    // output ends (the timer runs once the reads queued now are handled): a flood of small
    // chunks is then tested about twice a character, not once per chunk over the whole window.
    if (this.onLateMatch && this.#tested && this.#text.length > 2 * this.#untested) {
      this.#later ??= setTimeout(() => {
        this.#later = undefined;
        if (this.#testWindow()) this.onLateMatch!();
      }, 0);
      return false;
    }
    return this.#testWindow();
  }

  /** Stop any test put off (the call ended). */
  close(): void {
    clearTimeout(this.#later);
    this.#later = undefined;
  }

  #testWindow(): boolean {
    if (this.#matched || (this.#tested && this.#untested === 0)) return this.#matched;
    this.#untested = 0;
    this.#tested = true;
    return this.#matched = this.pattern.test(this.#text);
  }
}

/**
 * The longest match of a (non-unicode) JavaScript pattern in UTF-16 code units, or undefined
 * when a `*`, `+` or open `{n,}` lets it grow without bound, or when it asserts something about
 * the text before or around a match (`^`, `\b`, `\B`, lookarounds), which a slice of the text
 * would answer differently than the window does. Over-estimates are safe (more is tested); it
 * is used only on patterns the linear engine accepted.
 */
export function maxMatchLength(source: string): number | undefined {
  let i = 0;
  /** An alternation up to `)` or the end: the longest of its branches. */
  const alternation = (): number => {
    let longest = 0;
    for (;;) {
      longest = Math.max(longest, sequence());
      if (source[i] !== "|") return longest;
      i++;
    }
  };
  const sequence = (): number => {
    let total = 0;
    while (i < source.length && source[i] !== "|" && source[i] !== ")") {
      const atomLength = atom();
      const count = quantifier();
      total += atomLength === 0 ? 0 : atomLength * count;
    }
    return total;
  };
  const atom = (): number => {
    const c = source[i++];
    // An assertion about the text before a match (`^`, `\b`, `\B`, a lookaround) would judge
    // the start of a tested slice instead: such a pattern is tested over its whole window.
    if (c === "^") return Infinity;
    if (c === "$") return 0;
    if (c === "\\") {
      const e = source[i++];
      if (e === "b" || e === "B") return Infinity;
      if (e === "u" && /^[0-9a-fA-F]{4}/.test(source.slice(i))) i += 4;
      else if (e === "x" && /^[0-9a-fA-F]{2}/.test(source.slice(i))) i += 2;
      else if (e === "c" && /^[a-zA-Z]/.test(source.slice(i))) i += 1;
      return 1;
    }
    if (c === "[") {
      while (i < source.length && source[i] !== "]") i += source[i] === "\\" ? 2 : 1;
      i++;
      return 1;
    }
    if (c === "(") {
      const head = /^(?:\?(?:<[=!]|[=!]|<[^>]*>|[a-zA-Z]*(?:-[a-zA-Z]*)?:))?/.exec(
        source.slice(i),
      )![0];
      i += head.length;
      const inner = alternation();
      i++; // ")"
      return head === "?<=" || head === "?<!" || head === "?=" || head === "?!" ? Infinity : inner;
    }
    return 1;
  };
  /** The most copies the quantifier after an atom allows: Infinity when unbounded. */
  const quantifier = (): number => {
    const c = source[i];
    let most = 1;
    if (c === "*" || c === "+") {
      most = Infinity;
      i++;
    } else if (c === "?") {
      i++;
    } else if (c === "{") {
      const m = /^\{(\d+)(?:(,)(\d*))?\}/.exec(source.slice(i));
      if (m) {
        most = m[2] === undefined ? Number(m[1]) : m[3] === "" ? Infinity : Number(m[3]);
        i += m[0].length;
      }
    }
    if (most !== 1 && source[i] === "?") i++; // lazy
    return most;
  };
  const longest = alternation();
  return Number.isFinite(longest) ? longest : undefined;
}
