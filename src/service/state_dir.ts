/**
 * The server's state directory (`UEXEC_STATE_DIR`, else `$XDG_STATE_HOME/uexec`, else
 * `~/.local/state/uexec`): created 0700, holding the token files and the agent registry, each
 * written 0600 through a temporary file and a rename so a crash never leaves half a file.
 *
 * It must never loosen the mode of an existing directory or file silently: a state directory
 * another user can read or write is refused, since the tokens in it would not be secret.
 *
 * @module
 */

/** A state directory that cannot be used safely. */
export class StateDirError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "StateDirError";
  }
}

/** Where the state lives, from the environment. */
export function stateDirFrom(env: Record<string, string | undefined>, home: string): string {
  if (env.UEXEC_STATE_DIR) return env.UEXEC_STATE_DIR;
  if (env.XDG_STATE_HOME) return `${env.XDG_STATE_HOME}/uexec`;
  return `${home}/.local/state/uexec`;
}

/** Files in a state directory. */
export class StateDir {
  readonly path: string;

  /** Create `path` (0700, parents as needed) or check that it is private to this user. */
  constructor(path: string) {
    Deno.mkdirSync(path, { recursive: true, mode: 0o700 });
    this.path = Deno.realPathSync(path);
    const info = Deno.statSync(this.path);
    const mode = (info.mode ?? 0) & 0o777;
    const uid = Deno.uid();
    if (!info.isDirectory || info.uid !== uid || (mode & 0o077) !== 0) {
      throw new StateDirError(
        `state directory ${this.path} must be a directory owned by uid ${uid} with mode 0700 ` +
          `(found owner ${info.uid}, mode ${mode.toString(8).padStart(4, "0")}); ` +
          `fix it with "chmod 700 ${this.path}" or set UEXEC_STATE_DIR`,
      );
    }
  }

  /** The contents of `name`, or undefined when it does not exist. */
  read(name: string): string | undefined {
    try {
      return Deno.readTextFileSync(this.file(name));
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return undefined;
      throw err;
    }
  }

  /** Write `name` with mode 0600, atomically. */
  write(name: string, text: string): void {
    const tmp = `${this.file(name)}.${crypto.randomUUID()}.tmp`;
    try {
      Deno.writeTextFileSync(tmp, text, { mode: 0o600, createNew: true });
      Deno.renameSync(tmp, this.file(name));
    } catch (err) {
      try {
        Deno.removeSync(tmp);
      } catch { /* never created */ }
      throw err;
    }
  }

  /** Remove `name` if it exists. */
  remove(name: string): void {
    try {
      Deno.removeSync(this.file(name));
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) throw err;
    }
  }

  /** The absolute path of `name`. */
  file(name: string): string {
    return `${this.path}/${name}`;
  }
}
