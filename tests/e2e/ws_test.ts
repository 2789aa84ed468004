/**
 * `GET /v1/ws`, over real WebSockets to a real server: every method with the HTTP API's
 * validation and errors, many requests in flight answered as they complete, the
 * subscribe/push/exit flow with every byte accounted for by its offset, who may upgrade, a
 * client that does not read, and stock clients (npm `ws`, Deno's `WebSocket`) on the HTTP port.
 */

import assert from "node:assert/strict";
import type { Buffer } from "node:buffer";
import WsClient from "ws";
import { startServer } from "../helpers/server.ts";
import {
  type Frame,
  FrameReader,
  rawRequest,
  rawUpgrade,
  RpcSocket,
  wsUrl,
} from "../helpers/ws.ts";

/** The TCP ports process `pid` listens on (its socket inodes in /proc/net/tcp{,6}, state 0A). */
function listeningPorts(pid: number): number[] {
  const inodes = new Set<string>();
  for (const entry of Deno.readDirSync(`/proc/${pid}/fd`)) {
    try {
      const inode = /^socket:\[(\d+)\]$/.exec(Deno.readLinkSync(`/proc/${pid}/fd/${entry.name}`));
      if (inode) inodes.add(inode[1]);
    } catch { /* closed meanwhile */ }
  }
  const ports = new Set<number>();
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    for (const line of Deno.readTextFileSync(table).split("\n").slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f[3] === "0A" && inodes.has(f[9])) ports.add(parseInt(f[1].split(":")[1], 16));
    }
  }
  return [...ports];
}

/** Output notifications of `session` among `frames`, joined, checking the offsets are contiguous from `from`. */
function joined(frames: Frame[], session: number, from: number): { text: string; end: number } {
  let end = from;
  let text = "";
  for (const f of frames) {
    if (f.method !== "output" || f.params.session_id !== session) continue;
    assert.equal(f.params.offset, end, "output offsets are contiguous");
    text += f.params.text;
    end += new TextEncoder().encode(f.params.text).length;
  }
  return { text, end };
}

