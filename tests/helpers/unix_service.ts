/**
 * A root service on a pathname unix socket, for the tests of what a sandbox may reach.
 *
 * @module
 */

/** A service on `path` (mode 0777) that greets every client with `name`; `close` removes it. */
export function rootService(path: string, name: string): { close: () => Promise<void> } {
  const listener = Deno.listen({ transport: "unix", path });
  Deno.chmodSync(path, 0o777);
  const serving = (async () => {
    for await (const conn of listener) {
      await conn.write(new TextEncoder().encode(name)).catch(() => {});
      conn.close();
    }
  })();
  return {
    close: async () => {
      listener.close(); // Deno removes the socket file
      await serving;
    },
  };
}
