/**
 * The HTTP contract around the two tools: validation errors, auth, the sessions routes,
 * killing, pruning, the session limit, SSE streams and lifecycle events, and the tool list.
 *
 * @module
 */

import assert from "node:assert/strict";
import { startServer } from "../helpers/server.ts";
import { execLive } from "../helpers/sessions.ts";
import { connectSse } from "../helpers/sse.ts";
import { alive } from "../helpers/procs.ts";

function invalid(message: string) {
  return { error: { code: "invalid_request", message } };
}

Deno.test("request validation and error codes", async (t) => {
  const server = await startServer({ UEXEC_MAX_SESSIONS: "2" });
  const exec = (body: unknown) => server.post("/v1/exec_command", body);

  await t.step(
    "malformed JSON, wrong types, negatives, unknown fields: 400 naming the field",
    async () => {
      assert.deepEqual((await exec("{not json")).body, invalid("body: malformed JSON"));
      assert.deepEqual(
        (await exec({ cmd: 5 })).body,
        invalid("cmd: Invalid input: expected string, received number"),
      );
      assert.deepEqual(
        (await exec({ cmd: "" })).body,
        invalid("cmd: Too small: expected string to have >=1 characters"),
      );
      assert.deepEqual(
        (await exec({ cmd: "true", yield_time_ms: -1 })).body,
        invalid("yield_time_ms: Too small: expected number to be >=0"),
      );
      assert.deepEqual(
        (await exec({ cmd: "true", max_output_tokens: 0 })).body,
        invalid("max_output_tokens: Too small: expected number to be >=1"),
      );
      assert.deepEqual(
        (await exec({ cmd: "true", cols: 1001 })).body,
        invalid("cols: Too big: expected number to be <=1000"),
      );
      assert.deepEqual(
        (await exec({ cmd: "true", bogus: 1 })).body,
        invalid('Unrecognized key: "bogus"'),
      );
      assert.deepEqual((await exec({ cmd: "x".repeat(65537) })).status, 400);
      assert.deepEqual(
        (await exec({ cmd: "true", env: { "A=B": "x" } })).body.error.code,
        "invalid_request",
      );
      assert.deepEqual(
        (await exec([1, 2])).body,
        invalid("Invalid input: expected object, received array"),
      );
    },
  );

  await t.step("invalid until regex, bad workdir, missing shell: 400", async () => {
    const r = await exec({ cmd: "true", until: "(" });
    assert.equal(r.status, 400);
    assert.match(r.body.error.message, /^until: invalid regular expression: /);
    assert.deepEqual(
      (await exec({ cmd: "true", workdir: "/nonexistent/dir" })).body,
      invalid("workdir: /nonexistent/dir does not exist"),
    );
    assert.deepEqual(
      (await exec({ cmd: "true", workdir: "/etc/hostname" })).body,
      invalid("workdir: /etc/hostname is not a directory"),
    );
    assert.deepEqual(
      (await exec({ cmd: "true", shell: "/no/such/shell" })).body,
      invalid("shell: cannot start /no/such/shell: ENOENT"),
    );
  });

  await t.step("a relative workdir resolves against the workspace", async () => {
    await Deno.mkdir(`${server.workspace}/src`);
    const r = await exec({ cmd: "pwd", workdir: "src", login: false, tty: false });
    assert.equal(r.body.output, `${server.workspace}/src\n`, JSON.stringify(r.body));
  });

  await t.step("write_stdin validation", async () => {
    const w = await server.post("/v1/write_stdin", { chars: "x" });
    assert.deepEqual(
      w.body,
      invalid("session_id: Invalid input: expected number, received undefined"),
    );
    const neg = await server.post("/v1/write_stdin", { session_id: -4 });
    assert.deepEqual(neg.body, invalid("session_id: Too small: expected number to be >=0"));
  });

  await t.step("unknown sessions: 404 on every session route", async () => {
    const expected = { error: { code: "unknown_session", message: "Unknown session id 4242" } };
    for (
      const r of [
        await server.post("/v1/write_stdin", { session_id: 4242, chars: "" }),
        await server.get("/v1/sessions/4242"),
        await server.del("/v1/sessions/4242"),
        await server.post("/v1/sessions/4242/resize", { cols: 10, rows: 10 }),
        await server.post("/v1/sessions/4242/signal", { signal: "SIGINT" }),
        await server.get("/v1/sessions/4242/stream"),
      ]
    ) {
      assert.equal(r.status, 404);
      assert.deepEqual(r.body, expected);
    }
    assert.deepEqual(
      (await server.get("/v1/sessions/abc")).body,
      invalid("id: must be a whole number in plain decimal"),
    );
  });

  await t.step("bodies over 1 MiB: 413", async () => {
    const r = await exec({ cmd: "x".repeat(1024 * 1024 + 10) });
    assert.equal(r.status, 413);
    assert.deepEqual(r.body, {
      error: { code: "payload_too_large", message: "request body exceeds 1 MiB" },
    });
    // A streamed (chunked) body has no content-length: it is counted as it arrives.
    const chunked = await server.raw("/v1/exec_command", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: ReadableStream.from([
        new TextEncoder().encode(`{"cmd":"${"x".repeat(700_000)}`),
        new TextEncoder().encode(`${"x".repeat(700_000)}"}`),
      ]),
    });
    assert.equal(chunked.status, 413);
    assert.deepEqual(JSON.parse(chunked.text), {
      error: { code: "payload_too_large", message: "request body exceeds 1 MiB" },
    });
  });

  await t.step("a full store whose sessions are all recent: 429", async () => {
    const a = await execLive(server, "cat");
    const b = await execLive(server, "cat");
    const r = await exec({ cmd: "true" });
    assert.equal(r.status, 429);
    assert.equal(r.body.error.code, "session_limit");
    await server.del(`/v1/sessions/${a}`);
    assert.equal((await exec({ cmd: "echo room", login: false })).body.output, "room\r\n");
    await server.del(`/v1/sessions/${b}`);
  });

  await t.step("bad signal names and non-tty resize: 400", async () => {
    const id = await execLive(server, "cat", { tty: false });
    const sig = await server.post(`/v1/sessions/${id}/signal`, { signal: "SIGFOO" });
    assert.equal(sig.status, 400);
    assert.match(
      sig.body.error.message,
      /^signal: unknown signal "SIGFOO"; use one of SIGHUP, SIGINT/,
    );
    assert.deepEqual(
      (await server.post(`/v1/sessions/${id}/resize`, { cols: 10, rows: 10 })).body,
      invalid("session is not a tty; it cannot be resized"),
    );
    await server.del(`/v1/sessions/${id}`);
  });

  await t.step("unknown routes: 404 not_found", async () => {
    const r = await server.get("/v1/nope");
    assert.deepEqual(r.body, { error: { code: "not_found", message: "No route GET /v1/nope" } });
  });

  assert.equal((await server.stop()).code, 0);
});

