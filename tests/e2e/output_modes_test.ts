/**
 * `output_mode` end to end, with real PTYs over real HTTP: `plain` (escape sequences removed,
 * carriage returns, backspaces and erase-in-line applied, state carried across calls, token
 * counts and truncation of the transformed text) and `screen` (a headless terminal emulator
 * per session: cursor addressing, resize, full-screen programs, lines scrolled off since the
 * last call, the `GET /v1/sessions/{id}/screen` route and who may reach it).
 *
 * @module
 */

import assert from "node:assert/strict";
import { countTokens } from "../../src/output/token_count.ts";
import { exists } from "../helpers/fs.ts";
import { startServer, type TestServer } from "../helpers/server.ts";

const SH = { login: false, yield_time_ms: 10_000 };

/** A session that is still running after its first call; returns its id and first result. */
async function live(server: TestServer, body: Record<string, unknown>) {
  const r = await server.post("/v1/exec_command", { ...SH, ...body });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(typeof r.body.session_id, "number", JSON.stringify(r.body));
  return { id: r.body.session_id as number, first: r.body };
}

Deno.test("output_mode plain: what a reader sees", async (t) => {
  const server = await startServer();
  const exec = (cmd: string, extra: Record<string, unknown> = {}) =>
    server.post("/v1/exec_command", { ...SH, cmd, output_mode: "plain", ...extra });

  await t.step("colours from printf and ls --color=always are removed", async () => {
    await Deno.mkdir(`${server.workspace}/sub`);
    await Deno.writeTextFile(`${server.workspace}/run.sh`, "true\n", { mode: 0o755 });
    const cmd = "printf '\\e[31mred\\e[0m\\n'; ls -1 --color=always";
    const env = { TERM: "xterm-256color" };
    const raw = await exec(cmd, { output_mode: "raw", env });
    assert.ok(raw.body.output.startsWith("\x1b[31mred\x1b[0m\r\n"), raw.body.output);
    assert.match(raw.body.output, new RegExp("\x1b\\[[0-9;]*m\\s*sub"));
    const plain = await exec(cmd, { env });
    assert.equal(plain.status, 200);
    assert.equal(plain.body.output, "red\nrun.sh\nsub\n");
    assert.equal(plain.body.exit_code, 0);
  });

  await t.step(
    "a progress bar redrawn 1,000 times leaves its last state; tokens of it",
    async () => {
      const cmd = "for i in $(seq 1 1000); do printf '\\rprogress %4d/1000' $i; done; echo";
      const raw = await exec(cmd, { output_mode: "raw" });
      const plain = await exec(cmd);
      assert.equal(plain.body.output, "progress 1000/1000\n");
      assert.equal(plain.body.original_token_count, countTokens("progress 1000/1000\n"));
      assert.equal(raw.body.original_token_count, countTokens(raw.body.output));
      assert.ok(raw.body.original_token_count > 100 * plain.body.original_token_count);
    },
  );

  await t.step("backspaces, erase-in-line and OSC title sequences", async () => {
    const r = await exec(
      "printf 'abc\\b\\bX\\n'; printf '\\e]0;my title\\aok\\e]2;other\\e\\\\!\\n'; " +
        "printf 'downloading\\r\\e[Kdone\\n'",
    );
    assert.equal(r.body.output, "aXc\nok!\ndone\n");
  });

  await t.step("truncation applies to the plain text", async () => {
    const cmd = "for i in $(seq 1 300); do printf '\\e[32mline %d\\e[0m\\n' $i; done";
    const r = await exec(cmd, { max_output_tokens: 40 });
    let all = "";
    for (let i = 1; i <= 300; i++) all += `line ${i}\n`;
    assert.equal(r.body.truncated, true);
    assert.equal(r.body.original_token_count, countTokens(all));
    assert.ok(r.body.output.startsWith("Total output lines: 300\n\nline 1\nline 2\n"));
    assert.ok(r.body.output.endsWith("line 299\nline 300\n"), r.body.output);
    assert.ok(!r.body.output.includes("\x1b"));
  });

  // Output cut between two calls: the first call ends at `firstUntil`, the second (after a line
  // typed) at `secondUntil`; each call's plain text is exact.
  for (
    const { name, cmd, firstUntil, first, secondUntil, second } of [
      {
        name: "an escape sequence split across two calls neither leaks nor is lost",
        cmd: "stty -echo; printf 'A\\e['; read x; printf '31mB\\e[0m\\n'; read y",
        firstUntil: "A\\x1b\\[$",
        first: "A",
        secondUntil: "B",
        second: "B\n",
      },
      {
        name: "a carriage return split across calls redraws the line",
        cmd: "stty -echo; printf 'old\\r'; read x; printf 'new\\n'; read y",
        firstUntil: "old\\r",
        first: "old",
        secondUntil: "new",
        second: "new\n",
      },
    ]
  ) {
    await t.step(name, async () => {
      const started = await live(server, { cmd, output_mode: "plain", until: firstUntil });
      assert.equal(started.first.output, first);
      const next = await server.post("/v1/write_stdin", {
        session_id: started.id,
        chars: "\n",
        output_mode: "plain",
        until: secondUntil,
        yield_time_ms: 10_000,
      });
      assert.equal(next.body.output, second);
      await server.del(`/v1/sessions/${started.id}`);
    });
  }

  await t.step("the HTTP default stays raw", async () => {
    const r = await server.post("/v1/exec_command", { ...SH, cmd: "printf '\\e[1mb\\e[0m'" });
    assert.equal(r.body.output, "\x1b[1mb\x1b[0m");
  });

  await server.stop();
});

