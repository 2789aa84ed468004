/**
 * Waits that end a call when there is something to do, over real HTTP and real PTYs:
 * `until_input` and the `waiting_for_input` / `input_echo` result fields (`read`, Python's
 * `input()`, `cat`, a password prompt; `sleep`, a busy loop, a program printing continuously),
 * `until_idle_ms` (output gone quiet), `until_port` (a process of the session listens), and the
 * validation of the three fields.
 *
 * @module
 */

import assert from "node:assert/strict";
import { startServer, type TestServer } from "../helpers/server.ts";

/** The yield of calls expected to end early: far beyond any wait they are meant to end on. */
const LONG_YIELD = 30_000;

async function exec(server: TestServer, body: Record<string, unknown>) {
  const r = await server.post("/v1/exec_command", { login: false, ...body });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body;
}

async function write(server: TestServer, body: Record<string, unknown>) {
  const r = await server.post("/v1/write_stdin", body);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body;
}

/** A TCP port nobody listens on now. */
function freePort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = l.addr as Deno.NetAddr;
  l.close();
  return port;
}

/**
 * Starts `body` with `until_input`, which must return before its yield at a read of the
 * terminal, having printed `output`, what is typed shown or not as `echo` says.
 */
async function untilInput(
  server: TestServer,
  body: Record<string, unknown>,
  output: string | RegExp,
  echo: boolean,
) {
  const r = await exec(server, { ...body, until_input: true, yield_time_ms: LONG_YIELD });
  if (typeof output === "string") assert.equal(r.output, output);
  else assert.match(r.output, output);
  assert.equal(r.waiting_for_input, true);
  assert.equal(r.input_echo, echo);
  assert.ok(r.wall_time_seconds < LONG_YIELD / 1000, "returned before its yield");
  return r;
}

/** Types `chars` into session `id`, then waits for `wait`: an `until` pattern, or `until_input`. */
function answer(
  server: TestServer,
  id: number,
  chars: string,
  wait: { until: string } | { until_input: true },
) {
  return write(server, { session_id: id, chars, ...wait, yield_time_ms: LONG_YIELD });
}

Deno.test("waits: until_input returns once the program reads the terminal", async (t) => {
  const server = await startServer();
  try {
    await t.step("the shell's read, then the answer is read", async () => {
      const cmd = "printf 'Continue? [y/N] '; read answer; echo \"got $answer\"; sleep 60";
      const r = await untilInput(server, { cmd }, "Continue? [y/N] ", true);
      const after = await answer(server, r.session_id, "y\n", { until: "got y\\r\\n" });
      assert.equal(after.output, "y\r\ngot y\r\n");
      await server.del(`/v1/sessions/${r.session_id}`);
    });
    await t.step("Python's input()", async () => {
      const cmd = 'python3 -c \'x = input("name? "); print("hi", x); input()\'';
      const r = await untilInput(server, { cmd }, "name? ", true);
      const after = await answer(server, r.session_id, "bob\n", { until_input: true });
      assert.equal(after.output, "bob\r\nhi bob\r\n");
      assert.equal(after.waiting_for_input, true);
      await server.del(`/v1/sessions/${r.session_id}`);
    });
    await t.step("Python's REPL, which waits in select() through readline", async () => {
      // readline's raw mode: the terminal's ECHO is off, and readline echoes what is typed.
      const r = await untilInput(server, { cmd: "python3 -q" }, ">>> ", true);
      const after = await answer(server, r.session_id, "6*7\n", { until_input: true });
      assert.equal(after.output, "6*7\r\n42\r\n>>> ");
      assert.equal(after.waiting_for_input, true);
      await server.del(`/v1/sessions/${r.session_id}`);
    });
    await t.step("Node's REPL, which waits in epoll_wait()", async () => {
      const body = { cmd: "node", env: { NODE_REPL_HISTORY: "" } };
      const r = await untilInput(server, body, /> $/, true);
      await server.del(`/v1/sessions/${r.session_id}`);
    });
    await t.step("cat, which prints nothing before it reads", async () => {
      const r = await untilInput(server, { cmd: "cat" }, "", true);
      const after = await answer(server, r.session_id, "hello\n", {
        until: "hello\\r\\nhello\\r\\n",
      });
      assert.equal(after.output, "hello\r\nhello\r\n");
      await server.del(`/v1/sessions/${r.session_id}`);
    });
    for (
      const [name, ask] of [
        [
          "a password prompt: waiting, with echo off",
          "read -s -p 'Password: ' pw; echo; echo \"length ${#pw}\"",
        ],
        [
          "a password prompt on /dev/tty (getpass, as sudo and ssh read)",
          "python3 -c 'import getpass; print(\"length\", len(getpass.getpass()))'",
        ],
      ]
    ) {
      await t.step(name, async () => {
        const r = await untilInput(server, { cmd: `${ask}; sleep 60` }, "Password: ", false);
        const after = await answer(server, r.session_id, "hunter2\n", {
          until: "length \\d+\\r\\n",
        });
        assert.equal(after.output, "\r\nlength 7\r\n");
        assert.equal(after.waiting_for_input, false);
        assert.equal(after.input_echo, true);
        await server.del(`/v1/sessions/${r.session_id}`);
      });
    }
  } finally {
    await server.stop();
  }
});

