/**
 * The dashboard's sign-in and its credential against a real server, as an attacker would try
 * them without a browser: the start-up line carries a one-time code, never a token; the code
 * opens one browser session, once; the session id is a bearer credential and nothing a browser
 * sends by itself (the old cookie, with forged `Origin` and `Sec-Fetch-Site`) authenticates
 * anyone; an agent's token gets no code and no session; "Sign out" ends the session; the pages
 * carry a strict CSP and never leak the URL through `Referer`; no token, code or session id
 * reaches stderr. And the page's own event-stream client (api.js), which replaces `EventSource`
 * so that a stream carries the credential.
 *
 * @module
 */

import assert from "node:assert/strict";
import { visible } from "../../src/approvals/visible.ts";
import { visible as browserVisible } from "../../src/http/dashboard/static/dom.js";
import { EventStreamParser, openEventStream } from "../../src/http/dashboard/static/api.js";
import { SignInCodes } from "../../src/service/sign_in_codes.ts";
import { WebSessions } from "../../src/service/web_sessions.ts";
import { OPERATOR } from "../../src/service/principal.ts";
import { startServer, type TestServer } from "../helpers/server.ts";

const CODE = /^uexec_[A-Za-z0-9_-]{43}$/;

/** `POST /dashboard/sign-in` with `body`; the reply's status, JSON and headers. */
async function signIn(
  server: TestServer,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: Record<string, unknown>; headers: Headers }> {
  const res = await fetch(`${server.url}/dashboard/sign-in`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : {}, headers: res.headers };
}

/** The error code of a JSON error reply. */
function code(body: Record<string, unknown>): string {
  return (body.error as { code: string }).code;
}

