/**
 * Pathname unix sockets end to end: a real server, real HTTP, real sandboxed children, and root
 * services listening on 0777 sockets. Each refusal is paired with a control: the same service
 * answers the test itself, and a profile that lists the socket reaches it.
 *
 * @module
 */

import assert from "node:assert/strict";
import { startServer } from "../helpers/server.ts";
import { rootService } from "../helpers/unix_service.ts";

/**
 * A probe that connects to each path given and prints the greeting or the error class, after its
 * own socket's (bound in TMPDIR by the session). `late`: it first says "ready" and waits for a
 * line on stdin, and prints its answers after "got".
 */
function probe(late: boolean): string {
  const wait = late ? `    print("ready", flush=True)\n    sys.stdin.readline()\n` : "";
  const got = late ? `"got", ` : "";
  return `
import os, socket, sys
def greet(path):
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(path)
            return s.recv(16).decode()
    except OSError as e:
        return type(e).__name__
own = os.path.join(os.environ["TMPDIR"], "own.sock")
with socket.socket(socket.AF_UNIX) as srv:
    srv.bind(own)
    srv.listen()
${wait}    with socket.socket(socket.AF_UNIX) as c:
        c.connect(own)
        a, _ = srv.accept()
        a.send(b"own")
        a.close()
        print(${got}c.recv(8).decode(), *[greet(p) for p in sys.argv[1:]], flush=True)
`;
}

const PROBE = probe(false);

Deno.test("root services' sockets are out of reach unless the profile lists them", async () => {
  assert.equal(Deno.uid(), 0, "needs root (uid drop, mount namespace)");
  const sockDir = await Deno.makeTempDir({ prefix: "uexec-svc-" });
  await Deno.chmod(sockDir, 0o755);
  const paths = [
    `/run/uexec-http-${Deno.pid}.sock`,
    `${sockDir}/svc.sock`,
    `/run/uexec-http-${Deno.pid}-docker.sock`,
  ];
  const services = paths.map((p, i) => rootService(p, `svc${i}`));
  const profiles = await Deno.makeTempDir({ prefix: "uexec-profiles-" });
  const shipped = new URL("../../sandbox-profiles/", import.meta.url).pathname;
  for await (const entry of Deno.readDir(shipped)) {
    await Deno.copyFile(`${shipped}${entry.name}`, `${profiles}/${entry.name}`);
  }
  const base = JSON.parse(await Deno.readTextFile(`${shipped}workspace-write.json`));
  await Deno.writeTextFile(
    `${profiles}/docker.json`,
    JSON.stringify({ ...base, description: "test: docker", unix_sockets: [paths[2]] }),
  );
  const server = await startServer({ UEXEC_PROFILES_DIR: profiles });
  try {
    const script = `${server.workspace}/probe.py`;
    await Deno.writeTextFile(script, PROBE, { mode: 0o644 });
    const cmd = `python3 ${script} ${paths.join(" ")}`;
    const refused = "ConnectionRefusedError";
    const expected: Record<string, string> = {
      "workspace-write": `own ${refused} ${refused} ${refused}\r\n`,
      "workspace-write-net": `own ${refused} ${refused} ${refused}\r\n`,
      "read-only": `own ${refused} ${refused} ${refused}\r\n`,
      docker: `own ${refused} ${refused} svc2\r\n`,
    };
    for (const [profile, output] of Object.entries(expected)) {
      const r = await server.post("/v1/exec_command", { cmd, login: false, profile });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body.output, output, profile);
      assert.equal(r.body.exit_code, 0, profile);
    }
    // The listed socket's service binds it again (a restart): the next command reaches the new one.
    await services[2].close();
    services[2] = rootService(paths[2], "svc2b");
    const again = await server.post("/v1/exec_command", { cmd, login: false, profile: "docker" });
    assert.equal(again.body.output, `own ${refused} ${refused} svc2b\r\n`);
    // Control: the services answer outside the sandbox.
    const out = await new Deno.Command("python3", {
      args: [script, ...paths],
      env: { TMPDIR: sockDir },
    }).output();
    assert.equal(new TextDecoder().decode(out.stdout), "own svc0 svc1 svc2b\n");
  } finally {
    await server.stop();
    for (const service of services) await service.close();
    await Deno.remove(sockDir, { recursive: true });
    await Deno.remove(profiles, { recursive: true });
  }
});

const LATE_PROBE = probe(true);

// Issue 29 point 8: the domain's mount view (src/sandbox/enforce/mount_view.ts) makes this a
// rule. With the snapshot hiding that came before it, the late socket greeted the command.
Deno.test({
  name: "a root socket bound while a session runs is out of its reach, also through a symlink",
  fn: async () => {
    assert.equal(Deno.uid(), 0, "needs root (uid drop, mount namespace)");
    const sockDir = await Deno.makeTempDir({ prefix: "uexec-late-" });
    await Deno.chmod(sockDir, 0o755);
    const late = `${sockDir}/late.sock`;
    const server = await startServer();
    let stop: (() => Promise<void>) | undefined;
    let accepted = 0;
    try {
      const script = `${server.workspace}/late.py`;
      await Deno.writeTextFile(script, LATE_PROBE, { mode: 0o644 });
      const link = `${server.workspace}/late-link.sock`;
      const r = await server.post("/v1/exec_command", {
        cmd: `python3 ${script} ${late} ${link}`,
        login: false,
        profile: "workspace-write",
        until: "ready",
        yield_time_ms: 20000,
      });
      assert.equal(typeof r.body.session_id, "number", JSON.stringify(r.body));
      // The session runs; a root service now binds a 0777 socket outside its profile.
      const listener = Deno.listen({ transport: "unix", path: late });
      Deno.chmodSync(late, 0o777);
      await Deno.symlink(late, link);
      const serving = (async () => {
        for await (const conn of listener) {
          accepted++;
          await conn.write(new TextEncoder().encode("late")).catch(() => {});
          conn.close();
        }
      })();
      stop = async () => {
        listener.close();
        await serving;
      };
      const w = await server.post("/v1/write_stdin", {
        session_id: r.body.session_id,
        chars: "go\n",
        until: "got .*\\n",
        yield_time_ms: 20000,
      });
      // Refused, through the view (ECONNREFUSED) or a Landlock ABI 9 rule (EACCES); never greeted.
      const refused = "(ConnectionRefusedError|PermissionError)";
      assert.match(
        w.body.output,
        new RegExp(`got own ${refused} ${refused}\\r\\n`),
        JSON.stringify(w.body),
      );
      assert.equal(accepted, 0);
    } finally {
      await server.stop();
      await stop?.();
      await Deno.remove(sockDir, { recursive: true });
    }
  },
});