Deno.test("websocket: every method, as the HTTP API answers it", async (t) => {
  const server = await startServer();
  const ws = await RpcSocket.open(await wsUrl(server.url, server.auth), server.auth);
  try {
    await t.step("exec_command and write_stdin answer the HTTP results", async () => {
      const run = await ws.call("exec_command", { cmd: "echo hi-$((6*7))" });
      assert.equal(run.jsonrpc, "2.0");
      assert.equal(run.result.exit_code, 0);
      assert.match(run.result.output, /^hi-42\r?\n$/);
      assert.equal(run.result.sandbox.denied, false);

      const cat = await ws.call("exec_command", {
        cmd: "echo ready; exec cat",
        until: "ready",
        login: false,
      });
      const id = cat.result.session_id;
      assert.equal(typeof id, "number");
      const echoed = await ws.call("write_stdin", {
        session_id: id,
        chars: "abc\n",
        until: "abc[\\s\\S]*abc",
      });
      assert.equal(echoed.result.session_id, id);
      assert.match(echoed.result.output, /abc\r\nabc\r\n/);
      const killed = await ws.call("kill", { session_id: id });
      assert.equal(typeof killed.result.exit_code, "number");
      const again = await ws.call("kill", { session_id: id });
      const http = await server.del(`/v1/sessions/${id}`);
      assert.equal(http.status, 404);
      assert.deepEqual(again.error, {
        code: -32000,
        message: http.body.error.message,
        data: { code: http.body.error.code, status: 404 },
      });
    });

    await t.step("invalid params are the HTTP 400 with the same message", async () => {
      for (
        const [method, params, path] of [
          ["exec_command", { cmd: "true", yield_time_ms: "soon" }, "/v1/exec_command"],
          ["exec_command", { cmd: "true", bogus: 1 }, "/v1/exec_command"],
          ["write_stdin", { session_id: -1 }, "/v1/write_stdin"],
          ["exec_command", { cmd: "true", until: "(" }, "/v1/exec_command"],
        ] as const
      ) {
        const http = await server.post(path, params);
        assert.equal(http.status, 400);
        const rpc = await ws.call(method, params);
        assert.deepEqual(rpc.error, {
          code: -32602,
          message: http.body.error.message,
          data: { code: "invalid_request", status: 400 },
        });
      }
      const resize = await ws.call("resize", { session_id: 1, cols: 0, rows: 10 });
      assert.equal(resize.error.code, -32602);
      assert.match(resize.error.message, /^cols: /);
      const signal = await ws.call("signal", { session_id: 1 });
      assert.match(signal.error.message, /^signal: /);
    });

    await t.step("protocol errors", async () => {
      const unknown = await ws.call("spawn", {});
      assert.equal(unknown.error.code, -32601);
      assert.equal(unknown.error.data.code, "not_found");
      ws.sendRaw("{nope");
      const bad = await ws.wait((f) => f.error?.code === -32700);
      assert.equal(bad.id, null);
      ws.sendRaw(JSON.stringify([{ jsonrpc: "2.0", id: 77, method: "kill" }]));
      const batch = await ws.wait((f) => f.error?.code === -32600);
      assert.equal(batch.id, null);
    });

    await t.step("resize and signal", async () => {
      const sh = await ws.call("exec_command", {
        cmd: "echo ready; exec sh",
        until: "ready",
        login: false,
        shell: "/bin/sh",
      });
      const id = sh.result.session_id;
      assert.deepEqual((await ws.call("resize", { session_id: id, cols: 101, rows: 31 })).result, {
        ok: true,
      });
      const size = await ws.call("write_stdin", {
        session_id: id,
        chars: "stty size\n",
        until: "31 101",
      });
      assert.match(size.result.output, /31 101/);
      const sub = await ws.call("subscribe", { session_id: id });
      assert.equal(sub.result.session_id, id);
      assert.deepEqual((await ws.call("signal", { session_id: id, signal: "SIGKILL" })).result, {
        ok: true,
      });
      const exit = await ws.wait((f) => f.method === "exit" && f.params.session_id === id);
      assert.deepEqual(exit.params, { session_id: id, exit_code: 137 });
      const wrong = await ws.call("signal", { session_id: id, signal: "SIGNOPE" });
      assert.equal(wrong.error.code, -32602);
      assert.match(wrong.error.message, /^signal: unknown signal "SIGNOPE"/);
    });
  } finally {
    await ws.close();
    await server.stop();
  }
});

Deno.test("websocket: requests run concurrently and are answered as they complete", async () => {
  const server = await startServer();
  const ws = await RpcSocket.open(await wsUrl(server.url, server.auth), server.auth);
  try {
    const cat = await ws.call("exec_command", { cmd: "echo ready; exec cat", until: "ready" });
    const id = cat.result.session_id;
    // A poll that waits until the session ends, then a command on another session.
    const poll = ws.send("write_stdin", { session_id: id, chars: "", yield_time_ms: 300_000 });
    const quick = ws.send("exec_command", { cmd: "echo second" });
    const second = await ws.answer(quick);
    assert.match(second.result.output, /second/);
    assert.equal(ws.frames.some((f) => f.id === poll), false, "the poll is still waiting");
    const killed = ws.send("kill", { session_id: id });
    const [pollAnswer] = await Promise.all([ws.answer(poll), ws.answer(killed)]);
    assert.equal(typeof pollAnswer.result.exit_code, "number");
    const order = ws.frames.map((f) => f.id);
    assert.ok(order.indexOf(quick) < order.indexOf(poll), "answered out of request order");
  } finally {
    await ws.close();
    await server.stop();
  }
});

