/**
 * Host processes as a sandboxed command sees them (issue 29, point 7): `pidfd_open` on a host
 * pid is refused (ENOSYS), so no descriptor tells it when a host process exits; `kill(pid, 0)`
 * still answers EPERM for a live host pid and ESRCH for a free one, the stated limit (a pid
 * namespace per session would close it; docs/sandbox.md, isolation model). Real server as root.
 *
 * @module
 */

import assert from "node:assert/strict";
import { startServer } from "../helpers/server.ts";

Deno.test("a sandboxed command gets no pidfd on a host process; kill(pid, 0) still probes", async () => {
  const server = await startServer();
  try {
    const probe = [
      "import errno, os",
      "def code(f):",
      "    try:",
      "        f()",
      "        return 'ok'",
      "    except OSError as e:",
      "        return errno.errorcode[e.errno]",
      `print('pidfd', code(lambda: os.pidfd_open(${server.pid})))`,
      `print('kill-live', code(lambda: os.kill(${server.pid}, 0)))`,
      "print('kill-free', code(lambda: os.kill(99999999, 0)))",
      "print('pidfd-own', code(lambda: os.pidfd_open(os.getpid())))",
    ].join("\n");
    const r = await server.post("/v1/exec_command", {
      cmd: `python3 -c "${probe}"`,
      login: false,
      tty: false,
    });
    assert.equal(r.body.exit_code, 0, JSON.stringify(r.body));
    assert.equal(
      r.body.output,
      // Refused even for its own pid: the filter cannot tell whose a pid is.
      "pidfd ENOSYS\nkill-live EPERM\nkill-free ESRCH\npidfd-own ENOSYS\n",
    );
  } finally {
    await server.stop();
  }
});
