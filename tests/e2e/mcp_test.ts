/**
 * The MCP front door end to end with the SDK's own client: `/mcp` over Streamable HTTP against
 * a real server (tools and their schemas, an interactive session over two calls, results equal
 * to the HTTP API's, the HTTP API's error messages, agents isolated from each other, progress
 * notifications, who may reach the endpoint), and `deno task mcp` over stdio.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client";
// @ts-types="@modelcontextprotocol/sdk/client/streamableHttp"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
// @ts-types="@modelcontextprotocol/sdk/client/stdio"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import {
  CallResultSchema,
  KillResultSchema,
  resultText,
  SessionScreenSchema,
} from "../../src/service/results.ts";
import { jsonSchema } from "../../src/service/tools.ts";
import type { CallResult } from "../../src/sessions/calls.ts";
import { startServer, type TestServer } from "../helpers/server.ts";

const root = new URL("../../", import.meta.url).pathname;

/** A tool call's result, as the tests read it. */
interface ToolResult {
  isError?: boolean;
  text: string;
  // deno-lint-ignore no-explicit-any
  structured: any;
}

/** An MCP client of `server` with `token`, connected over Streamable HTTP. */
async function connect(server: TestServer, token: string) {
  const client = new Client({ name: "uexec-test", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`), {
    requestInit: { headers: { authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  // The client checks structuredContent against the output schemas it has listed.
  await client.listTools();
  return {
    client,
    async call(
      name: string,
      args: Record<string, unknown>,
      onprogress?: (p: { progress: number; message?: string }) => void,
    ): Promise<ToolResult> {
      const r = await client.callTool({ name, arguments: args }, undefined, { onprogress });
      const content = r.content as { type: string; text: string }[];
      assert.equal(content.length, 1);
      assert.equal(content[0].type, "text");
      return {
        isError: r.isError as boolean | undefined,
        text: content[0].text,
        structured: r.structuredContent,
      };
    },
    close: () => client.close(),
  };
}

/** Runs `fn` with a fresh server and an MCP client of its default agent; both go after it. */
async function withMcp(
  fn: (server: TestServer, mcp: Awaited<ReturnType<typeof connect>>) => Promise<void>,
): Promise<void> {
  const server = await startServer();
  const mcp = await connect(server, server.agentToken);
  try {
    await fn(server, mcp);
  } finally {
    await mcp.close();
    await server.stop();
  }
}

/** An initialize request, as a client POSTs it. */
function initialize(headers: Record<string, string>): RequestInit {
  return {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      ...headers,
    },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: {
        protocolVersion: "2025-06-18",
        capabilities: {},
        clientInfo: { name: "raw", version: "1" },
      },
    }),
  };
}

/** A result with its per-call fields (chunk id, wall time) blanked. */
function comparable(result: CallResult) {
  const usage = result.usage && { cpu_seconds: 0, peak_memory_bytes: 0 };
  return { ...result, chunk_id: "", wall_time_seconds: 0, usage };
}

Deno.test("mcp: five tools, with the HTTP API's input schemas and an output schema each", () =>
  withMcp(async (server, mcp) => {
    const { tools } = await mcp.client.listTools();
    assert.deepEqual(tools.map((t) => t.name), [
      "exec_command",
      "write_stdin",
      "list_sessions",
      "kill_session",
      "read_screen",
    ]);
    const http = (await server.get("/v1/tools")).body.tools;
    for (const name of ["exec_command", "write_stdin"]) {
      const tool = tools.find((t) => t.name === name)!;
      const definition = http.find((t: { function: { name: string } }) => t.function.name === name);
      // The same schema, but for the one MCP default: output_mode plain.
      const parameters = structuredClone(definition.function.parameters);
      assert.equal(parameters.properties.output_mode.default, "raw");
      parameters.properties.output_mode.default = "plain";
      assert.deepEqual(tool.inputSchema, parameters);
      assert.equal(tool.description, definition.function.description);
      assert.deepEqual(tool.outputSchema, jsonSchema(CallResultSchema, "output"));
    }
    const kill = tools.find((t) => t.name === "kill_session")!;
    assert.deepEqual(kill.inputSchema, {
      type: "object",
      properties: {
        session_id: {
          type: "integer",
          minimum: 0,
          maximum: Number.MAX_SAFE_INTEGER,
          description: "Identifier of the session.",
        },
      },
      required: ["session_id"],
      additionalProperties: false,
    });
    assert.deepEqual(kill.outputSchema, jsonSchema(KillResultSchema, "output"));
    const screen = tools.find((t) => t.name === "read_screen")!;
    assert.deepEqual(screen.inputSchema, kill.inputSchema);
    assert.deepEqual(screen.outputSchema, jsonSchema(SessionScreenSchema, "output"));
    for (const tool of tools) {
      assert.equal(tool.inputSchema.type, "object", tool.name);
      assert.equal(tool.outputSchema?.type, "object", tool.name);
    }
  }));

Deno.test("mcp: an interactive session over two calls, then killed", () =>
  withMcp(async (server, mcp) => {
    const started = await mcp.call("exec_command", {
      cmd: "cat",
      login: false,
      yield_time_ms: 250,
    });
    assert.equal(started.isError, undefined, started.text);
    const id = started.structured.session_id;
    assert.equal(typeof id, "number");
    assert.equal(started.structured.exit_code, undefined);
    assert.equal(started.text, resultText(started.structured));

    const echoed = await mcp.call("write_stdin", {
      session_id: id,
      chars: "hello mcp\n",
      yield_time_ms: 30_000,
      until: "hello mcp\\r\\nhello mcp\\r\\n",
    });
    assert.equal(echoed.isError, undefined, echoed.text);
    // MCP's default output_mode is plain: "\r\n" ends a line as "\n".
    assert.equal(echoed.structured.output, "hello mcp\nhello mcp\n");
    assert.equal(echoed.structured.session_id, id);
    assert.equal(echoed.text, resultText(echoed.structured));

    const listed = await mcp.call("list_sessions", {});
    assert.deepEqual(listed.structured, (await server.get("/v1/sessions")).body);
    assert.deepEqual(JSON.parse(listed.text), listed.structured);
    assert.deepEqual(listed.structured.sessions.map((s: { session_id: number }) => s.session_id), [
      id,
    ]);

    const killed = await mcp.call("kill_session", { session_id: id });
    assert.equal(killed.isError, undefined, killed.text);
    assert.equal(typeof killed.structured.exit_code, "number");
    assert.deepEqual(Object.keys(killed.structured).sort(), ["exit_code", "output"]);
    assert.deepEqual((await mcp.call("list_sessions", {})).structured, { sessions: [] });
  }));

Deno.test("mcp: structuredContent is the HTTP API's JSON, the text its text form", () =>
  withMcp(async (server, mcp) => {
    const body = { cmd: "printf '\\033[1mbold\\033[0m\\n'; exit 3", login: false };
    for (
      const [mode, output] of [
        [undefined, "bold\n"], // MCP's default, given to HTTP explicitly
        ["raw", "\u001b[1mbold\u001b[0m\r\n"], // HTTP's default, given to MCP explicitly
      ] as const
    ) {
      const viaMcp = await mcp.call("exec_command", mode ? { ...body, output_mode: mode } : body);
      const viaHttp = await server.post("/v1/exec_command", {
        ...body,
        ...(mode ? {} : { output_mode: "plain" }),
      });
      assert.equal(viaHttp.status, 200);
      assert.equal(viaMcp.isError, undefined);
      assert.deepEqual(comparable(viaMcp.structured), comparable(viaHttp.body));
      assert.equal(viaMcp.structured.exit_code, 3);
      assert.equal(viaMcp.structured.output, output);
      assert.equal(viaMcp.text, resultText(viaMcp.structured));
    }
  }));

Deno.test("mcp: failures are tool errors with the HTTP API's messages", async (t) => {
  const server = await startServer();
  const mcp = await connect(server, server.agentToken);
  const other = (await server.operator.post("/v1/agents", { name: "other" })).body.token;
  const otherMcp = await connect(server, other);
  try {
    await t.step("invalid arguments", async () => {
      for (
        const [tool, path, args] of [
          ["exec_command", "/v1/exec_command", { cmd: "echo", yield_time_ms: "soon" }],
          ["exec_command", "/v1/exec_command", { cmd: "echo", bogus: 1 }],
          ["exec_command", "/v1/exec_command", { cmd: "" }],
          ["write_stdin", "/v1/write_stdin", { session_id: -1 }],
          ["write_stdin", "/v1/write_stdin", { session_id: 1000, until: "(" }],
        ] as const
      ) {
        const http = await server.post(path, args);
        assert.equal(http.status, 400);
        const r = await mcp.call(tool, args);
        assert.equal(r.isError, true);
        assert.equal(r.text, http.body.error.message);
        assert.equal(r.structured, undefined);
      }
    });

    await t.step("another agent's session is unknown, as over HTTP", async () => {
      const mine = await mcp.call("exec_command", { cmd: "cat", login: false, yield_time_ms: 250 });
      const id = mine.structured.session_id;
      assert.equal(typeof id, "number");
      const http = await server.as(other).post("/v1/write_stdin", { session_id: id, chars: "x" });
      assert.equal(http.status, 404);
      for (
        const [tool, args] of [
          ["write_stdin", { session_id: id, chars: "stolen\n" }],
          ["kill_session", { session_id: id }],
        ] as const
      ) {
        const r = await otherMcp.call(tool, args);
        assert.equal(r.isError, true);
        assert.equal(r.text, `Unknown session id ${id}`);
        assert.equal(r.text, http.body.error.message);
      }
      assert.deepEqual((await otherMcp.call("list_sessions", {})).structured, { sessions: [] });
      // Still alive and untouched for its owner; the operator sees it too.
      const still = await mcp.call("write_stdin", {
        session_id: id,
        chars: "mine\n",
        yield_time_ms: 30_000,
        until: "mine\\r\\nmine\\r\\n",
      });
      assert.equal(still.structured.output, "mine\nmine\n");
      const operator = await connect(server, server.operatorToken);
      try {
        const all = (await operator.call("list_sessions", {})).structured.sessions;
        assert.deepEqual(
          all.map((s: { session_id: number; agent: string }) => [s.session_id, s.agent]),
          [
            [id, "default"],
          ],
        );
      } finally {
        await operator.close();
      }
    });

    await t.step(
      "read_screen: the HTTP screen's JSON; 400 and 404 messages as over HTTP",
      async () => {
        const started = await mcp.call("exec_command", {
          cmd: "printf 'top\\nline 2\\n'; cat",
          login: false,
          screen: true,
          until: "line 2",
          yield_time_ms: 30_000,
        });
        const id = started.structured.session_id;
        assert.equal(typeof id, "number", started.text);
        const viaMcp = await mcp.call("read_screen", { session_id: id });
        assert.equal(viaMcp.isError, undefined, viaMcp.text);
        const viaHttp = await server.get(`/v1/sessions/${id}/screen`);
        assert.equal(viaHttp.status, 200);
        assert.deepEqual(viaMcp.structured, viaHttp.body);
        assert.deepEqual(viaMcp.structured.lines.slice(0, 2), ["top", "line 2"]);
        assert.deepEqual(viaMcp.structured.cursor, { row: 2, col: 0 });
        assert.equal(
          viaMcp.text,
          ["Scrolled off:", "Screen (24 rows, 80 columns, cursor at row 3, column 1):"]
            .concat(viaMcp.structured.lines).join("\n"),
        );

        const plain = await mcp.call("exec_command", {
          cmd: "cat",
          login: false,
          yield_time_ms: 250,
        });
        const noScreen = plain.structured.session_id;
        const http400 = await server.get(`/v1/sessions/${noScreen}/screen`);
        assert.equal(http400.status, 400);
        const refused = await mcp.call("read_screen", { session_id: noScreen });
        assert.equal(refused.isError, true);
        assert.equal(refused.text, http400.body.error.message);

        const foreign = await otherMcp.call("read_screen", { session_id: id });
        assert.equal(foreign.isError, true);
        assert.equal(foreign.text, `Unknown session id ${id}`);
      },
    );
  } finally {
    await otherMcp.close();
    await mcp.close();
    await server.stop();
  }
});

Deno.test("mcp: a waiting call sends progress as output arrives, only when asked", () =>
  withMcp(async (server, mcp) => {
    const started = await mcp.call("exec_command", {
      cmd: "cat",
      login: false,
      yield_time_ms: 250,
    });
    const id = started.structured.session_id;
    const progress: { progress: number; message?: string }[] = [];
    // The call waits for cat to end; the first progress (the echo of "go") makes the test end it.
    let interrupted: Promise<{ status: number }> | undefined;
    const waiting = await mcp.call(
      "write_stdin",
      { session_id: id, chars: "go\n", yield_time_ms: 30_000 },
      (p) => {
        progress.push(p);
        interrupted ??= server.post(`/v1/sessions/${id}/signal`, { signal: "SIGINT" });
      },
    );
    assert.equal((await interrupted)?.status, 200);
    assert.equal(waiting.isError, undefined);
    assert.equal(waiting.structured.exit_code, 130);
    assert.match(waiting.structured.output, /^go\n/);
    assert.ok(progress.length >= 1);
    for (const [i, p] of progress.entries()) {
      assert.equal(p.message, `${p.progress} bytes of output so far`);
      if (i > 0) assert.ok(p.progress > progress[i - 1].progress);
    }
    assert.ok(progress[0].progress >= "go\r\n".length);

    const next = await mcp.call("exec_command", { cmd: "cat", login: false, yield_time_ms: 250 });
    const again = next.structured.session_id;
    // Without a progress token the response stream holds the result and nothing else.
    const res = await fetch(`${server.url}/mcp`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${server.agentToken}`,
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
      },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 7,
        method: "tools/call",
        params: {
          name: "write_stdin",
          arguments: {
            session_id: again,
            chars: "again\n",
            yield_time_ms: 30_000,
            until: "again\\r\\nagain\\r\\n",
          },
        },
      }),
    });
    assert.equal(res.status, 200);
    const events = (await res.text()).split("\n").filter((l) => l.startsWith("data: "));
    assert.equal(events.length, 1);
    const message = JSON.parse(events[0].slice("data: ".length));
    assert.equal(message.id, 7);
    assert.equal(message.result.structuredContent.output, "again\nagain\n");
  }));