Deno.test("bearer-token auth (UEXEC_TOKEN stays an alias of UEXEC_AGENT_TOKEN)", async (t) => {
  const server = await startServer({ UEXEC_TOKEN: "s3cret-token-0123456789" });
  await t.step("/healthz is open", async () => {
    const r = await server.get("/healthz", { authorization: "" });
    assert.equal(r.status, 200);
    assert.equal(r.body.ok, true);
  });
  await t.step("missing or wrong token: 401", async () => {
    const unauthorized = {
      error: { code: "unauthorized", message: "missing or wrong bearer token" },
    };
    assert.deepEqual((await server.get("/v1/sessions", { authorization: "" })).body, unauthorized);
    assert.deepEqual(
      (await server.get("/v1/sessions", { authorization: "Bearer wrong" })).body,
      unauthorized,
    );
    assert.deepEqual(
      (await server.get("/v1/sessions", { authorization: "s3cret-token-0123456789" })).body,
      unauthorized,
    );
    const r = await server.post("/v1/exec_command", { cmd: "touch /tmp/uexec-should-not-exist" }, {
      authorization: "",
    });
    assert.equal(r.status, 401);
  });
  await t.step("the right token passes", async () => {
    const auth = { authorization: "Bearer s3cret-token-0123456789" };
    assert.deepEqual((await server.get("/v1/sessions", auth)).body, { sessions: [] });
    const r = await server.post("/v1/exec_command", { cmd: "echo ok", login: false }, auth);
    assert.equal(r.body.output, "ok\r\n");
  });
  await server.stop();
});

