/**
 * Containment that survives misbehaving clients and children (issue 11): resumable output
 * (offsets, `Last-Event-ID`, `gap`, `output?since`), idempotent `exec_command`, calls whose
 * client went away, bounded SSE lag and stdin queues, shutdown refusing new commands, and the
 * client's mistakes answered 4xx instead of 500. Each step failed on the main it was written on.
 *
 * @module
 */

import assert from "node:assert/strict";
import { DESCRIPTOR_RESERVE } from "../../src/sessions/start.ts";
import { fileLimit, limitFiles, limitLeaving, openFiles } from "../helpers/descriptors.ts";
import { startServer } from "../helpers/server.ts";
import { execLive } from "../helpers/sessions.ts";
import { connectSse, type SseEvent } from "../helpers/sse.ts";

/** Processes whose command line contains `marker` (zombies have none). */
function processesWith(marker: string): number[] {
  const found: number[] = [];
  for (const entry of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    try {
      const cmdline = Deno.readTextFileSync(`/proc/${entry.name}/cmdline`);
      if (cmdline.includes(marker)) found.push(Number(entry.name));
    } catch { /* gone */ }
  }
  return found;
}

const outputText = (events: SseEvent[]) =>
  events.filter((e) => e.event === "output").map((e) => e.data.text).join("");

