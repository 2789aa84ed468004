/**
 * A client generated from the served OpenAPI document types every operation without a cast:
 * `openapi-typescript` (pinned in deno.json) turns `GET /openapi.json` of a real server into
 * `paths` in a temp dir, a small TypeScript file there calls every operation through
 * `openapi-fetch`'s `createClient<paths, media>()` with real bodies and reads typed fields of
 * its result, and `deno check` must pass on it. The calls are only type-checked, never run.
 *
 * @module
 */

import assert from "node:assert/strict";
import openapiTS, { astToString } from "openapi-typescript";
import { startServer } from "../helpers/server.ts";

const CONFIG = new URL("../../deno.json", import.meta.url).pathname;

/**
 * One call per operation (`METHOD /path` as the document writes it), each the body of an async
 * function with three clients in scope, one per media type of a result: `api`
 * (`application/json`), `text` (`text/plain`) and `sse` (`text/event-stream`). Each reads a
 * field of its result with the type the API promises, so a result typed as a union with text,
 * or as nothing, fails the check. No cast, no `any`, no non-null assertion.
 */
const CALLS: Record<string, string> = {
  "GET /healthz": `
    const { data } = await api.GET("/healthz");
    const version: string | undefined = data?.version;`,
  "GET /openapi.json": `
    const { data } = await api.GET("/openapi.json");
    const openapi: "3.1.0" | undefined = data?.openapi;`,
  "POST /v1/exec_command": `
    const { data, error } = await api.POST("/v1/exec_command", {
      body: { cmd: "npm test", workdir: "proj", tty: false, yield_time_ms: 2000, until: "passed",
        escalate: { tcp_ports: [443] }, sandbox_permissions: "require_escalated" },
      headers: { "idempotency-key": "k1" },
    });
    const exit: number | undefined = data?.exit_code;
    const session: number | undefined = data?.session_id;
    const denied: boolean | undefined = data?.sandbox.denied;
    const code: string | undefined = error?.error.code;
    const shown: string | undefined = (await text.POST("/v1/exec_command", {
      body: { cmd: "ls" },
      headers: { accept: "text/plain" },
      parseAs: "text",
    })).data;`,
  "POST /v1/write_stdin": `
    const { data } = await api.POST("/v1/write_stdin", {
      body: { session_id: 7, chars: "6*7\\n", until_input: true },
    });
    const waiting: boolean | undefined = data?.waiting_for_input;
    const shown: string | undefined = (await text.POST("/v1/write_stdin", {
      body: { session_id: 7 },
      headers: { accept: "text/plain" },
      parseAs: "text",
    })).data;`,
  "GET /v1/tools": `
    const { data } = await api.GET("/v1/tools");
    const name: string | undefined = data?.tools[0]?.function.name;`,
  "GET /v1/sessions": `
    const { data } = await api.GET("/v1/sessions");
    const pid: number | undefined = data?.sessions[0]?.pid;`,
  "GET /v1/usage": `
    const { data } = await api.GET("/v1/usage");
    const cpu: number | undefined = data?.usage[0]?.cpu_seconds;`,
  "GET /v1/sessions/{id}": `
    const { data } = await api.GET("/v1/sessions/{id}", { params: { path: { id: 7 } } });
    const command: string | undefined = data?.command;`,
  "DELETE /v1/sessions/{id}": `
    const { data } = await api.DELETE("/v1/sessions/{id}", { params: { path: { id: 7 } } });
    const exit: number | undefined = data?.exit_code;`,
  "POST /v1/sessions/{id}/resize": `
    const { data } = await api.POST("/v1/sessions/{id}/resize", {
      params: { path: { id: 7 } },
      body: { cols: 120, rows: 40 },
    });
    const ok: true | undefined = data?.ok;`,
  "POST /v1/sessions/{id}/signal": `
    const { data } = await api.POST("/v1/sessions/{id}/signal", {
      params: { path: { id: 7 } },
      body: { signal: "SIGINT" },
    });
    const ok: true | undefined = data?.ok;`,
  "GET /v1/sessions/{id}/stream": `
    const { data } = await sse.GET("/v1/sessions/{id}/stream", {
      params: { path: { id: 7 }, query: { encoding: "base64" } },
      parseAs: "stream",
    });
    const stream: ReadableStream<Uint8Array> | null | undefined = data;`,
  "GET /v1/sessions/{id}/output": `
    const { data } = await api.GET("/v1/sessions/{id}/output", {
      params: { path: { id: 7 }, query: { since: 1024 } },
    });
    const end: number | undefined = data?.end;`,
  "GET /v1/sessions/{id}/screen": `
    const { data } = await api.GET("/v1/sessions/{id}/screen", { params: { path: { id: 7 } } });
    const lost: boolean | undefined = data?.scrolled_lost;`,
  "GET /v1/events": `
    const { data } = await sse.GET("/v1/events", { parseAs: "stream" });
    const stream: ReadableStream<Uint8Array> | null | undefined = data;`,
  "GET /v1/approvals": `
    const { data } = await api.GET("/v1/approvals");
    const runs: string | undefined = data?.approvals[0]?.runs;`,
  "POST /v1/approvals/{id}": `
    const { data } = await api.POST("/v1/approvals/{id}", {
      params: { path: { id: "a1" } },
      body: { decision: "approved_for_session" },
    });
    const status: string | undefined = data?.status;`,
  "GET /v1/agents": `
    const { data } = await api.GET("/v1/agents");
    const max: number | null | undefined = data?.agents[0]?.max_sessions;`,
  "POST /v1/agents": `
    const { data } = await api.POST("/v1/agents", {
      body: { name: "ci", max_profile: "read-only", max_sessions: 4 },
    });
    const token: string | undefined = data?.token;`,
  "DELETE /v1/agents/{name}": `
    const { data } = await api.DELETE("/v1/agents/{name}", { params: { path: { name: "ci" } } });
    const killed: number | undefined = data?.sessions_killed;`,
  "GET /v1/history": `
    const { data } = await api.GET("/v1/history", {
      params: { query: { agent: "ci", status: "exited", limit: 20 } },
    });
    const next: string | null | undefined = data?.next_cursor;`,
  "GET /v1/history/{id}": `
    const { data } = await api.GET("/v1/history/{id}", { params: { path: { id: "h1" } } });
    const tail: string | undefined = data?.output_tail;`,
  "GET /metrics": `
    const { data } = await text.GET("/metrics", { parseAs: "text" });
    const exposition: string | undefined = data;`,
  "GET /v1/ws": `
    const { error } = await api.GET("/v1/ws"); // on the HTTP port: 426 upgrade_required
    const code: string | undefined = error?.error.code;`,
  "POST /mcp": `
    const { data } = await api.POST("/mcp", {
      body: { jsonrpc: "2.0", id: 1, method: "tools/list" },
    });
    const version: "2.0" | undefined = data?.jsonrpc;
    // openapi-fetch 0.17 drops parseAs from its result type when the body is an object literal
    // with a literal-typed field ("2.0"): a typed message keeps it.
    const call: Message = { jsonrpc: "2.0", id: 2, method: "tools/call" };
    const progress = await sse.POST("/mcp", {
      body: call,
      headers: { accept: "application/json, text/event-stream" },
      parseAs: "stream",
    });
    const stream: ReadableStream<Uint8Array> | null | undefined = progress.data;`,
  "POST /dashboard/sign-out": `
    const { response } = await api.POST("/dashboard/sign-out");
    const status: number = response.status;`,
  "POST /dashboard/sign-in": `
    const { data } = await api.POST("/dashboard/sign-in", { body: { code: "c0de" } });
    const session: string | undefined = data?.session;`,
  "POST /v1/dashboard/sign-in-links": `
    const { data } = await api.POST("/v1/dashboard/sign-in-links");
    const url: string | undefined = data?.url;`,
  "DELETE /v1/dashboard/sessions": `
    const { data } = await api.DELETE("/v1/dashboard/sessions");
    const ended: number | undefined = data?.ended;`,
};

