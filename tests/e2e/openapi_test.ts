/**
 * The OpenAPI document and its docs page: the document is valid OpenAPI 3.1 (checked by an
 * OpenAPI validator) and clean in Redocly's recommended lint rules, documents exactly the routes
 * the app serves, names only error codes the
 * code gives, and shares its request schemas with `/v1/tools`; a real server serves it without a
 * token behind the Host/Origin guard, and `/docs` renders it in headless Chromium with every
 * file from the server itself.
 *
 * @module
 */

import assert from "node:assert/strict";
import { validate } from "@readme/openapi-parser";
import { createConfig, lintFromString } from "@redocly/openapi-core";
import puppeteer from "puppeteer-core";
import { createApp } from "../../src/http/routes.ts";
import { ERRORS } from "../../src/errors.ts";
import { apiDocument, openApiPath, operationErrors } from "../../src/http/openapi.ts";
import { NOT_API, OPERATIONS } from "../../src/http/operations.ts";
import type { Service } from "../../src/service/service.ts";
import { startServer } from "../helpers/server.ts";

/** The page's global, as the functions puppeteer runs in the browser use it. */
declare const document: { querySelectorAll(selector: string): { length: number } };

const SRC = new URL("../../src/", import.meta.url).pathname;

// deno-lint-ignore no-explicit-any
type Json = any;

Deno.test("the document is valid OpenAPI 3.1", async () => {
  const doc: Json = apiDocument();
  const result = await validate(structuredClone(doc));
  assert.deepEqual(result, { valid: true, warnings: [], specification: "OpenAPI" });
  assert.equal(doc.openapi, "3.1.0");
});

Deno.test("the validator refuses a broken document (so the check above can fail)", async () => {
  const doc: Json = structuredClone(apiDocument());
  doc.paths["/v1/exec_command"].post.responses["200"] = 5;
  const result = await validate(doc);
  assert.equal(result.valid, false);
});

/** What Redocly's recommended rules find in `doc`: severity, rule and where, one a line. */
async function redocly(doc: unknown): Promise<string[]> {
  const problems = await lintFromString({
    source: JSON.stringify(doc),
    absoluteRef: "/openapi.json",
    config: await createConfig({ extends: ["recommended"] }),
  });
  return problems.map((p) => `${p.severity} ${p.ruleId} ${p.location[0]?.pointer}`);
}

Deno.test("Redocly's recommended rules: no error, one warning, which is justified", async () => {
  assert.deepEqual(await redocly(apiDocument()), [
    // GET /v1/ws succeeds with 101 Switching Protocols, no 2xx: the truth, see its operation.
    "warn operation-2xx-response #/paths/~1v1~1ws/get/responses",
  ]);
  // And the linter does find what it should (so the check above can fail).
  const doc: Json = structuredClone(apiDocument());
  delete doc.servers;
  doc.tags[0].description = undefined;
  assert.deepEqual((await redocly(doc)).slice(0, 2), [
    "error no-empty-servers #/openapi",
    "warn tag-description #/tags/0/description",
  ]);
});

Deno.test("every route the app serves is documented, and nothing else is", () => {
  // Only the route table is read: no handler runs, so the service is never touched.
  const app = createApp({ service: {} as Service, health: () => ({}), dashboard: true });
  const served = new Set(app.routes.map((r) => `${r.method} ${r.path}`));
  for (const [route, reason] of NOT_API) {
    assert.ok(served.has(route), `${route} is excused (${reason}) but not served`);
  }
  const api = [...served].filter((route) => !NOT_API.has(route)).sort();
  const documented = OPERATIONS.map((op) => `${op.method.toUpperCase()} ${op.path}`).sort();
  assert.deepEqual(api, documented);

  const paths = (apiDocument() as Json).paths;
  const inDocument = Object.entries(paths).flatMap(([path, ops]) =>
    Object.keys(ops as object).map((method) => `${method.toUpperCase()} ${path}`)
  ).sort();
  assert.deepEqual(
    inDocument,
    api.map((route) => {
      const [method, path] = route.split(" ");
      return `${method} ${openApiPath(path)}`;
    }).sort(),
  );
});