Deno.test("output_mode screen: the terminal as a person sees it", async (t) => {
  const server = await startServer();

  await t.step("cursor addressing: X at row 4, column 9 (zero-based)", async () => {
    const { id, first } = await live(server, {
      cmd: "printf '\\e[2J\\e[5;10HX'; read x",
      output_mode: "screen",
      until: "X",
    });
    assert.deepEqual(first.screen, {
      rows: 24,
      cols: 80,
      cursor: { row: 4, col: 10 },
      lines: [...Array(4).fill(""), "         X", ...Array(19).fill("")],
      alternate: false,
    });
    assert.equal(first.output, "");
    const got = await server.get(`/v1/sessions/${id}/screen`);
    assert.equal(got.status, 200);
    assert.deepEqual(got.body, {
      session_id: id,
      ...first.screen,
      scrolled: [],
      scrolled_lost: false,
    });
    const info = await server.get(`/v1/sessions/${id}`);
    assert.equal(info.body.screen, true);
    await server.del(`/v1/sessions/${id}`);
  });

  await t.step("the text form shows the screen after the output", async () => {
    const res = await server.raw("/v1/exec_command", {
      method: "POST",
      headers: { "content-type": "application/json", accept: "text/plain" },
      body: JSON.stringify({ ...SH, cmd: "printf 'hi\\n'", output_mode: "screen", rows: 3 }),
    });
    assert.equal(res.status, 200);
    assert.ok(
      res.text.endsWith(
        "Output:\n\nScreen (3 rows, 80 columns, cursor at row 2, column 1):\nhi\n\n",
      ),
      res.text,
    );
  });

  await t.step("a resize reaches the program and the emulator", async () => {
    const { id } = await live(server, {
      cmd: "stty -echo; echo ready; read x; stty size; read y",
      screen: true,
      until: "ready",
    });
    const resized = await server.post(`/v1/sessions/${id}/resize`, { cols: 40, rows: 10 });
    assert.equal(resized.status, 200);
    const r = await server.post("/v1/write_stdin", {
      session_id: id,
      chars: "\n",
      output_mode: "screen",
      until: "10 40",
      yield_time_ms: 10_000,
    });
    assert.equal(r.body.screen.rows, 10);
    assert.equal(r.body.screen.cols, 40);
    assert.deepEqual(r.body.screen.lines, ["ready", "10 40", ...Array(8).fill("")]);
    assert.deepEqual(r.body.screen.cursor, { row: 2, col: 0 });
    await server.del(`/v1/sessions/${id}`);
  });

  await t.step("lines scrolled off since the last call come back in output", async () => {
    const { id, first } = await live(server, {
      cmd: "stty -echo; seq 1 12; read x; seq 13 15; read y",
      output_mode: "screen",
      rows: 5,
      until: "12\\r\\n",
    });
    assert.equal(first.output, "1\n2\n3\n4\n5\n6\n7\n8\n");
    assert.deepEqual(first.screen.lines, ["9", "10", "11", "12", ""]);
    const next = await server.post("/v1/write_stdin", {
      session_id: id,
      chars: "\n",
      output_mode: "screen",
      until: "15\\r\\n",
      yield_time_ms: 10_000,
    });
    assert.equal(next.body.output, "9\n10\n11\n");
    assert.deepEqual(next.body.screen.lines, ["12", "13", "14", "15", ""]);
    const again = await server.get(`/v1/sessions/${id}/screen`);
    assert.deepEqual(again.body.scrolled, []);
    await server.del(`/v1/sessions/${id}`);
  });

  await t.step("a full-screen program (less) on the alternate screen, then gone", async () => {
    await Deno.writeTextFile(`${server.workspace}/notes.txt`, "first line\nsecond line\n");
    const { id, first } = await live(server, {
      cmd: "less notes.txt",
      env: { TERM: "xterm-256color", LESS: "" },
      output_mode: "screen",
      rows: 6,
      until: "END",
    });
    assert.equal(first.screen.alternate, true);
    assert.deepEqual(first.screen.lines.slice(0, 3), [
      "first line",
      "second line",
      "notes.txt (END)",
    ]);
    assert.deepEqual(first.screen.cursor, { row: 2, col: 15 });
    const quit = await server.post("/v1/write_stdin", {
      session_id: id,
      chars: "q",
      output_mode: "screen",
      yield_time_ms: 10_000,
    });
    assert.equal(quit.body.exit_code, 0);
    assert.equal(quit.body.screen.alternate, false);
    assert.equal((await server.get(`/v1/sessions/${id}/screen`)).status, 404);
  });

  await t.step("every byte reaches the emulator even when no one polls", async () => {
    const { id } = await live(server, {
      cmd: "stty -echo; echo ready; read x; seq 1 20000; printf '\\e[2J\\e[HTOP'; read y",
      screen: true,
      until: "ready",
    });
    const r = await server.post("/v1/write_stdin", {
      session_id: id,
      chars: "\n",
      until: "TOP",
      yield_time_ms: 10_000,
    });
    assert.match(r.body.output, /20000\r\n/);
    const got = await server.get(`/v1/sessions/${id}/screen`);
    assert.equal(got.body.lines[0], "TOP");
    assert.deepEqual(got.body.cursor, { row: 0, col: 3 });
    assert.equal(got.body.scrolled_lost, true);
    assert.equal(got.body.scrolled.length, 1000);
    await server.del(`/v1/sessions/${id}`);
  });

  await t.step({
    name: "a screen session runs in the background while no call waits on it",
    ignore: !exists("/proc/self/autogroup"),
    fn: async () => {
      // Its process session's autogroup nice, as the kernel reports it: from the server's side
      // between calls, and from inside (the command reads its own) while a call waits.
      const nice = (text: string) => /nice (-?\d+)/.exec(text)?.[1];
      const cmd = "stty -echo; cat /proc/self/autogroup; echo ready; read x; " +
        "cat /proc/self/autogroup; echo done; read y";
      const screen = await live(server, { cmd, screen: true, until: "ready" });
      assert.equal(nice(screen.first.output), "0", "while its exec call waits");
      const { pid } = (await server.get(`/v1/sessions/${screen.id}`)).body;
      assert.equal(nice(Deno.readTextFileSync(`/proc/${pid}/autogroup`)), "19");
      const r = await server.post("/v1/write_stdin", {
        session_id: screen.id,
        chars: "\n",
        until: "done",
        yield_time_ms: 10_000,
      });
      assert.equal(nice(r.body.output), "0", "while a write call waits");
      assert.equal(nice(Deno.readTextFileSync(`/proc/${pid}/autogroup`)), "19");
      // A session without a screen is never moved to the background.
      const raw = await live(server, { cmd: "echo ready; read x", until: "ready" });
      const rawPid = (await server.get(`/v1/sessions/${raw.id}`)).body.pid;
      assert.equal(nice(Deno.readTextFileSync(`/proc/${rawPid}/autogroup`)), "0");
      await server.del(`/v1/sessions/${screen.id}`);
      await server.del(`/v1/sessions/${raw.id}`);
    },
  });

  await t.step("a flood faster than the emulator: no byte dropped, none out of order", async () => {
    let r = await server.post("/v1/exec_command", {
      ...SH,
      cmd: "seq 1 1000000",
      screen: true,
      yield_time_ms: 250,
      max_output_tokens: 100,
    });
    while (r.body.exit_code === undefined) {
      r = await server.post("/v1/write_stdin", {
        session_id: r.body.session_id,
        yield_time_ms: 30_000,
        max_output_tokens: 100,
      });
    }
    assert.equal(r.body.exit_code, 0);
    assert.ok(r.body.output.endsWith("999999\r\n1000000\r\n"), r.body.output.slice(-40));
  });

  await t.step("the last screen of a flood shows its last lines", async () => {
    const r = await server.post("/v1/exec_command", {
      ...SH,
      cmd: "seq 1 1000000",
      output_mode: "screen",
      yield_time_ms: 30_000,
      max_output_tokens: 10_000,
    });
    assert.equal(r.body.exit_code, 0);
    const expected = [];
    for (let i = 1000000 - 22; i <= 1000000; i++) expected.push(String(i));
    assert.deepEqual(r.body.screen.lines, [...expected, ""]);
    assert.ok(r.body.output.startsWith("…older lines scrolled past the scrollback…\n"));
    assert.ok(r.body.output.endsWith("999976\n999977\n"), r.body.output.slice(-40));
  });

  await server.stop();
});

