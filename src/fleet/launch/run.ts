/**
 * Running the host programs a local fleet is made of (PostgreSQL's, nginx): a command's output
 * collected, and its failure an error that quotes what the program said. It must never run a
 * program through a shell.
 *
 * @module
 */

/** Run `program` with `args`; its stdout, or an error with its stderr. */
export async function run(program: string, args: string[], what: string): Promise<string> {
  const out = await new Deno.Command(program, { args, stdout: "piped", stderr: "piped" }).output();
  const text = new TextDecoder().decode(out.stdout);
  if (!out.success) {
    const stderr = new TextDecoder().decode(out.stderr);
    throw new Error(`${what} failed (exit ${out.code}): ${stderr}${text}`.trim());
  }
  return text;
}

/** A port nothing listens on now (the kernel's pick, released at once for a child to bind). */
export function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return port;
}

/**
 * Resolves once `path` exists (a child's pid file, written once it is ready), watching its
 * directory rather than polling; rejects with `exited` when `exited` settles first.
 */
export async function appeared(path: string, exited: Promise<unknown>): Promise<void> {
  const dir = path.slice(0, path.lastIndexOf("/"));
  const watcher = Deno.watchFs(dir, { recursive: false });
  try {
    const exists = async () => {
      try {
        await Deno.lstat(path);
        return true;
      } catch {
        return false;
      }
    };
    if (await exists()) return;
    const seen = (async () => {
      for await (const event of watcher) {
        if (event.paths.includes(path) && await exists()) return;
      }
    })();
    const gone = exited.then(() => {
      throw new Error(`exited before ${path} appeared`);
    });
    await Promise.race([seen, gone]);
  } finally {
    watcher.close();
  }
}