Deno.test("websocket: subscribe pushes every byte with its offset, then exit", async (t) => {
  const server = await startServer();
  const ws = await RpcSocket.open(await wsUrl(server.url, server.auth), server.auth);
  try {
    await t.step(
      "text: a typed line echoes on the stream; write_stdin yields at once",
      async () => {
        const run = await ws.call("exec_command", {
          cmd: "echo ready; read x; seq 1 30000; printf 'caf\\303\\251 done'",
          until: "ready",
          login: false,
          shell: "/bin/sh",
        });
        const id = run.result.session_id;
        const sub = await ws.call("subscribe", { session_id: id });
        assert.equal(sub.result.session_id, id);
        const from = sub.result.offset;
        assert.equal(from, new TextEncoder().encode(run.result.output).length);
        const write = await ws.call("write_stdin", {
          session_id: id,
          chars: "go\n",
          yield_time_ms: 0,
        });
        assert.equal(write.error, undefined);
        const exit = await ws.wait((f) => f.method === "exit" && f.params.session_id === id);
        assert.deepEqual(exit.params, { session_id: id, exit_code: 0 });
        const { text } = joined(ws.frames, id, from);
        const expected = "go\r\n" +
          Array.from({ length: 30000 }, (_, i) => `${i + 1}\r\n`).join("") + "café done";
        assert.equal(text, expected);
        const last = ws.frames.findLast((f) => f.params?.session_id === id);
        assert.equal(last?.method, "exit", "exit comes after all output");
        assert.equal(ws.frames.some((f) => f.method === "gap"), false);
      },
    );

    await t.step("base64, and unsubscribe stops the pushes", async () => {
      const run = await ws.call("exec_command", {
        cmd: "echo ready; exec cat",
        until: "ready",
        login: false,
      });
      const id = run.result.session_id;
      const sub = await ws.call("subscribe", { session_id: id, encoding: "base64" });
      const twice = await ws.call("subscribe", { session_id: id });
      assert.equal(twice.error.code, -32602);
      ws.drain();
      await ws.call("write_stdin", { session_id: id, chars: "\x01\n", until: "\x01[\\s\\S]*\x01" });
      const pushed = ws.drain().filter((f) => f.method === "output");
      assert.ok(pushed.length > 0);
      assert.equal(pushed[0].params.offset, sub.result.offset);
      const bytes = pushed.map((f) => atob(f.params.base64)).join("");
      assert.equal(bytes, "^A\r\n\x01\r\n");
      assert.deepEqual((await ws.call("unsubscribe", { session_id: id })).result, { ok: true });
      ws.drain();
      const after = await ws.call("write_stdin", {
        session_id: id,
        chars: "x\n",
        until: "x[\\s\\S]*x",
      });
      assert.match(after.result.output, /x\r\nx\r\n/);
      // Pushes are sent as the output arrives, before the answer that waited for it.
      assert.deepEqual(ws.drain().filter((f) => f.method === "output"), []);
      await ws.call("kill", { session_id: id });
    });
  } finally {
    await ws.close();
    await server.stop();
  }
});