Deno.test("waits: programs that do not read are not waiting for input", async (t) => {
  const server = await startServer();
  try {
    const busy = {
      "sleep": "sleep 60",
      "a busy loop": "while :; do :; done",
      "a program printing continuously": "while :; do echo tick; sleep 0.01; done",
      "a reader of something else than the terminal": "mkfifo f && cat f",
    };
    for (const [name, cmd] of Object.entries(busy)) {
      await t.step(name, async () => {
        const r = await exec(server, { cmd, until_input: true, yield_time_ms: 1000 });
        assert.equal(typeof r.session_id, "number");
        assert.equal(r.waiting_for_input, false);
        assert.equal(r.input_echo, true);
        assert.ok(r.wall_time_seconds >= 1, "ran to its yield");
        await server.del(`/v1/sessions/${r.session_id}`);
      });
    }
    await t.step("pipe sessions carry no terminal fields and refuse until_input", async () => {
      const r = await exec(server, { cmd: "cat", tty: false, yield_time_ms: 250 });
      assert.equal(r.waiting_for_input, undefined);
      assert.equal(r.input_echo, undefined);
      const refused = await server.post("/v1/write_stdin", {
        session_id: r.session_id,
        chars: "",
        until_input: true,
      });
      assert.equal(refused.status, 400);
      assert.deepEqual(refused.body, {
        error: {
          code: "invalid_request",
          message:
            "until_input: only a terminal shows that a program waits for input; it needs tty: true",
        },
      });
      await server.del(`/v1/sessions/${r.session_id}`);
    });
  } finally {
    await server.stop();
  }
});

Deno.test("waits: until_idle_ms returns once output has been quiet that long", async (t) => {
  const server = await startServer();
  try {
    await t.step("a program that prints, then goes quiet", async () => {
      const r = await exec(server, {
        cmd: "for i in 1 2 3 4 5 6; do echo line $i; sleep 0.05; done; sleep 60",
        until_idle_ms: 1500,
        yield_time_ms: LONG_YIELD,
      });
      // Each line pushed the quiet timer back: all of them came before it ended the call.
      assert.equal(r.output, [1, 2, 3, 4, 5, 6].map((i) => `line ${i}\r\n`).join(""));
      assert.equal(typeof r.session_id, "number");
      assert.ok(r.wall_time_seconds < LONG_YIELD / 1000, "returned before its yield");
      await server.del(`/v1/sessions/${r.session_id}`);
    });
    await t.step("a poll of a quiet session", async () => {
      const r = await exec(server, { cmd: "sleep 60", yield_time_ms: 250 });
      const polled = await write(server, {
        session_id: r.session_id,
        chars: "",
        until_idle_ms: 300,
        yield_time_ms: 300_000,
      });
      assert.equal(polled.output, "");
      assert.ok(polled.wall_time_seconds < 300, "returned before its yield");
      await server.del(`/v1/sessions/${r.session_id}`);
    });
  } finally {
    await server.stop();
  }
});