Deno.test("sessions, kill, prune, streams and events", async (t) => {
  const server = await startServer({ UEXEC_MAX_SESSIONS: "10" });
  const events = await connectSse(`${server.url}/v1/events`, server.auth);

  await t.step("GET /v1/sessions lists live sessions and GET one describes it", async () => {
    const id = await execLive(server, "cat");
    const list = await server.get("/v1/sessions");
    assert.equal(list.body.sessions.length, 1);
    const one = await server.get(`/v1/sessions/${id}`);
    assert.deepEqual(list.body.sessions[0], one.body);
    assert.equal(one.body.session_id, id);
    assert.equal(one.body.command, "cat");
    assert.equal(one.body.workdir, server.workspace);
    assert.equal(one.body.tty, true);
    assert.equal(one.body.profile, "workspace-write");
    assert.ok(alive(one.body.pid));
    assert.ok(!Number.isNaN(Date.parse(one.body.started_at)));
    assert.ok(!Number.isNaN(Date.parse(one.body.last_used_at)));
    await server.del(`/v1/sessions/${id}`);
  });

  await t.step(
    "DELETE kills a child that ignores SIGHUP/SIGTERM and its whole session",
    async () => {
      const id = await execLive(
        server,
        "set -m; trap '' HUP TERM; sleep 300 & bash -c 'exec sleep 301' & echo started; wait",
        { until: "started" },
      );
      const leader = (await server.get(`/v1/sessions/${id}`)).body.pid;
      const children = Deno.readTextFileSync(`/proc/${leader}/task/${leader}/children`).trim()
        .split(" ");
      const pids = [leader, ...children.map(Number)];
      assert.equal(pids.length, 3);
      assert.ok(pids.every(alive));
      const killed = await server.del(`/v1/sessions/${id}`);
      assert.equal(killed.status, 200);
      assert.equal(killed.body.exit_code, 128 + 9);
      assert.equal(killed.body.output, "");
      for (const pid of pids) assert.ok(!alive(pid), `pid ${pid} survived`);
      assert.equal((await server.get(`/v1/sessions/${id}`)).status, 404);
    },
  );

  await t.step("DELETE also kills what outlives a leader that died on SIGHUP", async () => {
    const id = await execLive(
      server,
      "bash -c \"trap '' HUP TERM; echo trapped; exec sleep 302\" & wait",
      { until: "trapped" },
    );
    const leader = (await server.get(`/v1/sessions/${id}`)).body.pid;
    const survivor = Number(
      Deno.readTextFileSync(`/proc/${leader}/task/${leader}/children`).trim(),
    );
    assert.ok(alive(survivor));
    const killed = await server.del(`/v1/sessions/${id}`);
    assert.equal(killed.body.exit_code, 128 + 1);
    assert.ok(!alive(survivor), `pid ${survivor} survived`);
  });

  await t.step("signal sends to the process group", async () => {
    const id = await execLive(
      server,
      "trap 'echo got-usr1; exit 3' USR1; echo armed; read x",
      {
        until: "armed",
      },
    );
    assert.deepEqual((await server.post(`/v1/sessions/${id}/signal`, { signal: "SIGUSR1" })).body, {
      ok: true,
    });
    const r = await server.post("/v1/write_stdin", {
      session_id: id,
      chars: "",
      yield_time_ms: 10000,
    });
    assert.equal(r.body.output, "got-usr1\r\n");
    assert.equal(r.body.exit_code, 3);
  });

  await t.step("the output stream sees what exec and write see, then the exit", async () => {
    const id = await execLive(server, "cat");
    const stream = await connectSse(`${server.url}/v1/sessions/${id}/stream`, server.auth);
    const w = await server.post("/v1/write_stdin", {
      session_id: id,
      chars: "streamed\n",
      until: "streamed\\r\\n.*streamed",
    });
    assert.equal(w.body.output, "streamed\r\nstreamed\r\n");
    await server.post("/v1/write_stdin", { session_id: id, chars: "\u0004", yield_time_ms: 5000 });
    const got = await stream.until((evs) => evs.some((e) => e.event === "exit"));
    const text = got.filter((e) => e.event === "output").map((e) => e.data.text).join("");
    assert.equal(text, "streamed\r\nstreamed\r\n");
    assert.deepEqual(got.at(-1), { event: "exit", data: { exit_code: 0 } });
    await stream.close();
  });

  await t.step("base64 streams carry raw bytes", async () => {
    const id = await execLive(server, "read x; printf '\\377\\000ok'", { tty: false });
    const stream = await connectSse(
      `${server.url}/v1/sessions/${id}/stream?encoding=base64`,
      server.auth,
    );
    await server.post("/v1/write_stdin", { session_id: id, chars: "\n", yield_time_ms: 5000 });
    const got = await stream.until((evs) => evs.some((e) => e.event === "exit"));
    const b64 = got.filter((e) => e.event === "output").map((e) => atob(e.data.base64)).join("");
    assert.deepEqual([...b64].map((c) => c.charCodeAt(0)), [0xff, 0, 0x6f, 0x6b]);
    await stream.close();
  });

  await t.step("pruning protects recent sessions and prefers exited ones", async () => {
    const oldest = await execLive(server, "cat");
    const exited = await execLive(server, "sleep 1");
    const fillers: number[] = [];
    for (let i = 0; i < 8; i++) fillers.push(await execLive(server, "cat"));
    await server.post(`/v1/sessions/${oldest}/resize`, { cols: 80, rows: 24 });
    await events.until((evs) => evs.some((e) => e.event === "end" && e.data.session_id === exited));
    const extra = await execLive(server, "cat");
    assert.equal((await server.get(`/v1/sessions/${exited}`)).status, 404);
    assert.equal((await server.get(`/v1/sessions/${oldest}`)).status, 200);
    const onemore = await execLive(server, "cat");
    const got = await events.until((evs) =>
      evs.some((e) => e.event === "end" && e.data.reason === "prune")
    );
    const pruned = got.filter((e) => e.event === "end" && e.data.reason === "prune").map((e) =>
      e.data.session_id
    );
    assert.deepEqual(pruned, [fillers[0]]);
    assert.equal((await server.get(`/v1/sessions/${fillers[0]}`)).status, 404);
    for (const id of [oldest, ...fillers.slice(1), extra, onemore]) {
      assert.equal((await server.del(`/v1/sessions/${id}`)).status, 200);
    }
  });

  await t.step("events: exactly one begin and one end per process, with reasons", async () => {
    const quick = await server.post("/v1/exec_command", { cmd: "echo quick", login: false });
    assert.equal(quick.body.exit_code, 0);
    const slow = await execLive(server, "cat");
    await server.post("/v1/write_stdin", {
      session_id: slow,
      chars: "typed\n",
      until: "typed\\r\\n.*typed",
    });
    await server.del(`/v1/sessions/${slow}`);
    const all = await events.until((evs) =>
      evs.some((e) => e.event === "end" && e.data.session_id === slow) &&
      evs.some((e) => e.event === "begin" && e.data.command === "echo quick")
    );
    const quickId = all.find((e) =>
      e.event === "begin" && e.data.command === "echo quick"
    )!.data.session_id;
    for (const id of [quickId, slow]) {
      assert.equal(all.filter((e) => e.event === "begin" && e.data.session_id === id).length, 1);
      assert.equal(all.filter((e) => e.event === "end" && e.data.session_id === id).length, 1);
    }
    const quickEnd = all.find((e) => e.event === "end" && e.data.session_id === quickId)!.data;
    assert.equal(quickEnd.exit_code, 0);
    assert.equal(quickEnd.reason, "exit");
    assert.equal(typeof quickEnd.duration_seconds, "number");
    const slowEnd = all.find((e) => e.event === "end" && e.data.session_id === slow)!.data;
    assert.equal(slowEnd.reason, "kill");
    assert.deepEqual(
      all.find((e) => e.event === "interaction" && e.data.session_id === slow)!.data,
      {
        agent: "default",
        session_id: slow,
        chars: "typed\n",
      },
    );
    const begin = all.find((e) => e.event === "begin" && e.data.session_id === slow)!.data;
    assert.deepEqual(begin, {
      agent: "default",
      session_id: slow,
      command: "cat",
      workdir: server.workspace,
      tty: true,
    });
  });

  await t.step("GET /v1/tools gives both tools as function schemas", async () => {
    const r = await server.get("/v1/tools");
    const [exec, write] = r.body.tools;
    assert.equal(exec.type, "function");
    assert.equal(exec.function.name, "exec_command");
    assert.deepEqual(exec.function.parameters.required, ["cmd"]);
    assert.equal(exec.function.parameters.additionalProperties, false);
    assert.equal(exec.function.parameters.properties.cmd.type, "string");
    assert.equal(write.function.name, "write_stdin");
    assert.deepEqual(write.function.parameters.required, ["session_id"]);
  });

  await events.close();
  assert.equal((await server.stop()).code, 0);
});