Deno.test("websocket: who may upgrade", async (t) => {
  const server = await startServer({ UEXEC_ALLOWED_ORIGINS: "http://tool.example" });
  try {
    const status = async (headers: Record<string, string>) => {
      const { conn, head } = await rawUpgrade(await wsUrl(server.url, server.auth), headers);
      conn.close();
      return head.split("\r\n")[0];
    };
    await t.step("the agent's token upgrades", async () => {
      assert.equal(await status(server.auth), "HTTP/1.1 101 Switching Protocols");
      const host = new URL(await wsUrl(server.url, server.auth)).host;
      assert.equal(
        await status({ ...server.auth, Origin: `http://${host}` }),
        "HTTP/1.1 101 Switching Protocols",
      );
    });
    await t.step("no token, a wrong token: 401", async () => {
      assert.equal(await status({}), "HTTP/1.1 401 Unauthorized");
      assert.equal(await status({ authorization: "Bearer nope" }), "HTTP/1.1 401 Unauthorized");
    });
    await t.step("a foreign Origin, even one allowed for CORS: 403", async () => {
      assert.equal(
        await status({ ...server.auth, Origin: "http://evil.example" }),
        "HTTP/1.1 403 Forbidden",
      );
      assert.equal(
        await status({ ...server.auth, Origin: "http://tool.example" }),
        "HTTP/1.1 403 Forbidden",
      );
    });
    await t.step("one port: a plain GET is 426; /healthz names the same port", async () => {
      const url = await wsUrl(server.url, server.auth);
      assert.equal(url, `${server.url.replace(/^http/, "ws")}/v1/ws`);
      assert.deepEqual(listeningPorts(server.pid), [Number(new URL(server.url).port)]);
      const http = await server.get("/v1/ws");
      assert.equal(http.status, 426);
      assert.deepEqual(http.body.error, {
        code: "upgrade_required",
        message: "GET /v1/ws takes a WebSocket upgrade (Upgrade: websocket)",
      });
    });
    await t.step("another agent's session is unknown; the operator sees it", async () => {
      const other = await server.operator.post("/v1/agents", { name: "other" });
      const mine = await server.post("/v1/exec_command", {
        cmd: "echo ready; exec cat",
        until: "ready",
      });
      const id = mine.body.session_id;
      const ws = await RpcSocket.open(await wsUrl(server.url, server.auth), {
        authorization: `Bearer ${other.body.token}`,
      });
      const op = await RpcSocket.open(await wsUrl(server.url, server.auth), server.operator.auth);
      try {
        for (const method of ["subscribe", "kill", "unsubscribe"]) {
          const res = await ws.call(method, { session_id: id });
          assert.deepEqual(res.error.data, { code: "unknown_session", status: 404 }, method);
        }
        const write = await ws.call("write_stdin", { session_id: id, chars: "x" });
        assert.equal(write.error.data.status, 404);
        assert.equal((await op.call("subscribe", { session_id: id })).result.session_id, id);
        // Revoked, the agent's socket is closed at once (trust_test has the rest).
        await server.operator.del(`/v1/agents/other`);
        assert.equal((await ws.closed).code, 1008);
        const killed = await op.call("kill", { session_id: id });
        assert.equal(typeof killed.result.exit_code, "number");
        await op.wait((f) => f.method === "exit" && f.params.session_id === id);
      } finally {
        await ws.close();
        await op.close();
      }
    });
  } finally {
    await server.stop();
  }
});

Deno.test("websocket: a client that does not read is dropped, then told the gap", async () => {
  // An idle timeout far shorter than the run: the listener must not close an upgraded socket.
  const server = await startServer({ UEXEC_IDLE_TIMEOUT_MS: "300" });
  const total = 48 * 1024 * 1024;
  const { conn, head, rest } = await rawUpgrade(await wsUrl(server.url, server.auth), server.auth);
  try {
    assert.match(head, /^HTTP\/1.1 101/);
    const run = await server.post("/v1/exec_command", {
      cmd: `echo ready; read x; head -c ${total} /dev/zero | tr '\\0' a`,
      until: "ready",
      tty: false,
      login: false,
      shell: "/bin/sh",
    });
    const id = run.body.session_id;
    const frames = new FrameReader(conn, rest);
    await rawRequest(conn, 1, "subscribe", { session_id: id });
    const sub = JSON.parse(await frames.next());
    assert.equal(sub.id, 1);
    const from = sub.result.offset;
    await rawRequest(conn, 2, "write_stdin", { session_id: id, chars: "\n", yield_time_ms: 0 });
    // The command runs to its end while this client reads nothing.
    const done = await server.post("/v1/write_stdin", {
      session_id: id,
      chars: "",
      yield_time_ms: 300_000,
    });
    assert.equal(done.body.exit_code, 0);

    let end = from;
    let received = 0;
    const gaps: { offset: number; bytes: number }[] = [];
    for (;;) {
      const frame = JSON.parse(await frames.next());
      if (frame.id === 2) continue;
      if (frame.method === "exit") {
        assert.deepEqual(frame.params, { session_id: id, exit_code: 0 });
        break;
      }
      if (frame.method === "gap") {
        assert.equal(frame.params.offset, end);
        gaps.push(frame.params);
        end += frame.params.bytes;
        continue;
      }
      assert.equal(frame.method, "output");
      assert.equal(frame.params.offset, end);
      end += frame.params.text.length;
      received += frame.params.text.length;
    }
    assert.equal(end, from + total, "every byte is delivered or counted in a gap");
    assert.ok(gaps.length >= 1, "output was dropped, not queued");
    assert.ok(received < total / 2, `received ${received} of ${total} bytes`);
  } finally {
    conn.close();
    await server.stop();
  }
});