Deno.test("robustness over HTTP", async (t) => {
  const server = await startServer({ UEXEC_MAX_SESSIONS: "20" });
  const write = (body: Record<string, unknown>) => server.post("/v1/write_stdin", body);

  await t.step("write_stdin to a session whose stdin is closed: 409 stdin_closed", async () => {
    const id = await execLive(server, "sleep 600", { tty: false });
    assert.equal((await write({ session_id: id, chars: "\u0004" })).status, 200);
    const r = await write({ session_id: id, chars: "more" });
    assert.equal(r.status, 409);
    assert.equal(r.body.error.code, "stdin_closed");
    assert.match(r.body.error.message, /^chars: stdin of this session is closed/);
    await server.del(`/v1/sessions/${id}`);
  });

  await t.step("input queued for a child that never reads is bounded: 429 stdin_full", async () => {
    const id = await execLive(server, "sleep 600", { tty: false });
    const chunk = "a".repeat(700_000);
    assert.equal((await write({ session_id: id, chars: chunk })).status, 200);
    const r = await write({ session_id: id, chars: chunk });
    assert.equal(r.status, 429);
    assert.equal(r.body.error.code, "stdin_full");
    assert.match(r.body.error.message, /^chars: the session is not reading its input: \d+ bytes/);
    assert.match(r.body.error.message, /limit of 1048576 bytes/);
    await server.del(`/v1/sessions/${id}`);
  });

  await t.step("signals named after Object.prototype members: 400", async () => {
    const id = await execLive(server, "sleep 600");
    for (const signal of ["toString", "constructor", "__proto__", "hasOwnProperty"]) {
      const r = await server.post(`/v1/sessions/${id}/signal`, { signal });
      assert.equal(r.status, 400, signal);
      assert.match(r.body.error.message, /^signal: unknown signal/);
    }
    await server.del(`/v1/sessions/${id}`);
  });

  await t.step("bodies cut off before their end: 400, never 5xx", async () => {
    const { hostname, port } = new URL(server.url);
    const head = `POST /v1/exec_command HTTP/1.1\r\nHost: ${hostname}:${port}\r\n` +
      `Authorization: Bearer ${server.agentToken}\r\nContent-Type: application/json\r\n`;
    for (
      const raw of [
        `${head}Transfer-Encoding: chunked\r\n\r\n5\r\n{"cmd\r\n`,
        `${head}Transfer-Encoding: chunked\r\n\r\nff\r\n{"cmd": "true"`,
        `${head}Content-Length: 100\r\n\r\n{"cmd":`,
      ]
    ) {
      const conn = await Deno.connect({ hostname, port: Number(port) });
      await conn.write(new TextEncoder().encode(raw));
      await conn.closeWrite();
      const reply = await new Response(conn.readable).text();
      assert.match(reply, /^HTTP\/1\.1 400 /, raw);
      assert.match(reply, /"body: the request body is malformed or was cut off/);
    }
  });

  await t.step("cmd or env too large for execve: 400 naming the field", async () => {
    const big = await server.post("/v1/exec_command", {
      cmd: "true",
      env: { BIG: "x".repeat(131_072) },
    });
    assert.equal(big.status, 400, JSON.stringify(big.body));
    assert.match(big.body.error.message, /^env\.BIG: 131077 bytes is too large for execve/);
    const wide = await server.post("/v1/exec_command", { cmd: `echo ${"€".repeat(50_000)}` });
    assert.equal(wide.status, 400, JSON.stringify(wide.body));
    assert.match(wide.body.error.message, /^cmd: 150006 bytes is too large for execve/);
  });

  await t.step("a call whose client went away leaves its output and exit", async () => {
    const [fifo, fifo2] = [`${server.workspace}/gate`, `${server.workspace}/gate1`];
    await new Deno.Command("mkfifo", { args: [fifo, fifo2] }).output();
    const events = await connectSse(`${server.url}/v1/events`, server.auth);
    const gone = new AbortController();
    const call = fetch(`${server.url}/v1/exec_command`, {
      method: "POST",
      signal: gone.signal,
      headers: { "content-type": "application/json", ...server.auth },
      body: JSON.stringify({
        cmd: `cat ${fifo2}; echo before; cat ${fifo}; echo after`,
        login: false,
        yield_time_ms: 30_000,
      }),
    }).catch((err) => err.name);
    const begun = await events.until((evs) => evs.some((e) => e.event === "begin"));
    const id = begun.find((e) => e.event === "begin")!.data.session_id;
    const stream = await connectSse(`${server.url}/v1/sessions/${id}/stream`, server.auth);
    await Deno.writeTextFile(fifo2, "");
    await stream.until((evs) => outputText(evs).includes("before"));
    gone.abort();
    assert.equal(await call, "AbortError");
    // The session goes on only once the server knows its caller left (else the call would take
    // the exit and answer a client that is gone): the stream says when.
    await events.until((evs) =>
      evs.some((e) => e.event === "abandoned" && e.data.session_id === id)
    );
    await Deno.writeTextFile(fifo, "opened\n");
    await stream.until((evs) => evs.some((e) => e.event === "exit"));
    const next = await write({ session_id: id, chars: "", yield_time_ms: 30_000 });
    assert.equal(next.status, 200, JSON.stringify(next.body));
    assert.equal(next.body.output, "before\r\nopened\r\nafter\r\n");
    assert.equal(next.body.exit_code, 0);
    await stream.close();
    await events.close();
  });

  await t.step("output events carry byte offsets; Last-Event-ID resumes exactly", async () => {
    const id = await execLive(server, "cat", { tty: false });
    const first = await connectSse(`${server.url}/v1/sessions/${id}/stream`, server.auth);
    await write({ session_id: id, chars: "one\n", until: "one" });
    await write({ session_id: id, chars: "two\n", until: "two" });
    const got = await first.until((evs) => outputText(evs) === "one\ntwo\n");
    assert.equal(got.at(-1)!.id, "8");
    await first.close();
    const resumed = await connectSse(`${server.url}/v1/sessions/${id}/stream`, {
      ...server.auth,
      "last-event-id": "4",
    });
    await write({ session_id: id, chars: "three\n", until: "three" });
    const again = await resumed.until((evs) => outputText(evs).includes("three"));
    assert.deepEqual(again.map((e) => [e.event, e.id, e.data.text]), [
      ["output", "8", "two\n"],
      ["output", "14", "three\n"],
    ]);
    await resumed.close();
    const past = await server.get(`/v1/sessions/${id}/stream`, { "last-event-id": "15" });
    assert.equal(past.status, 400);
    assert.match(
      past.body.error.message,
      /^Last-Event-ID: offset 15 is past the end of the output \(14\)$/,
    );
    // One spelling of a number only (fuzz finding: Number() takes all of these).
    // (fetch trims a header's spaces: those spellings are tried in the query only.)
    for (const spelling of ["0x4", "+4", " 4", "4 ", "4e0", "04", "4.0", "", "-0"]) {
      if (spelling.trim() === spelling && spelling !== "") {
        const header = await server.get(`/v1/sessions/${id}/stream`, {
          "last-event-id": spelling,
        });
        assert.equal(header.status, 400, JSON.stringify(spelling));
        assert.match(header.body.error.message, /^Last-Event-ID: must be a byte offset/);
      }
      const query = await server.get(
        `/v1/sessions/${id}/output?since=${encodeURIComponent(spelling)}`,
      );
      assert.equal(query.status, 400, JSON.stringify(spelling));
      assert.match(query.body.error.message, /^since: must be a byte offset/);
    }
    for (const path of [`+${id}`, `0x${id.toString(16)}`, `${id}e0`, `%20${id}`, `0${id}`]) {
      assert.equal((await server.get(`/v1/sessions/${path}`)).status, 400, path);
      assert.equal((await server.get(`/v1/sessions/${path}/output`)).status, 400, path);
    }
    await server.del(`/v1/sessions/${id}`);
  });

  await t.step("resuming from bytes no longer held: one gap event, then what follows", async () => {
    const id = await execLive(
      server,
      "head -c 3000000 /dev/zero | tr '\\0' x; echo; echo done; read x",
      { tty: false, until: "done", max_output_tokens: 16 },
    );
    const held = await server.get(`/v1/sessions/${id}/output?since=0`);
    const end = held.body.end;
    assert.equal(end, 3_000_006);
    assert.equal(held.body.lost_bytes, end - 1024 * 1024);
    const stream = await connectSse(`${server.url}/v1/sessions/${id}/stream`, {
      ...server.auth,
      "last-event-id": "0",
    });
    await server.del(`/v1/sessions/${id}`);
    const got = await stream.until((evs) => evs.some((e) => e.event === "exit"));
    assert.equal(got[0].event, "gap");
    assert.deepEqual(got[0].data, { bytes: end - 1024 * 1024 });
    assert.equal(got.filter((e) => e.event === "gap").length, 1);
    assert.equal(outputText(got).length, 1024 * 1024);
    assert.ok(outputText(got).endsWith("x\ndone\n"));
    await stream.close();
  });

  await t.step("as text, a gap counts the character it cut: every byte accounted for", async () => {
    // "xx" then 600,000 two-byte characters: the 1 MiB ring begins inside one of them.
    const id = await execLive(
      server,
      "printf xx; python3 -c \"import sys; sys.stdout.write('\\u00e9' * 600000)\"; echo; echo fin; read x",
      { tty: false, until: "fin", max_output_tokens: 16 },
    );
    const end = (await server.get(`/v1/sessions/${id}/output?since=0`)).body.end;
    assert.equal(end, 2 + 1_200_000 + 5);
    const ringStart = end - 1024 * 1024;
    assert.equal((ringStart - 2) % 2, 1, "the ring begins on a continuation byte");
    const stream = await connectSse(`${server.url}/v1/sessions/${id}/stream`, {
      ...server.auth,
      "last-event-id": "0",
    });
    await server.del(`/v1/sessions/${id}`);
    const got = await stream.until((evs) => evs.some((e) => e.event === "exit"));
    await stream.close();
    assert.equal(got[0].event, "gap");
    assert.deepEqual(got[0].data, { bytes: ringStart + 1 });
    assert.equal(got[0].id, String(ringStart + 1));
    const text = outputText(got);
    assert.ok(!text.includes("\ufffd"), "no character decoded from a part");
    assert.equal(Number(got[0].id) + new TextEncoder().encode(text).length, end);
    const outputs = got.filter((e) => e.event === "output");
    assert.equal(outputs.at(-1)!.id, String(end));
  });

  await t.step("GET output?since=N reads the history without taking it", async () => {
    const id = await execLive(server, "echo one; read x; echo two; read y", {
      tty: false,
      until: "one",
    });
    const stream = await connectSse(`${server.url}/v1/sessions/${id}/stream`, server.auth);
    // `^` matches at once: the call returns before "two" is printed, taking nothing.
    await write({ session_id: id, chars: "\n", until: "^" });
    await stream.until((evs) => outputText(evs).includes("two"));
    const r = await server.get(`/v1/sessions/${id}/output?since=4`);
    assert.deepEqual(r.body, {
      session_id: id,
      since: 4,
      lost_bytes: 0,
      end: 8,
      output: "two\n",
      exited: false,
    });
    const all = await server.get(`/v1/sessions/${id}/output?since=0&encoding=base64`);
    assert.equal(atob(all.body.base64), "one\ntwo\n");
    const pending = await write({ session_id: id, chars: "", until: "two" });
    assert.equal(pending.body.output, "two\n");
    for (const since of ["-1", "x", "1.5", "9", ""]) {
      const bad = await server.get(`/v1/sessions/${id}/output?since=${since}`);
      assert.equal(bad.status, 400, since);
      assert.match(bad.body.error.message, /^since: /);
    }
    await stream.close();
    await server.del(`/v1/sessions/${id}`);
  });

  await t.step("a slow SSE client falls behind into gap events, not server memory", async () => {
    const total = 32 * 1024 * 1024;
    const id = await execLive(server, "read go; head -c 33554432 /dev/zero | tr '\\0' x", {
      tty: false,
    });
    const res = await fetch(`${server.url}/v1/sessions/${id}/stream`, { headers: server.auth });
    const done = await write({
      session_id: id,
      chars: "\n",
      yield_time_ms: 30_000,
      max_output_tokens: 16,
    });
    assert.equal(done.body.exit_code, 0);
    let received = 0;
    let lost = 0;
    let gaps = 0;
    let name = "";
    const lines = res.body!.pipeThrough(new TextDecoderStream());
    let buffered = "";
    for await (const piece of lines) {
      buffered += piece;
      const parts = buffered.split("\n");
      buffered = parts.pop()!;
      for (const line of parts) {
        if (line.startsWith("event: ")) name = line.slice(7);
        if (!line.startsWith("data: ")) continue;
        const data = JSON.parse(line.slice(6));
        if (name === "output") received += data.text.length;
        if (name === "gap") (lost += data.bytes, gaps++);
      }
    }
    assert.ok(gaps >= 1, "no gap event");
    assert.equal(received + lost, total);
  });

  await t.step("Idempotency-Key: a repeat starts nothing and gets the first answer", async () => {
    const cmd = "echo run >> runs.txt; wc -l < runs.txt";
    const body = { cmd, login: false, tty: false };
    const key = { "idempotency-key": "key-1" };
    const first = await server.post("/v1/exec_command", body, key);
    assert.equal(first.body.output, "1\n");
    const repeat = await server.post("/v1/exec_command", body, key);
    assert.deepEqual(repeat.body, first.body);
    const other = await server.post("/v1/exec_command", { ...body, tty: true }, key);
    assert.equal(other.status, 422);
    assert.equal(other.body.error.code, "idempotency_conflict");
    assert.match(other.body.error.message, /^Idempotency-Key: key-1 was used with a different/);
    const bad = await server.post("/v1/exec_command", body, { "idempotency-key": "a b" });
    assert.equal(bad.status, 400);
    const minted = await server.operator.post("/v1/agents", { name: "second" });
    const second = await server.as(minted.body.token).post("/v1/exec_command", body, key);
    assert.equal(second.body.output, "2\n");
    assert.equal(Deno.readTextFileSync(`${server.workspace}/runs.txt`), "run\nrun\n");
  });

  await t.step("Idempotency-Key: a repeat while the first runs waits for its answer", async () => {
    const fifo = `${server.workspace}/gate2`;
    await new Deno.Command("mkfifo", { args: [fifo] }).output();
    const events = await connectSse(`${server.url}/v1/events`, server.auth);
    const body = {
      cmd: `echo go >> runs2.txt; cat ${fifo}`,
      login: false,
      tty: false,
      yield_time_ms: 30_000,
    };
    const key = { "idempotency-key": "key-2" };
    const first = server.post("/v1/exec_command", body, key);
    await events.until((evs) => evs.some((e) => e.event === "begin"));
    const repeat = server.post("/v1/exec_command", body, key);
    await Deno.writeTextFile(fifo, "released\n");
    const [a, b] = await Promise.all([first, repeat]);
    assert.equal(a.body.output, "released\n");
    assert.deepEqual(b.body, a.body);
    assert.equal(Deno.readTextFileSync(`${server.workspace}/runs2.txt`), "go\n");
    await events.close();
  });

  await t.step("the server is healthy after all of it", async () => {
    const r = await server.post("/v1/exec_command", { cmd: "echo fine", login: false });
    assert.equal(r.body.output, "fine\r\n");
  });

  await server.stop();
});

Deno.test("shutdown: exec refused with 503 once it begins, nothing it started survives", async () => {
  const server = await startServer();
  const marker = `611.${Math.floor(Math.random() * 1e6)}`;
  const events = await connectSse(`${server.url}/v1/events`, server.auth);
  // One session holds shutdown for its kill grace; the other ends at once and says so.
  await execLive(server, "trap '' HUP TERM; echo trapped; sleep 600", { until: "trapped" });
  const quick = await execLive(server, "sleep 600");
  Deno.kill(server.pid, "SIGTERM");
  await events.until((evs) =>
    evs.some((e) =>
      e.event === "end" && e.data.session_id === quick && e.data.reason === "shutdown"
    )
  );
  const answers = await Promise.all(
    Array.from(
      { length: 5 },
      () =>
        server.post("/v1/exec_command", { cmd: `sleep ${marker}`, login: false })
          .then((r) => r.status === 503 ? r.body.error.code : JSON.stringify(r.body))
          .catch(() => "connection closed"),
    ),
  );
  await events.close().catch(() => {});
  const stopped = await server.stop();
  assert.equal(stopped.code, 0, stopped.stderr);
  assert.ok(answers.includes("shutting_down"), JSON.stringify(answers));
  for (const a of answers) assert.ok(["shutting_down", "connection closed"].includes(a), a);
  assert.deepEqual(processesWith(marker), []);
});

Deno.test("out of file descriptors: 503 out_of_resources, the server lives and recovers", async () => {
  const server = await startServer({ UEXEC_MAX_SESSIONS: "1000" }, [], 160);
  try {
    const ids: number[] = [];
    let refused;
    for (let i = 0; i < 200 && !refused; i++) {
      const r = await server.post("/v1/exec_command", {
        cmd: "sleep 600",
        login: false,
        until: "^", // answered at once
        tty: i % 2 === 0,
      });
      if (r.status === 200) ids.push(r.body.session_id);
      else refused = r;
    }
    assert.ok(refused, "never ran out of descriptors");
    assert.equal(refused.status, 503, JSON.stringify(refused.body));
    assert.equal(refused.body.error.code, "out_of_resources");
    // At the limit every answer is an exit or the same 503 (a start may find the few
    // descriptors a refused one gave back, with the cgroups made ahead of it), never a crash.
    for (let i = 0; i < 4; i++) {
      const again = await server.post("/v1/exec_command", { cmd: "true", tty: i % 2 === 0 });
      if (again.status === 200) assert.equal(again.body.exit_code, 0, JSON.stringify(again.body));
      else assert.equal(again.body.error?.code, "out_of_resources", JSON.stringify(again.body));
    }
    const health = await server.get("/healthz");
    assert.equal(health.status, 200);
    // One at a time, on the open connection: while descriptors are exhausted, a new connection
    // cannot be accepted (the listener is not this test's subject).
    for (const id of ids) assert.equal((await server.del(`/v1/sessions/${id}`)).status, 200);
    // Spare cgroups (made ahead, or kept from the deleted sessions) hold open files only to save
    // a start time: when descriptors are short they go first. Make sure the reserve is spent (a
    // start finds no descriptor free, even without the spares), then leave the server too few to
    // start while it keeps its spares (where their numbers allow) and enough once it drops them.
    const others = (cgroup: boolean) => !cgroup;
    await limitFiles(server.pid, limitLeaving(openFiles(server.pid), 0, others));
    const none = await server.post("/v1/exec_command", { cmd: "true" });
    assert.equal(none.body.error?.code, "out_of_resources", JSON.stringify(none.body));
    const open = openFiles(server.pid);
    const kept = limitLeaving(open, 2 * DESCRIPTOR_RESERVE - 1, () => true);
    const dropped = limitLeaving(open, 3 * DESCRIPTOR_RESERVE, others);
    await limitFiles(server.pid, Math.max(kept, dropped));
    const after = await server.post("/v1/exec_command", { cmd: "echo recovered", login: false });
    assert.equal(after.body.output, "recovered\r\n", JSON.stringify(after.body));
    const client = Deno.createHttpClient({});
    const fresh = await fetch(`${server.url}/healthz`, { client });
    assert.equal(fresh.status, 200);
    await fresh.body?.cancel();
    client.close();
    const stopped = await server.stop();
    assert.equal(stopped.code, 0, stopped.stderr);
  } finally {
    await server.stop();
  }
});

Deno.test({
  name: "out of pseudo-terminals: 503 out_of_resources; pipes still start",
  // The server runs in a mount namespace of its own whose /dev/pts is a devpts instance with room
  // for one terminal, which the wrapper holds: no terminal is left for the server, and nothing
  // else on the host is touched (lowering kernel.pty.max would starve every other server too).
  // Making the namespace needs root.
  ignore: Deno.uid() !== 0,
  fn: async () => {
    const wrapper = [
      "unshare",
      "--mount",
      "--propagation",
      "private",
      "sh",
      "-c",
      "mount -t devpts -o newinstance,ptmxmode=0666,max=1 devpts /dev/pts && " +
      'mount --bind /dev/pts/ptmx /dev/ptmx && exec 9<>/dev/ptmx && exec "$@"',
      "sh",
    ];
    const server = await startServer({}, [], undefined, "main.ts", wrapper);
    try {
      const r = await server.post("/v1/exec_command", { cmd: "echo hi", login: false });
      assert.equal(r.status, 503, JSON.stringify(r.body));
      assert.equal(r.body.error.code, "out_of_resources");
      assert.match(r.body.error.message, /pseudo-terminal.*kernel\.pty\.max.*tty: false/);
      const piped = await server.post("/v1/exec_command", {
        cmd: "echo hi",
        login: false,
        tty: false,
      });
      assert.equal(piped.body.output, "hi\n", JSON.stringify(piped.body));
      assert.equal((await server.get("/healthz")).status, 200);
      const stopped = await server.stop();
      assert.equal(stopped.code, 0, stopped.stderr);
    } finally {
      await server.stop();
    }
  },
});

Deno.test("a start that needs a new worker or domain with no descriptor free is 503, not a crash", async (t) => {
  const server = await startServer();
  const limit = fileLimit(server.pid);
  /**
   * `req` answers 503 naming `why` with no descriptor free (after `meanwhile`, run once none is),
   * and runs once they are back.
   */
  const refusedUntilFreed = async (
    req: Record<string, unknown>,
    why: RegExp,
    meanwhile?: () => Promise<void>,
  ) => {
    await limitFiles(server.pid, limitLeaving(openFiles(server.pid), 0, () => true));
    await meanwhile?.();
    const refused = await server.post("/v1/exec_command", req);
    assert.equal(refused.status, 503, JSON.stringify(refused.body));
    assert.equal(refused.body.error.code, "out_of_resources");
    assert.match(refused.body.error.message, why);
    assert.equal((await server.get("/healthz")).status, 200);
    await limitFiles(server.pid, limit);
    assert.equal((await server.post("/v1/exec_command", req)).body.output, "ok\r\n");
  };
  try {
    const warm = await server.post("/v1/exec_command", { cmd: "echo a", login: false });
    assert.equal(warm.body.output, "a\r\n");

    await t.step("a new worker for a domain that exists", async () => {
      // A `.git` that appeared is read-only from now on: the domain gets a new spawner worker,
      // started now. (Deno aborted the whole server when its runtime found no descriptor.)
      await Deno.mkdir(`${server.workspace}/.git`);
      // Refused where the first descriptor was missing: the worker (EMFILE) or, before it, the
      // terminal slots it makes (the server's own out-of-descriptors answer).
      await refusedUntilFreed(
        { cmd: "echo ok", login: false },
        /EMFILE|the server is out of file descriptors/,
      );
    });

    await t.step("a new domain (its account files, then its worker)", async () => {
      const other = { cmd: "echo ok", login: false, profile: "read-only" };
      await refusedUntilFreed(other, /EMFILE|Too many open files/);
    });

    await t.step("a .git that appears while no descriptor is free", async () => {
      // Whichever runs out first, the guard's look at it (tests/unit/sandbox/git_guard) or the
      // start itself, the start is refused as the server's shortage (503), and it runs once
      // descriptors are back.
      await Deno.remove(`${server.workspace}/.git`);
      await refusedUntilFreed(
        { cmd: "echo ok", login: false },
        /EMFILE|the server is out of file descriptors/,
        () => Deno.mkdir(`${server.workspace}/.git`),
      );
    });
  } finally {
    await server.stop();
  }
  const stopped = await server.stop(); // the same answer: it lived to stop cleanly
  assert.equal(stopped.code, 0, stopped.stderr.slice(-2000));
});

Deno.test("faults from outside: a SIGKILLed child, a child that closes its terminal", async (t) => {
  const server = await startServer();

  await t.step("a child SIGKILLed from outside reports exit 137 once", async () => {
    const id = await execLive(server, "echo up; sleep 600", { until: "up" });
    const pid = (await server.get(`/v1/sessions/${id}`)).body.pid;
    Deno.kill(pid, "SIGKILL");
    const r = await server.post("/v1/write_stdin", {
      session_id: id,
      chars: "",
      yield_time_ms: 30_000,
    });
    assert.deepEqual([r.body.output, r.body.exit_code], ["", 137]);
    assert.equal((await server.get(`/v1/sessions/${id}`)).status, 404);
  });

  await t.step(
    "a child that closes its terminal but keeps running stays a live session",
    async () => {
      const id = await execLive(server, "echo closing; exec 0<&- 1>&- 2>&-; sleep 600", {
        until: "closing",
      });
      const polled = await server.post("/v1/write_stdin", {
        session_id: id,
        chars: "",
        yield_time_ms: 5000,
      });
      assert.equal(polled.body.session_id, id, JSON.stringify(polled.body));
      assert.equal(polled.body.exit_code, undefined);
      const killed = await server.del(`/v1/sessions/${id}`);
      assert.equal(killed.status, 200);
      assert.equal(killed.body.exit_code, 128 + 1);
    },
  );

  await server.stop();
});