Deno.test("dashboard sign-in: a one-time code for a bearer session, never a cookie", async (t) => {
  const server = await startServer();
  const own = server.url; // http://127.0.0.1:PORT
  const port = new URL(own).port;
  const secrets: string[] = [];
  let session = "";
  try {
    let startCode = "";
    await t.step("the start-up line: a link with a one-time code, no token", async () => {
      const line = await server.stdoutLine(/^uexec dashboard: /);
      const m = new RegExp(`^uexec dashboard: ${own.replaceAll(".", "\\.")}/#code=(\\S+)$`)
        .exec(line);
      assert.ok(m, line);
      startCode = decodeURIComponent(m[1]);
      assert.match(startCode, CODE);
      assert.notEqual(startCode, server.operatorToken);
      secrets.push(startCode);
    });

    await t.step("the code opens a session: a bearer id, no cookie, not stored", async () => {
      const r = await signIn(server, { code: startCode });
      assert.equal(r.status, 200);
      assert.equal(r.headers.get("set-cookie"), null);
      assert.equal(r.headers.get("cache-control"), "no-store");
      assert.deepEqual(Object.keys(r.body).sort(), ["expires_in_seconds", "session"]);
      assert.equal(r.body.expires_in_seconds, 43200);
      session = r.body.session as string;
      assert.match(session, CODE);
      assert.ok(![startCode, server.operatorToken].includes(session));
      secrets.push(session);
    });

    await t.step("the link works once: a second use opens nothing", async () => {
      const again = await signIn(server, { code: startCode });
      assert.equal(again.status, 401);
      assert.equal(code(again.body), "invalid_sign_in_code");
      assert.match(
        (again.body.error as { message: string }).message,
        /already used or has expired/,
      );
      assert.equal(again.headers.get("set-cookie"), null);
    });

    await t.step("the session id is the operator as a bearer, without Origin", async () => {
      const as = server.as(session);
      assert.equal((await as.get("/v1/agents")).status, 200);
      assert.equal((await as.post("/v1/agents", { name: "from-page" })).status, 201);
      assert.equal((await as.get("/v1/approvals")).status, 200);
    });

    await t.step("the old cookie authorizes nothing, with every forged header", async () => {
      const forged = {
        cookie: `uexec_session_${port}=${session}; uexec_session=${session}`,
        origin: own,
        "sec-fetch-site": "same-origin",
        "content-type": "application/json",
      };
      const calls: [string, string, unknown?][] = [
        ["GET", "/v1/agents"],
        ["GET", "/v1/approvals"],
        ["GET", "/v1/sessions"],
        ["GET", "/metrics"],
        ["POST", "/v1/agents", { name: "minted-by-cookie", max_profile: "full-access" }],
        ["POST", "/v1/dashboard/sign-in-links", {}],
        ["POST", "/mcp", { jsonrpc: "2.0", id: 1, method: "tools/list" }],
      ];
      for (const [method, path, body] of calls) {
        const res = await fetch(own + path, {
          method,
          headers: forged,
          body: body === undefined ? undefined : JSON.stringify(body),
        });
        const text = await res.text();
        assert.equal(res.status, 401, `${method} ${path}: ${text}`);
        assert.equal(JSON.parse(text).error.code, "unauthorized");
      }
      const events = await fetch(`${own}/v1/events`, { headers: forged });
      await events.body?.cancel();
      assert.equal(events.status, 401);
      const agents = await server.operator.get("/v1/agents");
      assert.deepEqual(
        agents.body.agents.map((a: { name: string }) => a.name),
        ["default", "from-page"],
      );
    });

    await t.step("a made-up session id, or a code as a bearer, is 401", async () => {
      for (const token of [`uexec_${"A".repeat(43)}`, startCode]) {
        assert.equal((await server.as(token).get("/v1/agents")).status, 401, token);
      }
    });

    let minted = "";
    await t.step("the operator mints a fresh link; it works once", async () => {
      const r = await server.operator.post("/v1/dashboard/sign-in-links", {});
      assert.equal(r.status, 201);
      assert.deepEqual(Object.keys(r.body).sort(), ["code", "expires_in_seconds", "url"]);
      assert.match(r.body.code, CODE);
      assert.equal(r.body.url, `${own}/#code=${r.body.code}`);
      assert.equal(r.body.expires_in_seconds, 300);
      minted = r.body.code;
      secrets.push(minted);
      const first = await signIn(server, { code: minted });
      assert.equal(first.status, 200);
      secrets.push(first.body.session as string);
      assert.notEqual(first.body.session, session);
      assert.equal((await signIn(server, { code: minted })).status, 401);
    });

    await t.step("an agent's token gets no link and no session", async () => {
      const link = await server.post("/v1/dashboard/sign-in-links", {});
      assert.equal(link.status, 403);
      assert.equal(link.body.error.code, "forbidden");
      const made = await server.operator.post("/v1/agents", {
        name: "wide",
        max_profile: "full-access",
      });
      assert.equal(
        (await server.as(made.body.token).post("/v1/dashboard/sign-in-links", {})).status,
        403,
      );
      for (const token of [server.agentToken, made.body.token, server.operatorToken]) {
        const r = await signIn(server, { code: token });
        assert.equal(r.status, 401);
        assert.equal(code(r.body), "invalid_sign_in_code");
      }
      const none = await fetch(`${own}/v1/dashboard/sign-in-links`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: "{}",
      });
      await none.body?.cancel();
      assert.equal(none.status, 401);
    });

    await t.step("a browser session cannot mint a link for itself", async () => {
      const r = await server.as(session).post("/v1/dashboard/sign-in-links", {});
      assert.equal(r.status, 403);
      assert.equal(r.body.error.code, "forbidden");
    });

    await t.step("a malformed exchange is a clear 4xx", async () => {
      for (const body of [{}, { code: 5 }, { code: "" }, { code: "x", more: 1 }, []]) {
        const r = await signIn(server, body);
        assert.equal(r.status, 400, JSON.stringify(body));
        assert.equal(code(r.body), "invalid_request");
      }
      const plain = await fetch(`${own}/dashboard/sign-in`, {
        method: "POST",
        headers: { "content-type": "text/plain" },
        body: JSON.stringify({ code: "x" }),
      });
      await plain.body?.cancel();
      assert.equal(plain.status, 415);
      const foreign = await signIn(server, { code: "x" }, { origin: "http://evil.example" });
      assert.equal(foreign.status, 403);
      assert.equal(code(foreign.body), "forbidden_origin");
    });

    await t.step("the old token link opens nothing: a 400 page, no cookie", async () => {
      for (const token of [server.operatorToken, server.agentToken]) {
        const res = await fetch(`${own}/?token=${encodeURIComponent(token)}`, {
          redirect: "manual",
        });
        const text = await res.text();
        assert.equal(res.status, 400);
        assert.equal(res.headers.get("set-cookie"), null);
        assert.equal(res.headers.get("referrer-policy"), "no-referrer");
        assert.match(text, /no longer carry the operator&#39;s token/);
        assert.ok(!text.includes(token));
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
      assert.equal(res.headers.get("x-content-type-options"), "nosniff");
      assert.equal(res.headers.get("cross-origin-opener-policy"), "same-origin");
      assert.equal(res.headers.get("cross-origin-resource-policy"), "same-origin");
      assert.equal(res.headers.get("cache-control"), "no-store");
      // Plain HTTP: no HSTS a browser would ignore (or pin a name with).
      assert.equal(res.headers.get("strict-transport-security"), null);
      assert.equal(res.headers.get("set-cookie"), null);
      const file = await fetch(`${own}/dashboard/app.js`);
      await file.body?.cancel();
      assert.equal(
        file.headers.get("content-security-policy"),
        res.headers.get("content-security-policy"),
      );
      assert.equal(file.headers.get("cache-control"), "no-cache");
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

    await t.step("sign-out ends the session and its live streams", async () => {
      // A terminal's output stream too: what the session prints after the sign-out reaches it
      // only if it did not end.
      const cat = await server.post("/v1/exec_command", {
        cmd: "cat",
        login: false,
        yield_time_ms: 250,
      });
      const id = cat.body.session_id as number;
      assert.equal(typeof id, "number", JSON.stringify(cat.body));
      const output = await fetch(`${own}/v1/sessions/${id}/stream`, {
        headers: { authorization: `Bearer ${session}` },
      });
      assert.equal(output.status, 200);
      const outputReader = output.body!.pipeThrough(new TextDecoderStream()).getReader();
      assert.match((await outputReader.read()).value ?? "", /^: connected/);
      const events = await fetch(`${own}/v1/events`, {
        headers: { authorization: `Bearer ${session}` },
      });
      assert.equal(events.status, 200);
      const res = await fetch(`${own}/dashboard/sign-out`, {
        method: "POST",
        headers: { authorization: `Bearer ${session}`, "content-type": "application/json" },
        body: "{}",
      });
      await res.body?.cancel();
      assert.equal(res.status, 204);
      assert.equal(res.headers.get("set-cookie"), null);
      assert.equal((await server.as(session).get("/v1/agents")).status, 401);
      // The stream it had open ends: a command run now (a begin and an end event) reaches it
      // only if it did not, and then the read below fails instead of waiting.
      const ran = await server.post("/v1/exec_command", { cmd: "true", login: false });
      assert.equal(ran.status, 200);
      const reader = events.body!.pipeThrough(new TextDecoderStream()).getReader();
      let rest = "";
      for (let r = await reader.read(); !r.done; r = await reader.read()) {
        rest += r.value;
        assert.doesNotMatch(rest, /^event:/m, "an event after sign-out");
      }
      const typed = await server.post("/v1/write_stdin", {
        session_id: id,
        chars: "after sign-out\n",
        yield_time_ms: 250,
      });
      assert.equal(typed.status, 200);
      // On a stream that did not end, the kill below ends it only after an output event.
      const killed = server.del(`/v1/sessions/${id}`);
      let streamed = "";
      for (let r = await outputReader.read(); !r.done; r = await outputReader.read()) {
        streamed += r.value;
        assert.doesNotMatch(streamed, /^event:/m, "output streamed after sign-out");
      }
      assert.equal((await killed).status, 200);
    });

    await t.step("the operator ends every browser session at once", async () => {
      const opened: string[] = [];
      for (let i = 0; i < 2; i++) {
        const link = await server.operator.post("/v1/dashboard/sign-in-links", {});
        const r = await signIn(server, { code: link.body.code });
        opened.push(r.body.session as string);
      }
      secrets.push(...opened);
      const agent = await server.del("/v1/dashboard/sessions");
      assert.equal(agent.status, 403);
      assert.equal((await server.as(opened[0]).get("/v1/agents")).status, 200);
      const ended = await server.operator.del("/v1/dashboard/sessions");
      assert.equal(ended.status, 200);
      // These two and the one the minted link opened (the first was signed out).
      assert.deepEqual(ended.body, { ended: 3 });
      for (const id of opened) assert.equal((await server.as(id).get("/v1/agents")).status, 401);
      assert.deepEqual((await server.operator.del("/v1/dashboard/sessions")).body, { ended: 0 });
    });
  } finally {
    const { stdout, stderr } = await server.stop();
    assert.ok(!stdout.includes(server.operatorToken), "no operator token on stdout");
    for (const secret of [server.operatorToken, server.agentToken, ...secrets]) {
      assert.ok(!stderr.includes(secret), "no token, code or session id on stderr");
    }
  }
});

Deno.test("a sandboxed command can neither sign in nor spend the code", async () => {
  const server = await startServer();
  try {
    const link = await server.operator.post("/v1/dashboard/sign-in-links", {});
    const r = await server.post("/v1/exec_command", {
      cmd: `curl -s -i -H 'content-type: application/json' ` +
        `-d '{"code":"${link.body.code}"}' '${server.url}/dashboard/sign-in'`,
      login: false,
      tty: false,
      profile: "workspace-write-net",
    });
    assert.equal(r.status, 200);
    const [head, body] = r.body.output.split("\r\n\r\n");
    assert.match(head, /^HTTP\/1\.1 403 Forbidden\r\n/);
    assert.equal(JSON.parse(body).error.code, "forbidden_peer");
    assert.doesNotMatch(body, /session/);
    const mine = await signIn(server, { code: link.body.code });
    assert.equal(mine.status, 200, "the code is still the operator's to use");
  } finally {
    await server.stop();
  }
});

Deno.test("dashboard off: no page, no sign-in, no link", async () => {
  const server = await startServer({ UEXEC_DASHBOARD: "off" });
  try {
    for (const path of ["/", `/?token=${server.operatorToken}`, "/dashboard/app.js"]) {
      const res = await fetch(server.url + path, { redirect: "manual" });
      await res.body?.cancel();
      assert.equal(res.status, 404, path);
    }
    assert.equal((await signIn(server, { code: "x" })).status, 404);
    const link = await server.operator.post("/v1/dashboard/sign-in-links", {});
    assert.equal(link.status, 404);
  } finally {
    const { stdout } = await server.stop();
    assert.ok(!stdout.includes(server.operatorToken));
    assert.ok(!stdout.includes("uexec dashboard:"));
  }
});

Deno.test("UEXEC_DASHBOARD_CODE_MINUTES sets how long a link works; a bad one stops start", async () => {
  const server = await startServer({ UEXEC_DASHBOARD_CODE_MINUTES: "1" });
  try {
    const link = await server.operator.post("/v1/dashboard/sign-in-links", {});
    assert.equal(link.body.expires_in_seconds, 60);
  } finally {
    await server.stop();
  }
  for (const bad of ["0", "61", "5m"]) {
    await assert.rejects(
      startServer({ UEXEC_DASHBOARD_CODE_MINUTES: bad }),
      new RegExp(`UEXEC_DASHBOARD_CODE_MINUTES must be an integer from 1 to 60, got "${bad}"`),
    );
  }
});

Deno.test("sign-in codes work once, expire and are capped", () => {
  let now = 1_000_000;
  const codes = new SignInCodes({ ttlMs: 300_000, now: () => now });
  const first = codes.mint();
  assert.equal(first.expiresInSeconds, 300);
  assert.match(first.code, CODE);
  assert.equal(codes.redeem(first.code), true);
  assert.equal(codes.redeem(first.code), false, "used");
  const late = codes.mint();
  now += 299_999;
  const onTime = codes.mint();
  now += 1;
  assert.equal(codes.redeem(late.code), false, "expired");
  assert.equal(codes.redeem(onTime.code), true);
  assert.equal(codes.redeem("uexec_made-up"), false);
  const minted = Array.from({ length: 17 }, () => codes.mint());
  assert.equal(codes.redeem(minted[0].code), false, "the oldest of 17 is dropped");
  assert.equal(codes.redeem(minted[1].code), true);
  assert.equal(codes.redeem(minted[16].code), true);
});

Deno.test("web sessions expire, are capped, and tell when they end", () => {
  let now = 1_000_000;
  const sessions = new WebSessions({ ttlMs: 60_000, now: () => now });
  const first = sessions.open(OPERATOR);
  assert.equal(first.maxAgeSeconds, 60);
  const principal = sessions.principal(first.id)!;
  assert.deepEqual(principal, OPERATOR);
  assert.notEqual(principal, OPERATOR, "a principal of its own");
  assert.equal(sessions.current(principal), true);
  assert.equal(sessions.current(OPERATOR), true, "the token's operator is no session's");
  now += 59_999;
  assert.equal(sessions.principal(first.id), principal);
  now += 1;
  assert.equal(sessions.principal(first.id), undefined);
  assert.equal(sessions.current(principal), false);
  const opened = Array.from({ length: 65 }, () => sessions.open(OPERATOR));
  const oldest = sessions.principal(opened[0].id);
  assert.equal(sessions.principal(opened[1].id)?.role, "operator");
  const last = sessions.principal(opened[64].id)!;
  assert.equal(oldest, undefined, "the oldest of 65 is dropped");
  const ended: string[] = [];
  sessions.onEnd(last, () => ended.push("last"));
  const off = sessions.onEnd(sessions.principal(opened[1].id)!, () => ended.push("second"));
  off();
  sessions.close(opened[64].id);
  sessions.close(opened[1].id);
  assert.deepEqual(ended, ["last"]);
  assert.equal(sessions.principal(opened[64].id), undefined);
  assert.equal(sessions.current(last), false);
  sessions.onEnd(last, () => ended.push("already"));
  assert.deepEqual(ended, ["last", "already"]);
  const survivor = sessions.principal(opened[2].id)!;
  sessions.onEnd(survivor, () => ended.push("all"));
  assert.equal(sessions.closeAll(), 62);
  assert.equal(sessions.principal(opened[2].id), undefined);
  assert.deepEqual(ended, ["last", "already", "all"]);
  assert.equal(sessions.closeAll(), 0);
});

/** What a parser dispatches for `chunks`, and the `retry:` values it saw. */
function parse(chunks: string[]): { events: [string, string, string][]; retries: number[] } {
  const events: [string, string, string][] = [];
  const retries: number[] = [];
  const parser = new EventStreamParser(
    (type: string, data: string, id: string) => events.push([type, data, id]),
    (ms: number) => retries.push(ms),
  );
  for (const chunk of chunks) parser.push(chunk);
  return { events, retries };
}

Deno.test("the page's event-stream parser: fields, line ends, any chunking", () => {
  const stream = ': connected\n\nevent: output\nid: 7\ndata: {"a":1}\n\n' +
    "data:first\ndata: second\n\n" + // no type: "message"; two data lines joined by \n
    "retry: 25\nevent: lone\n\n" + // no data: nothing dispatched
    "id: bad\0id\nevent: end\ndata\n\n" + // an id with NUL is ignored; "data" alone is ""
    "retry: x1\nevent: cut\ndata: never"; // unterminated: never dispatched
  const expected = [
    ["output", '{"a":1}', "7"],
    ["message", "first\nsecond", "7"],
    ["end", "", "7"],
  ];
  for (const ending of ["\n", "\r\n", "\r"]) {
    const text = stream.replaceAll("\n", ending);
    assert.deepEqual(parse([text]), { events: expected, retries: [25] }, JSON.stringify(ending));
    for (let cut = 1; cut < text.length; cut++) {
      const split = parse([text.slice(0, cut), text.slice(cut)]);
      assert.deepEqual(split.events, expected, `${JSON.stringify(ending)} cut at ${cut}`);
    }
    assert.deepEqual(parse([...text]).events, expected, "one character at a time");
  }
});

Deno.test("openEventStream: EventSource's shape, reconnects with Last-Event-ID", async () => {
  const encoder = new TextEncoder();
  const seen: { path: string; lastEventId: string | null; cookie: string | null }[] = [];
  const { promise: cancelled, resolve: cancel } = Promise.withResolvers<void>();
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
    const path = new URL(req.url).pathname;
    seen.push({
      path,
      lastEventId: req.headers.get("last-event-id"),
      cookie: req.headers.get("cookie"),
    });
    if (path === "/gone") {
      return Response.json({ error: { code: "unauthorized" } }, { status: 401 });
    }
    const first = seen.filter((r) => r.path === "/events").length === 1;
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        if (first) {
          // One event with an id, then the stream ends: the client must come back.
          controller.enqueue(encoder.encode("retry: 1\nid: 3\nevent: output\ndata: one\n\n"));
          controller.close();
        } else controller.enqueue(encoder.encode("event: output\ndata: two\n\n"));
      },
      cancel: () => cancel(),
    });
    return new Response(body, { headers: { "content-type": "text/event-stream" } });
  });
  const base = `http://127.0.0.1:${server.addr.port}`;
  try {
    const stream = openEventStream(`${base}/events`);
    assert.equal(stream.readyState, stream.CONNECTING);
    const got: string[] = [];
    const { promise: both, resolve } = Promise.withResolvers<void>();
    stream.addEventListener("open", () => got.push("open"));
    stream.onerror = () => got.push(`error ${stream.readyState}`);
    stream.addEventListener("output", (event) => {
      const e = event as MessageEvent;
      got.push(`${e.data} ${e.lastEventId}`);
      if (e.data === "two") resolve();
    });
    await both;
    assert.deepEqual(got, ["open", "one 3", "error 0", "open", "two 3"]);
    assert.equal(stream.readyState, stream.OPEN);
    assert.deepEqual(seen, [
      { path: "/events", lastEventId: null, cookie: null },
      { path: "/events", lastEventId: "3", cookie: null },
    ]);
    stream.close();
    assert.equal(stream.readyState, stream.CLOSED);
    await cancelled;

    const refused = openEventStream(`${base}/gone`);
    const { promise: failed, resolve: fail } = Promise.withResolvers<void>();
    refused.onerror = () => fail();
    await failed;
    assert.equal(refused.readyState, refused.CLOSED, "a 401 is not retried");
  } finally {
    await server.shutdown();
  }
  assert.equal(seen.filter((r) => r.path === "/gone").length, 1);
});

Deno.test("the page shows hidden characters exactly as the server's approval records do", () => {
  const every = Array.from({ length: 0x3000 }, (_, i) => String.fromCodePoint(i)).join("") +
    "\ufeff\u{1f600}";
  assert.equal(browserVisible(every), visible(every));
  assert.equal(browserVisible("rm\x1b[2K -rf\u202e/"), "rm\\x1b[2K -rf\\u{202e}/");
});