Deno.test("waits: until_port returns once a process of the session listens", async (t) => {
  const server = await startServer();
  try {
    await t.step("a server that binds when told to", async () => {
      const port = freePort();
      const script = "import socket, sys, time\n" +
        "sys.stdin.readline()\n" +
        "s = socket.socket()\n" +
        `s.bind(("127.0.0.1", ${port}))\n` +
        "s.listen()\n" +
        "time.sleep(600)\n";
      const r = await exec(server, {
        cmd: `python3 -c '${script}'`,
        profile: "workspace-write-net",
        until_port: port,
        yield_time_ms: 1000,
      });
      assert.equal(typeof r.session_id, "number");
      assert.ok(r.wall_time_seconds >= 1, "nothing listened: it ran to its yield");
      const up = await write(server, {
        session_id: r.session_id,
        chars: "\n",
        until_port: port,
        yield_time_ms: LONG_YIELD,
      });
      assert.ok(up.wall_time_seconds < LONG_YIELD / 1000, "returned before its yield");
      const conn = await Deno.connect({ hostname: "127.0.0.1", port });
      conn.close();
      await server.del(`/v1/sessions/${r.session_id}`);
    });
    await t.step("a dev server", async () => {
      const port = freePort();
      const r = await exec(server, {
        cmd: `python3 -m http.server ${port} --bind 127.0.0.1`,
        profile: "workspace-write-net",
        until_port: port,
        yield_time_ms: LONG_YIELD,
      });
      assert.equal(typeof r.session_id, "number");
      assert.ok(r.wall_time_seconds < LONG_YIELD / 1000, "returned before its yield");
      const res = await fetch(`http://127.0.0.1:${port}/`);
      assert.equal(res.status, 200);
      await res.body?.cancel();
      await server.del(`/v1/sessions/${r.session_id}`);
    });
    await t.step("a listener of another process on that port does not count", async () => {
      const other = Deno.listen({ hostname: "127.0.0.1", port: 0 });
      try {
        const r = await exec(server, {
          cmd: "sleep 60",
          until_port: (other.addr as Deno.NetAddr).port,
          yield_time_ms: 1000,
        });
        assert.equal(typeof r.session_id, "number");
        assert.ok(r.wall_time_seconds >= 1, "ran to its yield");
        await server.del(`/v1/sessions/${r.session_id}`);
      } finally {
        other.close();
      }
    });
  } finally {
    await server.stop();
  }
});

Deno.test("waits: out-of-range wait fields are 400s naming the field", async (t) => {
  const server = await startServer();
  try {
    const bad: [Record<string, unknown>, string][] = [
      [{ until_idle_ms: 0 }, "until_idle_ms: Too small: expected number to be >=1"],
      [{ until_idle_ms: 300_001 }, "until_idle_ms: Too big: expected number to be <=300000"],
      [{ until_port: 0 }, "until_port: Too small: expected number to be >=1"],
      [{ until_port: 65536 }, "until_port: Too big: expected number to be <=65535"],
      [{ until_input: "yes" }, "until_input: Invalid input: expected boolean, received string"],
      [
        { until_input: true, tty: false },
        "until_input: only a terminal shows that a program waits for input; it needs tty: true",
      ],
    ];
    for (const [fields, message] of bad) {
      await t.step(JSON.stringify(fields), async () => {
        const r = await server.post("/v1/exec_command", { cmd: "true", ...fields });
        assert.equal(r.status, 400);
        assert.deepEqual(r.body, { error: { code: "invalid_request", message } });
      });
    }
  } finally {
    await server.stop();
  }
});