/** Mistakes the check must catch, each marked as an expected error (unused marks fail). */
const CONTROLS = `
  // @ts-expect-error: no such operation.
  await api.GET("/v1/no-such-route");
  // @ts-expect-error: a JSON result is not a string.
  const wrong: string | undefined = (await api.GET("/healthz")).data;
  // @ts-expect-error: exec_command needs a cmd.
  await api.POST("/v1/exec_command", { body: { tty: false } });
  // @ts-expect-error: a result has no field the schema does not name.
  const none = (await api.GET("/v1/sessions")).data?.nothing;
`;

function clientSource(): string {
  const calls = Object.entries(CALLS).map(([route, body], i) =>
    `// ${route}\nexport async function call${i}() {${body}\n}\n`
  );
  return [
    `import createClient from "openapi-fetch";`,
    `import type { paths } from "./api.d.ts";`,
    `const baseUrl = "http://127.0.0.1:8787";`,
    `const api = createClient<paths, "application/json">({ baseUrl });`,
    `const text = createClient<paths, "text/plain">({ baseUrl });`,
    `const sse = createClient<paths, "text/event-stream">({ baseUrl });`,
    `type Message = paths["/mcp"]["post"]["requestBody"]["content"]["application/json"];`,
    ...calls,
    `export async function controls() {${CONTROLS}}`,
  ].join("\n");
}

Deno.test("a client generated from /openapi.json calls every operation without a cast", async () => {
  const server = await startServer();
  const dir = await Deno.makeTempDir({ prefix: "uexec-openapi-client-" });
  try {
    const res = await fetch(`${server.url}/openapi.json`);
    assert.equal(res.status, 200);
    const doc = await res.json();

    const operations = Object.entries(doc.paths as Record<string, Record<string, unknown>>)
      .flatMap(([path, ops]) => Object.keys(ops).map((m) => `${m.toUpperCase()} ${path}`));
    assert.deepEqual(Object.keys(CALLS).sort(), operations.sort(), "one call per operation");
    for (const [route, body] of Object.entries(CALLS)) {
      assert.doesNotMatch(body, /\bas\b|\bany\b|@ts-|[\w)\]]![.)\]]|[=(,]\s*</, `${route}: a cast`);
    }

    await Deno.writeTextFile(`${dir}/api.d.ts`, astToString(await openapiTS(doc)));
    await Deno.writeTextFile(`${dir}/client.ts`, clientSource());
    const check = await new Deno.Command(Deno.execPath(), {
      args: ["check", "--quiet", "--frozen", "--config", CONFIG, `${dir}/client.ts`],
      env: { NO_COLOR: "1" },
      stdout: "piped",
      stderr: "piped",
    }).output();
    const errors = new TextDecoder().decode(check.stderr);
    assert.equal(check.code, 0, `deno check of the generated client failed:\n${errors}`);
  } finally {
    await Deno.remove(dir, { recursive: true });
    await server.stop();
  }
});
