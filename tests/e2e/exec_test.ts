/**
 * exec_command and write_stdin against a real server: real PTYs, real processes.
 *
 * @module
 */

import assert from "node:assert/strict";
import { startServer } from "../helpers/server.ts";
import { countTokens } from "gpt-tokenizer/encoding/o200k_base";

const CHUNK_ID = /^[0-9a-f]{32}$/;

Deno.test("exec_command and write_stdin", async (t) => {
  const server = await startServer({ UEXEC_TOKEN_UNUSED_SECRET: "hunter2", MY_API_KEY: "k" });
  const exec = (body: Record<string, unknown>) =>
    server.post("/v1/exec_command", { login: false, ...body });
  const write = (body: Record<string, unknown>) => server.post("/v1/write_stdin", body);

  await t.step("echo exits 0 with its output and no session id", async () => {
    const r = await exec({ cmd: "echo hi" });
    assert.equal(r.status, 200);
    assert.equal(r.body.output, "hi\r\n");
    assert.equal(r.body.exit_code, 0);
    assert.equal(r.body.session_id, undefined);
    assert.match(r.body.chunk_id, CHUNK_ID);
    assert.equal(r.body.original_token_count, countTokens("hi\r\n"));
    assert.equal(r.body.truncated, false);
    assert.equal(typeof r.body.wall_time_seconds, "number");
  });

  await t.step("a process that exits early returns before the deadline", async () => {
    const r = await exec({ cmd: "sleep 0.05", yield_time_ms: 30000 });
    assert.equal(r.body.exit_code, 0);
    assert.equal(r.body.session_id, undefined);
    assert.equal(r.body.output, "");
  });

  await t.step("cat keeps a session; writes echo; ^D ends it; later writes get 404", async () => {
    const r = await exec({ cmd: "cat", yield_time_ms: 250 });
    const id = r.body.session_id;
    assert.equal(typeof id, "number");
    assert.ok(id >= 1000 && id <= 99999);
    assert.equal(r.body.exit_code, undefined);
    const w = await write({ session_id: id, chars: "hello\n", until: "hello\\r\\n.*hello" });
    assert.equal(w.body.output, "hello\r\nhello\r\n");
    assert.equal(w.body.session_id, id);
    const end = await write({ session_id: id, chars: "\u0004", yield_time_ms: 5000 });
    assert.equal(end.body.exit_code, 0);
    assert.equal(end.body.session_id, undefined);
    const gone = await write({ session_id: id, chars: "x" });
    assert.equal(gone.status, 404);
    assert.deepEqual(gone.body, {
      error: { code: "unknown_session", message: `Unknown session id ${id}` },
    });
  });

  await t.step("bash -i keeps state across writes", async () => {
    const r = await exec({ cmd: "bash --norc -i", yield_time_ms: 250 });
    const id = r.body.session_id;
    await write({ session_id: id, chars: "export VAR=state-kept\n" });
    const w = await write({ session_id: id, chars: "echo $VAR\n", until: "state-kept\\r\\n" });
    assert.match(w.body.output, /^state-kept\r$/m);
    const bye = await write({ session_id: id, chars: "exit 5\n", yield_time_ms: 5000 });
    assert.equal(bye.body.exit_code, 5);
  });

  await t.step("two sessions are isolated", async () => {
    const a = await exec({ cmd: "bash --norc -i", yield_time_ms: 250 });
    await write({ session_id: a.body.session_id, chars: "export ISO=only-in-a\n" });
    const b = await exec({ cmd: 'echo "[$ISO]"' });
    assert.equal(b.body.output, "[]\r\n");
    const again = await write({
      session_id: a.body.session_id,
      chars: 'echo "[$ISO]"\n',
      until: "\\[only-in-a\\]",
    });
    assert.match(again.body.output, /\[only-in-a\]/);
    assert.equal((await server.del(`/v1/sessions/${a.body.session_id}`)).status, 200);
  });

  await t.step("a slow command yields a session and a later poll gets its output", async () => {
    const r = await exec({ cmd: "sleep 1; echo ready", yield_time_ms: 250 });
    assert.equal(r.body.output, "");
    assert.equal(typeof r.body.session_id, "number");
    const p = await write({ session_id: r.body.session_id, chars: "", yield_time_ms: 30000 });
    assert.equal(p.body.output, "ready\r\n");
    assert.equal(p.body.exit_code, 0);
  });

  await t.step(
    "a background job that keeps the terminal open does not hold back the exit",
    async () => {
      const r = await exec({
        cmd: "(trap '' HUP; exec sleep 2) & echo done",
        yield_time_ms: 30000,
      });
      assert.equal(r.body.output, "done\r\n");
      assert.equal(r.body.exit_code, 0);
      assert.equal(r.body.session_id, undefined);
    },
  );

  await t.step("exit codes and signal deaths are preserved", async () => {
    assert.equal((await exec({ cmd: "exit 17" })).body.exit_code, 17);
    assert.equal((await exec({ cmd: "exit 17", tty: false })).body.exit_code, 17);
    assert.equal((await exec({ cmd: "kill -TERM $$" })).body.exit_code, 128 + 15);
    assert.equal((await exec({ cmd: "kill -KILL $$", tty: false })).body.exit_code, 128 + 9);
  });

  await t.step("tty true and false are visible to the child", async () => {
    const yes = await exec({ cmd: "[ -t 0 ] && [ -t 1 ] && echo is-tty" });
    assert.equal(yes.body.output, "is-tty\r\n");
    const no = await exec({ cmd: "[ -t 0 ] || [ -t 1 ] || echo no-tty; echo err >&2", tty: false });
    assert.equal(no.body.output, "no-tty\nerr\n");
  });

  await t.step("pipes keep stdin open; ^D closes it and ^C interrupts", async () => {
    const r = await exec({ cmd: "cat", tty: false, yield_time_ms: 250 });
    const id = r.body.session_id;
    const w = await write({ session_id: id, chars: "piped\n", until: "piped\\n" });
    assert.equal(w.body.output, "piped\n");
    const end = await write({ session_id: id, chars: "\u0004", yield_time_ms: 5000 });
    assert.equal(end.body.exit_code, 0);
    const s = await exec({ cmd: "exec sleep 30", tty: false, yield_time_ms: 250 });
    const c = await write({ session_id: s.body.session_id, chars: "\u0003", yield_time_ms: 5000 });
    assert.equal(c.body.exit_code, 130);
  });

  await t.step("5000 lines over a 100-token budget keep head and tail", async () => {
    const r = await exec({
      cmd: 'for i in $(seq 1 5000); do echo "line $i"; done',
      max_output_tokens: 100,
      tty: false,
    });
    const full = Array.from({ length: 5000 }, (_, i) => `line ${i + 1}\n`).join("");
    assert.equal(r.body.exit_code, 0);
    assert.equal(r.body.truncated, true);
    assert.equal(r.body.original_token_count, countTokens(full));
    const m = /^Total output lines: 5000\n\n([\s\S]*)…(\d+) tokens truncated…([\s\S]*)$/.exec(
      r.body.output,
    );
    assert.ok(m, r.body.output);
    const [, head, cut, tail] = m;
    assert.ok(head.startsWith("line 1\nline 2\n"), head);
    assert.ok(tail.endsWith("line 4999\nline 5000\n"), tail);
    assert.ok(full.startsWith(head) && full.endsWith(tail));
    const kept = countTokens(head) + countTokens(tail);
    assert.ok(kept <= 100, `kept ${kept} tokens`);
    assert.equal(Number(cut), countTokens(full) - kept);
  });

  await t.step("a 160 KB burst followed by a marker still delivers the marker", async () => {
    const r = await exec({
      cmd: "head -c 160000 /dev/zero | tr '\\0' x; echo; echo TAIL-MARKER",
      yield_time_ms: 10000,
      max_output_tokens: 262144,
    });
    assert.equal(r.body.exit_code, 0);
    assert.ok(r.body.output.endsWith("\r\nTAIL-MARKER\r\n"));
    assert.equal(r.body.output.split("x").length - 1, 160000);
  });

  await t.step("split UTF-8, NUL and invalid bytes survive", async () => {
    const r = await exec({
      cmd: "printf 'a\\342\\202'; sleep 0.2; printf '\\254b\\000c\\377d\\n'",
      tty: false,
    });
    assert.equal(r.body.output, "a€b\u0000c\uFFFDd\n");
    const polled = await exec({
      cmd: "printf '\\360\\237'; sleep 1; printf '\\230\\200\\n'",
      yield_time_ms: 250,
    });
    assert.equal(polled.body.output, "");
    const rest = await write({
      session_id: polled.body.session_id,
      chars: "",
      yield_time_ms: 30000,
    });
    assert.equal(rest.body.output, "😀\r\n");
  });

  await t.step("resize is seen by stty size", async () => {
    const r = await exec({
      cmd: "stty size; read x; stty size",
      cols: 100,
      rows: 30,
      yield_time_ms: 250,
      until: "30 100",
    });
    assert.equal(r.body.output, "30 100\r\n");
    const id = r.body.session_id;
    assert.deepEqual(
      (await server.post(`/v1/sessions/${id}/resize`, { cols: 132, rows: 50 })).body,
      { ok: true },
    );
    const w = await write({ session_id: id, chars: "\n", yield_time_ms: 5000 });
    assert.equal(w.body.output, "\r\n50 132\r\n");
    assert.equal(w.body.exit_code, 0);
  });

  await t.step("until returns as soon as the output matches", async () => {
    const r = await exec({
      cmd: "echo first; read x; echo second",
      until: "fir.t",
      yield_time_ms: 30000,
    });
    assert.equal(r.body.output, "first\r\n");
    assert.equal(typeof r.body.session_id, "number");
    await server.del(`/v1/sessions/${r.body.session_id}`);
  });

  await t.step("until matches a character whose bytes arrive in separate reads", async () => {
    const r = await exec({
      cmd: "stty -echo; printf 'caf\\303'; read x; printf '\\251!\\n'; read y",
      until: "caf",
      yield_time_ms: 30000,
    });
    assert.equal(r.body.output, "caf");
    const id = r.body.session_id;
    const w = await write({ session_id: id, chars: "\n", until: "é!", yield_time_ms: 30000 });
    assert.equal(w.body.output, "é!\r\n");
    await server.del(`/v1/sessions/${id}`);
  });

  await t.step("output with special-token text comes back as text", async () => {
    const r = await exec({ cmd: "echo 'a <|endoftext|> b'" });
    assert.equal(r.status, 200);
    assert.equal(r.body.output, "a <|endoftext|> b\r\n");
    assert.equal(r.body.exit_code, 0);
  });

  await t.step("the base environment is scrubbed and forced", async () => {
    const r = await exec({
      cmd: "env | sort",
      tty: false,
      env: { EXTRA: "yes" },
    });
    const env = Object.fromEntries(
      r.body.output.trim().split("\n").map((l: string) => l.split(/=(.*)/s, 2)),
    );
    assert.equal(env.UEXEC_TOKEN_UNUSED_SECRET, undefined);
    assert.equal(env.MY_API_KEY, undefined);
    assert.equal(env.EXTRA, "yes");
    assert.equal(env.TERM, "dumb");
    assert.equal(env.NO_COLOR, "1");
    assert.equal(env.LC_ALL, "C.UTF-8");
    assert.equal(env.PAGER, "cat");
    assert.equal(env.GIT_PAGER, "cat");
    assert.equal(env.GH_PAGER, "cat");
    assert.equal(env.COLORTERM, "");
  });

  await t.step("Accept: text/plain gives Codex's text form", async () => {
    const r = await server.raw("/v1/exec_command", {
      method: "POST",
      headers: { accept: "text/plain", "content-type": "application/json" },
      body: JSON.stringify({ cmd: "echo text-form", login: false }),
    });
    assert.match(
      r.text,
      /^Chunk ID: [0-9a-f]{32}\nWall time: \d+\.\d{4} seconds\nProcess exited with code 0\nOriginal token count: \d+\nOutput:\ntext-form\r\n$/,
    );
  });

  await t.step("the text form says what else the JSON form does: input, denials", async () => {
    const text = async (body: Record<string, unknown>) =>
      (await server.raw("/v1/exec_command", {
        method: "POST",
        headers: { accept: "text/plain", "content-type": "application/json" },
        body: JSON.stringify({ login: false, yield_time_ms: 30_000, ...body }),
      })).text;
    const prompt = await text({
      cmd: "python3 -c 'import getpass; getpass.getpass()'",
      until_input: true,
    });
    assert.match(
      prompt,
      /\nProcess running with session ID \d+\nWaiting for input, echo off \(a password prompt\): do not type a secret you do not have\nOriginal token count: \d+\nOutput:\nPassword: $/,
    );
    const repl = await text({ cmd: "python3 -q", until_input: true });
    assert.match(repl, /\nWaiting for input\nOriginal token count/);
    const denied = await text({ cmd: "echo x > /etc/uexec-denied-test" });
    assert.match(
      denied,
      /\nProcess exited with code 1\nSandbox denied fs-write \/etc\/uexec-denied-test \(profile workspace-write\): .+\nOriginal token count/,
    );
  });

  const stopped = await server.stop();
  assert.equal(stopped.code, 0, stopped.stderr);
});