/** Every (code, status) the sources give: error classes, guard refusals, literal bodies. */
async function sourceErrors(): Promise<Map<string, number | undefined>> {
  const found = new Map<string, number | undefined>();
  const note = (code: string, status?: string) => {
    if (status !== undefined || !found.has(code)) {
      found.set(code, status === undefined ? undefined : Number(status));
    }
  };
  const walk = async (dir: string): Promise<void> => {
    for await (const entry of Deno.readDir(dir)) {
      const path = `${dir}${entry.name}`;
      if (entry.isDirectory) await walk(`${path}/`);
      else if (entry.name.endsWith(".ts")) {
        const text = await Deno.readTextFile(path);
        // An ApiError's status is the table's by construction: only its code is noted.
        for (const [, body] of text.matchAll(/class \w+ extends ApiError \{([\s\S]*?)\n\}/g)) {
          const code = /readonly code = "(\w+)"/.exec(body)?.[1];
          if (code) note(code);
        }
        for (const m of text.matchAll(/refusal\(\s*(\d+),\s*"(\w+)"/g)) note(m[2], m[1]);
        for (const m of text.matchAll(/status: (\d+), code: "(\w+)"/g)) note(m[2], m[1]);
        for (const m of text.matchAll(/error: \{\s*code: "(\w+)"/g)) note(m[1]);
        for (const m of text.matchAll(/errorBody\(\{\s*code: "(\w+)"/g)) note(m[1]);
      }
    }
  };
  await walk(SRC);
  return found;
}

Deno.test("every documented error code is one the code gives, with that status", async () => {
  const given = await sourceErrors();
  for (const [code, [status]] of Object.entries(ERRORS)) {
    assert.ok(given.has(code), `documented error ${code} appears nowhere in src/`);
    const actual = given.get(code);
    if (actual !== undefined) assert.equal(status, actual, `status of ${code}`);
  }
  // And the other way: every code the sources give is documented.
  const undocumented = [...given.keys()].filter((code) => !(code in ERRORS));
  assert.deepEqual(undocumented, []);
  for (const op of OPERATIONS) {
    for (const code of operationErrors(op)) assert.ok(code in ERRORS, `${op.path}: ${code}`);
  }
});

Deno.test({
  name: "a server serves /openapi.json and /docs to anyone behind the guard; Chromium renders it",
  // puppeteer keeps its own timers and sockets around the browser process.
  sanitizeOps: false,
  sanitizeResources: false,
  async fn(t) {
    const server = await startServer();
    const origin = new URL(server.url).origin;
    try {
      await t.step("/openapi.json needs no token and is the generated document", async () => {
        const res = await fetch(`${server.url}/openapi.json`);
        assert.equal(res.status, 200);
        assert.equal(res.headers.get("content-type"), "application/json");
        assert.deepEqual(await res.json(), JSON.parse(JSON.stringify(apiDocument())));
        for (const client of [server, server.operator]) {
          assert.equal((await client.get("/openapi.json")).status, 200);
        }
      });

      await t.step("a foreign Origin or Host is refused: 403", async () => {
        for (const path of ["/openapi.json", "/docs", "/docs/init.js"]) {
          const foreign = await server.raw(path, { headers: { origin: "http://evil.example" } });
          assert.equal(foreign.status, 403, path);
          assert.equal(JSON.parse(foreign.text).error.code, "forbidden_origin", path);
        }
        // fetch sends its own Host, so this one is written by hand.
        const { hostname, port } = new URL(server.url);
        const conn = await Deno.connect({ hostname, port: Number(port) });
        await conn.write(
          new TextEncoder().encode(
            "GET /docs HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
          ),
        );
        const reply = await new Response(conn.readable).text();
        assert.match(reply, /^HTTP\/1\.1 403 /);
        assert.match(reply, /"code":"forbidden_host"/);
      });

      await t.step("/v1/tools' parameters are the document's request bodies", async () => {
        const doc: Json = await (await fetch(`${server.url}/openapi.json`)).json();
        const { status, body } = await server.get("/v1/tools");
        assert.equal(status, 200);
        for (const tool of body.tools) {
          const op = doc.paths[`/v1/${tool.function.name}`].post;
          assert.deepEqual(
            tool.function.parameters,
            op.requestBody.content["application/json"].schema,
          );
        }
        assert.deepEqual(body.tools.map((tool: Json) => tool.function.name), [
          "exec_command",
          "write_stdin",
        ]);
      });

      await t.step("/docs is a page and files from this server, no URL elsewhere", async () => {
        const page = await fetch(`${server.url}/docs`);
        assert.equal(page.status, 200);
        assert.equal(page.headers.get("content-type"), "text/html; charset=utf-8");
        assert.match(page.headers.get("content-security-policy")!, /script-src 'self';/);
        const html = await page.text();
        const init = await fetch(`${server.url}/docs/init.js`);
        assert.equal(init.headers.get("content-type"), "text/javascript; charset=utf-8");
        const initJs = await init.text();
        assert.match(initJs, /url: "\/openapi\.json"/);
        assert.deepEqual([...`${html}\n${initJs}`.matchAll(/https?:\/\/[^\s"'<>)]+/g)], []);
        assert.doesNotMatch(html, /<script>|<script [^>]*>[^<]/); // no inline script
        const scripts = [...html.matchAll(/<(?:script src|link rel="stylesheet" href)="([^"]+)"/g)]
          .map((m) => m[1]);
        assert.deepEqual(scripts, [
          "/docs/swagger-ui.css",
          "/docs/swagger-ui-bundle.js",
          "/docs/init.js",
        ]);
        for (const path of scripts) {
          const res = await fetch(`${server.url}${path}`);
          assert.equal(res.status, 200, path);
          assert.ok((await res.text()).length > 1000 || path.endsWith("init.js"), path);
        }
        const missing = await fetch(`${server.url}/docs/../../deno.json`);
        assert.equal(missing.status, 404);
        await missing.body?.cancel();
      });

      await t.step(
        "headless Chromium renders every operation, loading nothing elsewhere",
        async () => {
          const browser = await puppeteer.launch({
            executablePath: "/usr/bin/chromium",
            args: ["--no-sandbox", "--headless=new", "--disable-gpu"],
          });
          try {
            const page = await browser.newPage();
            const elsewhere: string[] = [];
            const errors: string[] = [];
            page.on("request", (req) => {
              if (new URL(req.url()).origin !== origin && !req.url().startsWith("data:")) {
                elsewhere.push(req.url());
              }
            });
            page.on("pageerror", (err) => errors.push(String(err)));
            page.on("response", (res) => {
              if (res.status() >= 400) errors.push(`${res.status()} ${res.url()}`);
            });
            page.on("console", (msg) => {
              if (msg.type() === "error") errors.push(msg.text());
            });
            await page.goto(`${server.url}/docs`);
            await page.waitForFunction(
              (n) => document.querySelectorAll(".opblock").length === n,
              {},
              OPERATIONS.length,
            );
            const paths = await page.$$eval(
              ".opblock-summary-path",
              (els) => els.map((e) => e.getAttribute("data-path")),
            );
            assert.deepEqual(
              paths.sort(),
              OPERATIONS.map((op) => openApiPath(op.path)).sort(),
            );
            assert.deepEqual(elsewhere, []);
            assert.deepEqual(errors, []);
          } finally {
            await browser.close();
          }
        },
      );
    } finally {
      await server.stop();
    }
  },
});