Deno.test("SIGTERM kills every session and leaves no orphan", async () => {
  const server = await startServer();
  const id = await execLive(server, "trap '' HUP TERM; sleep 300 & wait");
  const pid = (await server.get(`/v1/sessions/${id}`)).body.pid;
  const child = Number(Deno.readTextFileSync(`/proc/${pid}/task/${pid}/children`).trim());
  assert.ok(alive(pid) && alive(child));
  const stopped = await server.stop();
  assert.equal(stopped.code, 0);
  assert.ok(!alive(pid) && !alive(child));
});

Deno.test("a broken profile stops the server with a message naming the file and the field", async () => {
  const dir = await Deno.makeTempDir({ prefix: "uexec-profiles-" });
  try {
    const shipped = new URL("../../sandbox-profiles/", import.meta.url).pathname;
    for (const entry of Deno.readDirSync(shipped)) {
      await Deno.copyFile(`${shipped}${entry.name}`, `${dir}/${entry.name}`);
    }
    const broken = JSON.parse(await Deno.readTextFile(`${dir}/read-only.json`));
    broken.network = "sometimes";
    await Deno.writeTextFile(`${dir}/read-only.json`, JSON.stringify(broken));
    await assert.rejects(
      () => startServer({ UEXEC_PROFILES_DIR: dir }),
      (err: Error) => {
        assert.match(
          err.message,
          /^server exited 2 before listening: uexec: invalid sandbox profile /,
        );
        assert.match(err.message, /read-only\.json: field "network": /);
        return true;
      },
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