Deno.test("mcp: who may reach /mcp", async (t) => {
  const server = await startServer({
    UEXEC_APPROVAL_POLICY: "on-request",
  });
  try {
    await t.step("no or a wrong token: 401", async () => {
      for (
        const headers of [{}, { authorization: "Bearer wrong-token-0123456789" }] as Record<
          string,
          string
        >[]
      ) {
        const res = await fetch(`${server.url}/mcp`, initialize(headers));
        assert.equal(res.status, 401);
        assert.deepEqual(await res.json(), {
          error: { code: "unauthorized", message: "missing or wrong bearer token" },
        });
      }
      const client = new Client({ name: "anonymous", version: "1.0.0" });
      await assert.rejects(
        client.connect(new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`))),
      );
    });

    await t.step("the agent and the operator: 200", async () => {
      for (const token of [server.agentToken, server.operatorToken]) {
        const r = await server.raw("/mcp", initialize({ authorization: `Bearer ${token}` }));
        assert.equal(r.status, 200, r.text);
        assert.match(r.text, /"serverInfo":\{"name":"uexec"/);
      }
    });

    await t.step("a foreign Origin: 403", async () => {
      const r = await server.raw("/mcp", initialize({ origin: "http://evil.example" }));
      assert.equal(r.status, 403);
      assert.equal(JSON.parse(r.text).error.code, "forbidden_origin");
    });

    await t.step("a web page's text/plain POST: 415", async () => {
      const init = initialize({});
      const r = await server.raw("/mcp", {
        ...init,
        headers: { ...init.headers as Record<string, string>, "content-type": "text/plain" },
      });
      assert.equal(r.status, 415);
    });

    await t.step("GET and DELETE: 405 (stateless), 401 without a token", async () => {
      for (const method of ["GET", "DELETE"]) {
        const r = await server.raw("/mcp", { method, headers: { accept: "text/event-stream" } });
        assert.equal(r.status, 405, method);
        assert.equal(r.headers.get("allow"), "POST");
        const anonymous = await fetch(`${server.url}/mcp`, { method });
        assert.equal(anonymous.status, 401);
        await anonymous.body?.cancel();
      }
    });

    await t.step("a sandboxed command, even with the tokens: 403", async () => {
      const init = initialize({});
      for (const token of [server.agentToken, server.operatorToken]) {
        const r = await server.post("/v1/exec_command", {
          cmd: `curl -s -H 'authorization: Bearer ${token}' ` +
            `-H 'content-type: application/json' -H 'accept: application/json, text/event-stream' ` +
            `-d '${init.body}' ${server.url}/mcp`,
          login: false,
          profile: "workspace-write-net",
        });
        assert.equal(r.status, 200);
        assert.deepEqual(JSON.parse(r.body.output), {
          error: {
            code: "forbidden_peer",
            message: "requests from sandboxed commands are refused",
          },
        });
      }
    });
  } finally {
    await server.stop();
  }
});

/** Pids of `pid`'s descendants. */
async function descendants(pid: number): Promise<number[]> {
  const parents = new Map<number, number[]>();
  for await (const entry of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    try {
      const stat = await Deno.readTextFile(`/proc/${entry.name}/stat`);
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      parents.set(ppid, [...parents.get(ppid) ?? [], Number(entry.name)]);
    } catch { /* gone meanwhile */ }
  }
  const found: number[] = [];
  const queue = [pid];
  while (queue.length > 0) {
    const children = parents.get(queue.shift()!) ?? [];
    found.push(...children);
    queue.push(...children);
  }
  return found;
}

function alive(pid: number): boolean {
  try {
    Deno.statSync(`/proc/${pid}`);
    return true;
  } catch {
    return false;
  }
}

Deno.test("mcp: malformed messages are the client's errors, and bodies stay within 1 MiB (fuzz findings)", async () => {
  const server = await startServer();
  const post = async (body: string) => {
    const r = await server.raw("/mcp", {
      method: "POST",
      headers: {
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
      },
      body,
    });
    return { status: r.status, body: JSON.parse(r.text) };
  };
  const init = (params: unknown, id: unknown = 1) =>
    JSON.stringify({ jsonrpc: "2.0", id, method: "initialize", params });
  const call = (args: unknown, id = 2) => ({
    jsonrpc: "2.0",
    id,
    method: "tools/call",
    params: { name: "list_sessions", arguments: args },
  });
  const invalidParams = (id: unknown, message: string) => ({
    jsonrpc: "2.0",
    id,
    error: { code: -32602, message },
  });
  try {
    assert.deepEqual(
      await post(
        init({ protocolVersion: 5, capabilities: {}, clientInfo: { name: "x", version: "1" } }),
      ),
      {
        status: 400,
        body: invalidParams(1, "initialize: params.protocolVersion must be a string"),
      },
    );
    assert.deepEqual(await post(init("2025-06-18", "a")), {
      status: 400,
      body: invalidParams("a", "initialize: params must be an object"),
    });
    for (const args of ["x", [1], 7, null]) {
      assert.deepEqual(await post(JSON.stringify(call(args))), {
        status: 400,
        body: invalidParams(2, "tools/call: params.arguments must be an object"),
      });
    }
    assert.deepEqual(await post("[]"), {
      status: 400,
      body: {
        jsonrpc: "2.0",
        id: null,
        error: { code: -32600, message: "Invalid Request: an empty batch" },
      },
    });
    // In a batch with a bad message nothing runs, and every request is answered.
    assert.deepEqual(
      await post(JSON.stringify([{ jsonrpc: "2.0", id: 9, method: "ping" }, call("x", 10)])),
      {
        status: 400,
        body: [
          {
            jsonrpc: "2.0",
            id: 9,
            error: { code: -32600, message: "not run: another message of its batch was invalid" },
          },
          invalidParams(10, "tools/call: params.arguments must be an object"),
        ],
      },
    );
    assert.deepEqual(await post("{"), {
      status: 400,
      body: {
        jsonrpc: "2.0",
        id: null,
        error: { code: -32700, message: "Parse error: body: malformed JSON" },
      },
    });
    const big = JSON.stringify({ ...call({}), pad: "x".repeat(1024 * 1024) });
    assert.deepEqual(await post(big), {
      status: 413,
      body: {
        jsonrpc: "2.0",
        id: null,
        error: { code: -32600, message: "Invalid Request: request body exceeds 1 MiB" },
      },
    });
    // A good call still works (the SDK gets the body read here).
    const ok = await server.raw("/mcp", initialize(server.auth));
    assert.equal(ok.status, 200, ok.text);
  } finally {
    await server.stop();
  }
});

Deno.test("mcp: deno task mcp over stdio; closing stdin ends it and its sessions", async () => {
  const workspace = await Deno.makeTempDir({ prefix: "uexec-ws-" });
  const stateDir = await Deno.makeTempDir({ prefix: "uexec-state-" });
  const home = Deno.env.get("HOME") ?? "/root";
  const transport = new StdioClientTransport({
    command: Deno.execPath(),
    args: ["task", "--quiet", "mcp"],
    cwd: root,
    env: {
      PATH: Deno.env.get("PATH") ?? "/usr/bin:/bin",
      DENO_DIR: Deno.env.get("DENO_DIR") ?? `${home}/.cache/deno`,
      HOME: "/tmp",
      SHELL: "/bin/bash",
      UEXEC_WORKSPACE: workspace,
      UEXEC_STATE_DIR: stateDir,
    },
    stderr: "pipe",
  });
  const stderr = new Response(transport.stderr as unknown as ReadableStream).text();
  const client = new Client({ name: "uexec-test", version: "1.0.0" });
  try {
    await client.connect(transport);
    const { tools } = await client.listTools();
    assert.equal(tools.length, 5);
    const ran = await client.callTool({
      name: "exec_command",
      arguments: { cmd: "echo via stdio; pwd", login: false },
    });
    assert.equal(ran.isError, undefined);
    const result = ran.structuredContent as unknown as CallResult;
    assert.equal(result.exit_code, 0);
    assert.equal(result.output, `via stdio\n${await Deno.realPath(workspace)}\n`);
    assert.deepEqual(ran.content, [{ type: "text", text: resultText(result) }]);

    const live = await client.callTool({
      name: "exec_command",
      arguments: { cmd: "sleep 600", login: false, yield_time_ms: 250 },
    });
    const id = (live.structuredContent as unknown as CallResult).session_id;
    const listed = await client.callTool({ name: "list_sessions", arguments: {} });
    const sessions = (listed.structuredContent as {
      sessions: { session_id: number; agent: string; pid: number }[];
    }).sessions;
    assert.deepEqual(sessions.map((s) => [s.session_id, s.agent]), [[id, "default"]]);
    const children = await descendants(transport.pid!);
    assert.ok(children.includes(sessions[0].pid));

    await client.close();
    const log = await stderr;
    assert.match(log, /uexec: MCP on stdio as agent default/);
    assert.match(log, /uexec: stdin closed; killing 1 session\(s\) and exiting/);
    assert.doesNotMatch(log, /SIGTERM/);
    assert.deepEqual([transport.pid!, ...children].filter(alive), []);
  } finally {
    await client.close();
    await Deno.remove(workspace, { recursive: true });
    await Deno.remove(stateDir, { recursive: true });
  }
});