Deno.test("screen: huge counts in control sequences stall no screen (fuzz finding)", async () => {
  const server = await startServer();
  try {
    // A bystander's screen, open before the flood: it must keep answering.
    const bystander = await live(server, {
      cmd: "printf 'calm'; read x",
      output_mode: "screen",
      until: "calm",
    });
    const r = await server.post("/v1/exec_command", {
      ...SH,
      cmd: "printf 'a\\e[999999999Lb\\n'; for i in 1 2 3; do printf 'x\\e[999999999b\\n'; done; " +
        "printf '\\e[999999999S\\e[999999999@\\e[999999999Mend'",
      output_mode: "screen",
      rows: 5,
      cols: 10,
    });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.exit_code, 0);
    assert.deepEqual(r.body.screen.lines, ["", "", "", "", "end"]);
    const other = await server.get(`/v1/sessions/${bystander.id}/screen`);
    assert.equal(other.status, 200);
    assert.equal(other.body.lines[0], "calm");
    await server.del(`/v1/sessions/${bystander.id}`);
  } finally {
    await server.stop();
  }
});

Deno.test("screen: a screen nobody waits on gives way to a call waiting elsewhere, and loses nothing", async () => {
  const server = await startServer();
  try {
    const cat = await live(server, { cmd: "cat", yield_time_ms: 200 });
    // A screen no call waits on starts a flood (its line is typed with no wait), and then a call
    // waits on the cat: meanwhile the screen is fed a read at a time, and at full pace after.
    const flood = await live(server, {
      cmd: "read go; seq 1 1000000",
      screen: true,
      yield_time_ms: 200,
    });
    const typed = await server.post("/v1/write_stdin", {
      session_id: flood.id,
      chars: "\n",
      yield_time_ms: 0,
    });
    assert.equal(typed.status, 200);
    // A line typed (an empty poll would wait at least 5 s), then the wait.
    const waited = await server.post("/v1/write_stdin", {
      session_id: cat.id,
      chars: "x\n",
      until: "never printed",
      yield_time_ms: 1000,
    });
    assert.equal(waited.status, 200);
    assert.equal(waited.body.session_id, cat.id, "the wait on the cat ran to its yield");
    const done = await server.post("/v1/write_stdin", {
      session_id: flood.id,
      chars: "",
      output_mode: "screen",
      yield_time_ms: 60_000,
      max_output_tokens: 100,
    });
    assert.equal(done.status, 200, JSON.stringify(done.body));
    assert.equal(done.body.exit_code, 0, "the flood finished once nothing waited elsewhere");
    const last = [];
    for (let i = 1000000 - 22; i <= 1000000; i++) last.push(String(i));
    assert.deepEqual(
      done.body.screen.lines,
      [...last, ""],
      "every byte reached the screen in order",
    );
  } finally {
    await server.stop();
  }
});

