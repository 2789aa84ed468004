/**
 * The egress gateway and its thread (src/egress/gateway.ts, gateway_worker.ts), as root, in a
 * network namespace this test makes (a process holds it, its loopback up): a listener opened
 * there answers a client in that namespace; a refusal is in the session's refusals and the audit
 * once `settle` resolved after the client's exit; an open the thread cannot do (the port taken,
 * a descriptor that is no namespace) rejects and closes the descriptor it was given.
 *
 * @module
 */

import assert from "node:assert/strict";
import { type EgressEvent, EgressGateway } from "../../../src/egress/gateway.ts";
import { cString, libc, O } from "../../../src/ffi/libc.ts";
import { SandboxUnavailableError } from "../../../src/sandbox/errors.ts";

const RULES = { allow: ["ok.test"], deny: [], methods: "all" as const };

/** A process holding a new network namespace with its loopback up; `ns` opens it. */
async function namespaceHolder() {
  const child = new Deno.Command("unshare", {
    args: [
      "--net",
      "python3",
      "-c",
      // SIOCGIFFLAGS, then SIOCSIFFLAGS with IFF_UP added, on lo.
      "import socket, fcntl, struct, sys\n" +
      "s = socket.socket()\n" +
      "req = fcntl.ioctl(s, 0x8913, struct.pack('16sh', b'lo', 0))\n" +
      "flags = struct.unpack('16sh', req[:18])[1]\n" +
      "fcntl.ioctl(s, 0x8914, struct.pack('16sh', b'lo', flags | 1))\n" +
      "print('up', flush=True)\n" +
      "sys.stdin.read()\n",
    ],
    stdin: "piped",
    stdout: "piped",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  assert.equal((await reader.read()).value?.trim(), "up");
  const path = `/proc/${child.pid}/ns/net`;
  return {
    path,
    /** A new descriptor of the namespace. */
    ns(): number {
      const fd = libc().open(cString(path), O.CLOEXEC);
      assert.ok(fd >= 0, `open ${path}`);
      return fd;
    },
    async close() {
      await child.stdin.close();
      await reader.cancel();
      await child.status;
    },
  };
}

/**
 * What descriptor `fd` of this process refers to (`net:[inode]`, a path), or undefined when it is
 * closed. A closed descriptor's number can be taken again at once by another thread's open (the
 * gateway's worker loads modules and opens sockets meanwhile), so a test asks whether `fd` still
 * refers to what it was given, not whether the number is free.
 */
function target(fd: number): string | undefined {
  try {
    return Deno.readLinkSync(`/proc/self/fd/${fd}`);
  } catch {
    return undefined;
  }
}

/** A descriptor of a file of its own, already removed, so what it refers to is unique. */
function ownFile(): { fd: number; was: string } {
  const path = Deno.makeTempFileSync({ prefix: "uexec-not-a-namespace-" });
  const fd = libc().open(cString(path), O.CLOEXEC);
  Deno.removeSync(path);
  assert.ok(fd >= 0, `open ${path}`);
  return { fd, was: `${path} (deleted)` };
}

Deno.test("egress gateway: a refusal in the namespace is reported once settled; opens that cannot be done reject", async () => {
  const holder = await namespaceHolder();
  const events: EgressEvent[] = [];
  const gateway = new EgressGateway({ allowPrivate: [], onConnection: (e) => events.push(e) });
  try {
    // Connections of uid 0 (this test's curl) are session 7's.
    const unregister = await gateway.register(0, { sessionId: 7, agent: "tester" });
    const listener = await gateway.open(holder.ns(), RULES);

    const curl = await new Deno.Command("nsenter", {
      args: [
        `--net=${holder.path}`,
        "curl",
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-x",
        "http://127.0.0.1:3128",
        "http://blocked.test/",
      ],
      stdout: "piped",
    }).output();
    assert.equal(new TextDecoder().decode(curl.stdout), "403");

    // The client read its answer and exited: after settle, its refusal is here.
    await gateway.settle();
    const refused = gateway.takeRefusals(7);
    assert.deepEqual(
      refused.map((r) => [r.session_id, r.agent, r.host, r.port, r.decision, r.rule]),
      [[7, "tester", "blocked.test", 80, "denied", "not-allowed"]],
    );
    assert.deepEqual(events, refused);
    assert.deepEqual(gateway.takeRefusals(7), [], "taken, not kept");

    // A second listener in the same namespace: the port is taken. Rejected, descriptor closed.
    const fd = holder.ns();
    const ns = target(fd);
    assert.match(ns ?? "", /^net:\[\d+\]$/);
    await assert.rejects(gateway.open(fd, RULES), (err: Error) => {
      assert.ok(err instanceof SandboxUnavailableError);
      assert.match(err.message, /^the egress proxy: cannot open its listener: .*AddrInUse/);
      return true;
    });
    assert.notEqual(target(fd), ns, "the namespace descriptor is closed");
    // A descriptor that is no namespace: setns fails.
    const notNs = ownFile();
    await assert.rejects(gateway.open(notNs.fd, RULES), SandboxUnavailableError);
    assert.notEqual(target(notNs.fd), notNs.was, "that descriptor is closed too");

    listener.close();
    unregister();
  } finally {
    gateway.close();
    await holder.close();
  }
  // Closed: nothing opens any more, the descriptor given is closed all the same.
  const late = ownFile();
  await assert.rejects(
    gateway.open(late.fd, RULES),
    /^SandboxUnavailableError: the egress proxy: the egress gateway is closed$/,
  );
  await assert.rejects(
    gateway.register(0, { sessionId: 8, agent: "tester" }),
    SandboxUnavailableError,
  );
  assert.notEqual(target(late.fd), late.was);
  await gateway.settle();
});
