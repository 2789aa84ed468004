/**
 * The dashboard's sign-in and cookie authentication against a real server, as an attacker would
 * try them without a browser: the operator's token is exchanged once for an `HttpOnly`,
 * `SameSite=Strict` cookie and a redirect without it; an agent's or a wrong token opens nothing;
 * a cookie-authenticated state change needs the server's own `Origin`, and a browser request
 * from another site (`Sec-Fetch-Site`) is refused even for reads; the pages carry a strict CSP
 * and never leak the URL through `Referer`; no token reaches stderr.
 *
 * @module
 */

import assert from "node:assert/strict";
import { visible } from "../src/approvals/visible.ts";
import { visible as browserVisible } from "../src/dashboard/static/dom.js";
import { WebSessions } from "../src/service/web_sessions.ts";
import { OPERATOR } from "../src/service/principal.ts";
import { startServer, type TestServer } from "./helpers/server.ts";

/** Sign in with `token`; the response is not followed. */
function signIn(server: TestServer, token: string): Promise<Response> {
  return fetch(`${server.url}/?token=${encodeURIComponent(token)}`, { redirect: "manual" });
}

/** `name=value` of a `Set-Cookie` header. */
function cookiePair(setCookie: string): string {
  return setCookie.split(";")[0];
}

/** A request with a cookie and no bearer token; the body is read. */
async function withCookie(
  server: TestServer,
  cookie: string,
  method: string,
  path: string,
  headers: Record<string, string> = {},
  body?: unknown,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(server.url + path, {
    method,
    headers: {
      cookie,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
      ...headers,
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : {} };
}

Deno.test("dashboard sign-in: the operator's token, once, for a cookie", async (t) => {
  const server = await startServer();
  const own = server.url; // http://127.0.0.1:PORT
  const port = new URL(own).port;
  let cookie = "";
  let sessionId = "";
  try {
    await t.step(
      "the operator's token: 303 to / with an HttpOnly SameSite=Strict cookie",
      async () => {
        const res = await signIn(server, server.operatorToken);
        await res.body?.cancel();
        assert.equal(res.status, 303);
        assert.equal(res.headers.get("location"), "/");
        assert.equal(res.headers.get("referrer-policy"), "no-referrer");
        assert.equal(res.headers.get("cache-control"), "no-store");
        const setCookie = res.headers.get("set-cookie") ?? "";
        const [pair, ...attributes] = setCookie.split(/;\s*/);
        assert.match(pair, new RegExp(`^uexec_session_${port}=uexec_[A-Za-z0-9_-]{43}$`));
        assert.deepEqual(attributes, ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"]);
        assert.ok(!setCookie.includes(server.operatorToken));
        cookie = cookiePair(setCookie);
        sessionId = cookie.split("=")[1];
      },
    );

    await t.step("the cookie authenticates as the operator", async () => {
      const r = await withCookie(server, cookie, "GET", "/v1/agents");
      assert.equal(r.status, 200);
      assert.deepEqual((r.body.agents as { name: string }[]).map((a) => a.name), ["default"]);
      const page = await withCookie(server, cookie, "GET", "/v1/sessions", {
        "sec-fetch-site": "same-origin",
      });
      assert.equal(page.status, 200);
    });

    await t.step("a second sign-in opens a second, different session", async () => {
      const res = await signIn(server, server.operatorToken);
      await res.body?.cancel();
      const other = cookiePair(res.headers.get("set-cookie") ?? "");
      assert.notEqual(other, cookie);
      assert.equal((await withCookie(server, other, "GET", "/v1/agents")).status, 200);
    });

    await t.step("an agent's token opens nothing: 403 page, no cookie", async () => {
      const res = await signIn(server, server.agentToken);
      const text = await res.text();
      assert.equal(res.status, 403);
      assert.equal(res.headers.get("set-cookie"), null);
      assert.match(text, /it is not the operator&#39;s\./);
      assert.ok(!text.includes(server.agentToken));
    });

    await t.step("a wrong token opens nothing: 401 page, no cookie", async () => {
      const res = await signIn(server, `${server.operatorToken}x`);
      const text = await res.text();
      assert.equal(res.status, 401);
      assert.equal(res.headers.get("set-cookie"), null);
      assert.match(text, /not valid/);
    });

    await t.step("a made-up or other port's cookie authenticates nobody: 401", async () => {
      for (
        const forged of [
          `uexec_session_${port}=uexec_${"A".repeat(43)}`,
          `uexec_session_${port}=${server.operatorToken}`,
          `uexec_session_1=${sessionId}`,
          `uexec_session=${sessionId}`,
        ]
      ) {
        const r = await withCookie(server, forged, "GET", "/v1/agents");
        assert.equal(r.status, 401, forged);
      }
    });

    await t.step("a bearer header wins: a wrong one is 401 even with the cookie", async () => {
      const r = await withCookie(server, cookie, "GET", "/v1/agents", {
        authorization: "Bearer wrong-token-wrong-token",
      });
      assert.equal(r.status, 401);
      const agent = await withCookie(server, cookie, "GET", "/v1/agents", server.auth);
      assert.equal(agent.status, 403);
    });

    await t.step("a cookie POST with the server's own Origin passes", async () => {
      const r = await withCookie(server, cookie, "POST", "/v1/agents", { origin: own }, {
        name: "from-page",
      });
      assert.equal(r.status, 201);
    });

    await t.step("a cookie POST or DELETE without Origin is refused: 403", async () => {
      const post = await withCookie(server, cookie, "POST", "/v1/agents", {}, { name: "csrf" });
      assert.equal(post.status, 403);
      assert.equal((post.body.error as { code: string }).code, "forbidden_origin");
      const del = await withCookie(server, cookie, "DELETE", "/v1/agents/from-page");
      assert.equal(del.status, 403);
      assert.equal((del.body.error as { code: string }).code, "forbidden_origin");
      const agents = await server.operator.get("/v1/agents");
      assert.deepEqual(
        agents.body.agents.map((a: { name: string }) => a.name),
        ["default", "from-page"],
      );
    });

    await t.step("a cookie POST from a foreign Origin is refused: 403", async () => {
      for (
        const origin of ["http://evil.example", `http://127.0.0.1:${Number(port) + 1}`, "null"]
      ) {
        const r = await withCookie(server, cookie, "POST", "/v1/agents", { origin }, {
          name: "csrf",
        });
        assert.equal(r.status, 403, origin);
        assert.equal((r.body.error as { code: string }).code, "forbidden_origin");
      }
    });

    await t.step("a page's text/plain cookie POST is refused: 415", async () => {
      const res = await fetch(`${own}/v1/agents`, {
        method: "POST",
        headers: { cookie, origin: own, "content-type": "text/plain" },
        body: JSON.stringify({ name: "csrf" }),
      });
      await res.body?.cancel();
      assert.equal(res.status, 415);
    });

    await t.step("a cookie read from another site's page is refused: 403", async () => {
      for (const site of ["same-site", "cross-site", "none"]) {
        const r = await withCookie(server, cookie, "GET", "/v1/sessions", {
          "sec-fetch-site": site,
        });
        assert.equal(r.status, 403, site);
        assert.equal((r.body.error as { code: string }).code, "forbidden_origin");
      }
    });

    await t.step("the page: strict CSP, no referrer, no inline script", async () => {
      const res = await fetch(`${own}/`);
      const html = await res.text();
      assert.equal(res.status, 200);
      assert.equal(
        res.headers.get("content-security-policy"),
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
          "connect-src 'self'; img-src 'self' data:; font-src 'self'; object-src 'none'; " +
          "base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
      );
      assert.equal(res.headers.get("referrer-policy"), "no-referrer");
      assert.equal(res.headers.get("x-frame-options"), "DENY");
      const scripts = [...html.matchAll(/<script\b[^>]*>([\s\S]*?)<\/script>/g)];
      assert.deepEqual(scripts.map((m) => m[0]), [
        '<script type="module" src="/dashboard/app.js"></script>',
      ]);
      assert.ok(!/\son[a-z]+=/i.test(html), "no inline event handlers");
    });

    await t.step("the files: xterm.js from npm and the page's modules, nothing else", async () => {
      const xterm = await fetch(`${own}/dashboard/xterm.mjs`);
      const js = await xterm.text();
      assert.equal(xterm.headers.get("content-type"), "text/javascript; charset=utf-8");
      assert.ok(js.includes("export{") && js.includes(" as Terminal}"));
      assert.ok(!js.includes("sourceMappingURL"));
      const css = await fetch(`${own}/dashboard/xterm.css`);
      assert.match(await css.text(), /\.xterm /);
      for (const path of ["/dashboard/../main.ts", "/dashboard/%2e%2e%2fmain.ts", "/dashboard/x"]) {
        const res = await fetch(own + path);
        await res.body?.cancel();
        assert.equal(res.status, 404, path);
      }
    });

    await t.step("sign-out ends the session", async () => {
      const res = await fetch(`${own}/dashboard/sign-out`, {
        method: "POST",
        headers: { cookie, origin: own, "content-type": "application/json" },
        body: "{}",
      });
      await res.body?.cancel();
      assert.equal(res.status, 204);
      assert.match(res.headers.get("set-cookie") ?? "", /Max-Age=0/);
      assert.equal((await withCookie(server, cookie, "GET", "/v1/agents")).status, 401);
    });
  } finally {
    const { stdout, stderr } = await server.stop();
    const url = `${own}/?token=${encodeURIComponent(server.operatorToken)}`;
    assert.ok(stdout.split("\n").includes(`uexec dashboard: ${url}`), stdout);
    for (const secret of [server.operatorToken, server.agentToken, sessionId]) {
      assert.ok(!stderr.includes(secret), "no token or session id on stderr");
    }
  }
});

Deno.test("a sandboxed command cannot sign in, even with the operator's token", async () => {
  const server = await startServer();
  try {
    const r = await server.post("/v1/exec_command", {
      cmd: `curl -s -i '${server.url}/?token=${server.operatorToken}'`,
      login: false,
      tty: false,
      profile: "workspace-write-net",
    });
    assert.equal(r.status, 200);
    const [head, body] = r.body.output.split("\r\n\r\n");
    assert.match(head, /^HTTP\/1\.1 403 Forbidden\r\n/);
    assert.doesNotMatch(head, /set-cookie/i);
    assert.equal(JSON.parse(body).error.code, "forbidden_peer");
  } finally {
    await server.stop();
  }
});

Deno.test("dashboard off: no page, no sign-in, no URL printed", async () => {
  const server = await startServer({ UEXEC_DASHBOARD: "off" });
  try {
    for (const path of ["/", `/?token=${server.operatorToken}`, "/dashboard/app.js"]) {
      const res = await fetch(server.url + path, { redirect: "manual" });
      await res.body?.cancel();
      assert.equal(res.status, 404, path);
      assert.equal(res.headers.get("set-cookie"), null);
    }
  } finally {
    const { stdout } = await server.stop();
    assert.ok(!stdout.includes(server.operatorToken));
    assert.ok(!stdout.includes("uexec dashboard:"));
  }
});

Deno.test("web sessions expire and are capped", () => {
  let now = 1_000_000;
  const sessions = new WebSessions({ ttlMs: 60_000, now: () => now });
  const first = sessions.open(OPERATOR);
  assert.equal(first.maxAgeSeconds, 60);
  assert.equal(sessions.principal(first.id), OPERATOR);
  now += 59_999;
  assert.equal(sessions.principal(first.id), OPERATOR);
  now += 1;
  assert.equal(sessions.principal(first.id), undefined);
  const opened = Array.from({ length: 65 }, () => sessions.open(OPERATOR));
  assert.equal(sessions.principal(opened[0].id), undefined, "the oldest of 65 is dropped");
  assert.equal(sessions.principal(opened[1].id), OPERATOR);
  assert.equal(sessions.principal(opened[64].id), OPERATOR);
  sessions.close(opened[64].id);
  assert.equal(sessions.principal(opened[64].id), undefined);
});

Deno.test("the page shows hidden characters exactly as the server's approval records do", () => {
  const every = Array.from({ length: 0x3000 }, (_, i) => String.fromCodePoint(i)).join("") +
    "\ufeff\u{1f600}";
  assert.equal(browserVisible(every), visible(every));
  assert.equal(browserVisible("rm\x1b[2K -rf\u202e/"), "rm\\x1b[2K -rf\\u{202e}/");
});
