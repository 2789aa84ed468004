/**
 * The known-safe, read-only commands that the `untrusted` approval policy runs without asking.
 *
 * Deliberately small and syntactic: a command line qualifies only if it is plain words
 * (letters, digits and `_ . / : , = + @ -`, plus `~` inside a word as in `HEAD~1` but never
 * where bash expands it; no quotes, globs, variables, redirections or substitutions) joined by
 * `|`, `&&`, `||` or `;`, and every segment starts with a bare program name from
 * the list below with arguments that cannot make it write, run other programs or reach the
 * network. Anything else is "not known safe" and prompts, as is a known-safe line with a shell
 * or variables the agent chose ({@link isKnownSafeEnv}). Known-safe commands still run inside
 * the sandbox; this list only saves a prompt. It must never grow a command that can write files
 * or execute other commands through its arguments.
 *
 * @module
 */

/** Programs that only read, whatever their arguments. */
const ANY_ARGUMENTS = new Set([
  "basename",
  "cat",
  "cmp",
  "cut",
  "diff",
  "dirname",
  "echo",
  "false",
  "grep",
  "head",
  "id",
  "ls",
  "nl",
  "pwd",
  "readlink",
  "realpath",
  "stat",
  "tail",
  "tr",
  "true",
  "uname",
  "wc",
  "which",
  "whoami",
]);

/** Programs that are safe unless given one of these options (in any form, see `givesOption`). */
const FORBIDDEN_OPTIONS: Record<string, string[]> = {
  find: [
    "-exec",
    "-execdir",
    "-ok",
    "-okdir",
    "-delete",
    "-fls",
    "-fprint",
    "-fprint0",
    "-fprintf",
  ],
  rg: ["--pre", "--pre-glob", "-z", "--search-zip", "--hostname-bin"],
  sort: ["-o", "--output", "--compress-program"],
};

/** Read-only git subcommands; no option may come before the subcommand. */
const GIT_SUBCOMMANDS = new Set(["status", "log", "diff", "show"]);
const GIT_FORBIDDEN_OPTIONS = ["--output", "--ext-diff", "--textconv"];

/**
 * A separator, or a word with `~` only where bash leaves it alone. Only spaces and tabs separate
 * words: a newline separates commands in sh, so it makes the line "not plain".
 */
const TOKEN =
  /[ \t]*(\|\||&&|[|;]|[A-Za-z0-9_.\/:,=+@-](?:[A-Za-z0-9_.\/:,=+@-]|(?<![=:])~)*)[ \t]*/y;
const SEPARATORS = new Set(["|", "||", "&&", ";"]);

/** Splits a command line into segments of words, or undefined if it is not plain words. */
function plainSegments(command: string): string[][] | undefined {
  const segments: string[][] = [[]];
  TOKEN.lastIndex = 0;
  while (TOKEN.lastIndex < command.length) {
    const match = TOKEN.exec(command);
    if (!match) return undefined;
    if (SEPARATORS.has(match[1])) segments.push([]);
    else segments[segments.length - 1].push(match[1]);
  }
  return segments.every((words) => words.length > 0) ? segments : undefined;
}

function usesOption(args: string[], options: string[]): boolean {
  return args.some((arg) => options.some((opt) => givesOption(arg, opt)));
}

/**
 * Whether `arg` gives `opt`: exactly or with its value (`--output=f`); a long option also
 * abbreviated, as getopt_long accepts any unambiguous prefix (`--outp=f`, `--compress-prog`); a
 * short one anywhere in a single-dash word, which getopt may read as a cluster of short options
 * with or without a value attached (`-zn`, `-0z`, `-of`, `-uof`).
 */
function givesOption(arg: string, opt: string): boolean {
  if (opt.startsWith("--")) {
    const name = arg.split("=", 1)[0];
    return name.length > 2 && name.startsWith("--") && opt.startsWith(name);
  }
  if (/^-[a-zA-Z]$/.test(opt)) {
    // Anywhere in a single-dash word: getopt reads `-0z` and `-i0z` as clusters holding `-z`
    // (and `-ezebra` is refused too: what may be a value is not told from what may be a flag).
    return /^-[^-]/.test(arg) && arg.slice(1).includes(opt[1]);
  }
  return arg === opt || arg.startsWith(`${opt}=`);
}

/** `sed -n` with a single print script such as `5p` or `1,20p`. */
function isSedPrint(args: string[]): boolean {
  return args.length >= 2 && args[0] === "-n" && /^\d+(,\d+)?p$/.test(args[1]) &&
    args.slice(2).every((arg) => !arg.startsWith("-"));
}

function isSafeSegment([program, ...args]: string[]): boolean {
  if (ANY_ARGUMENTS.has(program)) return true;
  if (program in FORBIDDEN_OPTIONS) return !usesOption(args, FORBIDDEN_OPTIONS[program]);
  if (program === "sed") return isSedPrint(args);
  if (program === "git") {
    return GIT_SUBCOMMANDS.has(args[0]) && !usesOption(args.slice(1), GIT_FORBIDDEN_OPTIONS);
  }
  return false;
}

/** Whether `untrusted` may run this command line without asking (see the module doc). */
export function isKnownSafeCommand(command: string): boolean {
  const segments = plainSegments(command);
  return segments !== undefined && segments.every(isSafeSegment);
}

/**
 * Variables a known-safe command may be given and stay known safe: the locale, the terminal's
 * type and size, colour switches, and a pager that is `cat`. Everything else can change what
 * runs (LD_PRELOAD, BASH_ENV, PATH, GIT_EXTERNAL_DIFF, LOCPATH, TERMINFO, …).
 */
const SAFE_VARIABLES =
  /^(?:LANG|LANGUAGE|LC_[A-Z]+|TERM|COLUMNS|LINES|NO_COLOR|FORCE_COLOR|CLICOLOR)$/;
const PAGERS = new Set(["PAGER", "GIT_PAGER", "MANPAGER"]);

/** A value that names no file: `en_US.UTF-8`, `xterm-256color`, `120`. */
const PLAIN_VALUE = /^[A-Za-z0-9_.,:@+-]*$/;

/** Whether `env` (what a request adds) leaves a known-safe command known safe. */
export function isKnownSafeEnv(env: Record<string, string> = {}): boolean {
  return Object.entries(env).every(([name, value]) =>
    (SAFE_VARIABLES.test(name) && PLAIN_VALUE.test(value)) ||
    (PAGERS.has(name) && (value === "cat" || value === ""))
  );
}