Deno.test("screen: who may look, and sessions without a screen", async (t) => {
  const server = await startServer();
  const minted = await server.operator.post("/v1/agents", { name: "agent-b" });
  const other = server.as(minted.body.token);
  const { id } = await live(server, {
    cmd: "printf 'mine'; read x",
    screen: true,
    until: "mine",
  });
  const path = `/v1/sessions/${id}/screen`;

  await t.step("the owning agent and the operator see it", async () => {
    for (const client of [server, server.operator]) {
      const r = await client.get(path);
      assert.equal(r.status, 200);
      assert.equal(r.body.lines[0], "mine");
    }
  });

  await t.step("another agent gets 404 as for a missing session", async () => {
    const r = await other.get(path);
    assert.equal(r.status, 404);
    assert.equal(r.body.error.code, "unknown_session");
    const w = await other.post("/v1/write_stdin", { session_id: id, output_mode: "screen" });
    assert.equal(w.status, 404);
  });

  await t.step("no token is 401, a foreign Origin 403", async () => {
    const anon = await server.raw(path, { headers: { authorization: "" } });
    assert.equal(anon.status, 401);
    const foreign = await server.get(path, { origin: "http://evil.example" });
    assert.equal(foreign.status, 403);
    assert.equal(foreign.body.error.code, "forbidden_origin");
  });

  await t.step("a session started without screen: true is 400 with what to do", async () => {
    const plain = await live(server, { cmd: "read x", yield_time_ms: 250 });
    const message = `screen: session ${plain.id} was started without screen: true, so no ` +
      "terminal emulator follows it; start it with screen: true, or use output_mode raw or plain";
    const r = await server.get(`/v1/sessions/${plain.id}/screen`);
    assert.equal(r.status, 400);
    assert.deepEqual(r.body.error, { code: "invalid_request", message });
    const w = await server.post("/v1/write_stdin", {
      session_id: plain.id,
      output_mode: "screen",
    });
    assert.equal(w.status, 400);
    assert.equal(w.body.error.message, message);
    assert.equal((await server.get(`/v1/sessions/${plain.id}`)).body.screen, false);
    await server.del(`/v1/sessions/${plain.id}`);
  });

  await t.step("screen needs a terminal: tty false is 400", async () => {
    for (const body of [{ screen: true }, { output_mode: "screen" }]) {
      const r = await server.post("/v1/exec_command", { ...SH, cmd: "true", tty: false, ...body });
      assert.equal(r.status, 400);
      assert.match(
        r.body.error.message,
        /^screen: a screen follows a terminal; it needs tty: true/,
      );
    }
  });

  await server.del(`/v1/sessions/${id}`);
  await server.stop();
});