Deno.test("websocket: the server stops on SIGTERM with a socket still open", async () => {
  const server = await startServer();
  const ws = await RpcSocket.open(await wsUrl(server.url, server.auth), server.auth);
  const cat = await ws.call("exec_command", { cmd: "echo ready; exec cat", until: "ready" });
  await ws.call("subscribe", { session_id: cat.result.session_id });
  const stopped = await server.stop();
  assert.equal(stopped.code, 0, stopped.stderr);
  const exit = await ws.wait((f) => f.method === "exit");
  assert.equal(exit.params.session_id, cat.result.session_id);
  const closed = await ws.closed;
  assert.equal(closed.code, 1001, "told the server goes away");
  assert.equal(closed.wasClean, true);
});

/** A JSON-RPC call over an npm `ws` socket: the answer frame with that id. */
function wsCall(
  socket: WsClient,
  id: number,
  method: string,
  params: unknown,
): Promise<Frame> {
  return new Promise((resolve) => {
    const onMessage = (data: Buffer) => {
      const frame = JSON.parse(data.toString());
      if (frame.id !== id) return;
      socket.off("message", onMessage);
      resolve(frame);
    };
    socket.on("message", onMessage);
    socket.send(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
  });
}

Deno.test("websocket: npm ws on the HTTP port runs exec_command and write_stdin, then closes cleanly", async () => {
  const server = await startServer();
  const socket = new WsClient(`${server.url.replace(/^http/, "ws")}/v1/ws`, {
    headers: server.auth,
  });
  try {
    await new Promise((resolve, reject) => {
      socket.once("open", resolve);
      socket.once("error", reject);
    });
    const cat = await wsCall(socket, 1, "exec_command", {
      cmd: "echo ready; exec cat",
      until: "ready",
      login: false,
    });
    const id = cat.result.session_id;
    const echoed = await wsCall(socket, 2, "write_stdin", {
      session_id: id,
      chars: "stock\n",
      until: "stock[\\s\\S]*stock",
    });
    assert.match(echoed.result.output, /stock\r\nstock\r\n/);
    await wsCall(socket, 3, "kill", { session_id: id });
    const closed = new Promise<number>((resolve) => socket.once("close", resolve));
    socket.close(1000, "done");
    assert.equal(await closed, 1000, "the server answered the close frame");
  } finally {
    socket.terminate();
    await server.stop();
  }
});

Deno.test("websocket: Deno's WebSocket on the HTTP port runs exec_command and write_stdin, then closes cleanly", async () => {
  const server = await startServer();
  const ws = await RpcSocket.open(`${server.url.replace(/^http/, "ws")}/v1/ws`, server.auth);
  const run = await ws.call("exec_command", {
    cmd: "echo ready; exec cat",
    until: "ready",
    login: false,
  });
  const id = run.result.session_id;
  const echoed = await ws.call("write_stdin", {
    session_id: id,
    chars: "stock\n",
    until: "stock[\\s\\S]*stock",
  });
  assert.match(echoed.result.output, /stock\r\nstock\r\n/);
  await ws.call("kill", { session_id: id });
  const closed = await ws.close(1000);
  assert.equal(closed.code, 1000);
  assert.equal(closed.wasClean, true);
  await server.stop();
});
