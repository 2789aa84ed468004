/**
 * The dashboard in a real browser: headless Chromium (Debian's `chromium`, which `.ci/run`
 * installs) driven by puppeteer-core against a real server with real sandboxed sessions. One
 * browser for the file; every wait is on the page's DOM or on the API, never a sleep.
 * Screenshots go to tests/artifacts/ (docs/'s come from there). The sign-in's credential
 * is followed too: it stays with the dashboard's origin, so a page on another loopback port
 * that the operator opens in the same browser gets nothing of it.
 *
 * @module
 */

import assert from "node:assert/strict";
import type { Page } from "puppeteer-core";
import {
  launchBrowser,
  pageErrors,
  signInDashboard,
  signInLink,
  terminalText,
  waitForTerminal,
} from "../helpers/dashboard.ts";
import { startServer } from "../helpers/server.ts";

/** The page's globals, as the functions puppeteer runs in the browser use them. */
declare const document: {
  cookie: string;
  querySelector(selector: string): { textContent: string | null } | null;
};
declare const sessionStorage:
  & { length: number; key(i: number): string | null }
  & Record<
    string,
    string
  >;
declare const localStorage: { length: number };

/** Everything a page's `sessionStorage` holds, as `[key, value]` pairs. */
function storage(page: Page): Promise<[string, string][]> {
  return page.evaluate(() =>
    Array.from({ length: sessionStorage.length }, (_, i) => {
      const key = sessionStorage.key(i)!;
      return [key, sessionStorage[key]] as [string, string];
    })
  );
}
const ARTIFACTS = new URL("../artifacts/", import.meta.url).pathname;

async function screenshot(page: Page, name: string): Promise<void> {
  await Deno.mkdir(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: `${ARTIFACTS}${name}.png` });
}

Deno.test({
  name: "dashboard in a browser: sign in, watch, approve, deny, manage agents",
  // puppeteer keeps its own timers and sockets around the browser process.
  sanitizeOps: false,
  sanitizeResources: false,
  async fn(t) {
    const server = await startServer({ UEXEC_APPROVAL_POLICY: "on-request" });
    const browser = await launchBrowser();
    const page = await browser.newPage();
    const errors = pageErrors(page);
    const refused: string[] = [];
    page.on("response", (res) => {
      if (res.status() >= 400) refused.push(`${res.status()} ${new URL(res.url()).pathname}`);
    });
    try {
      await t.step("an old link with a token in ?token= opens nothing", async () => {
        const res = await page.goto(`${server.url}/?token=${server.operatorToken}`);
        assert.equal(res?.status(), 400);
        assert.deepEqual(await page.cookies(), []);
        const message = await page.$eval(".error", (e) => e.textContent);
        assert.match(message ?? "", /^Sign-in links no longer carry the operator's token/);
      });

      const link = await signInLink(server);
      let credential = "";
      await t.step(
        "sign in: the code leaves the address bar; no cookie; a session in this origin only",
        async () => {
          assert.match(link, new RegExp(`^${server.url}/#code=uexec_[A-Za-z0-9_-]{43}$`));
          await signInDashboard(page, server, link);
          assert.equal(page.url(), `${server.url}/`);
          assert.deepEqual(await page.cookies(), []);
          assert.equal(await page.evaluate(() => document.cookie), "");
          const stored = await storage(page);
          assert.equal(stored.length, 1);
          assert.equal(stored[0][0], "uexec.dashboard.session");
          credential = stored[0][1];
          assert.match(credential, /^uexec_[A-Za-z0-9_-]{43}$/);
          assert.ok(![server.operatorToken, link.split("#code=")[1]].includes(credential));
          assert.equal(await page.$eval("#status", (e) => e.textContent), "live");
        },
      );

      await t.step("the same link again: a clear page, no credential", async () => {
        const other = await browser.newPage();
        try {
          await other.goto(link);
          await other.waitForSelector("main.signed-out");
          assert.equal(other.url(), `${server.url}/`);
          const notice = await other.$eval("#notice", (e) => e.textContent);
          assert.match(notice ?? "", /^This sign-in link was already used or has expired/);
          assert.equal(await other.$eval("#status", (e) => e.textContent), "signed out");
          assert.deepEqual(await storage(other), []);
          assert.deepEqual(await other.cookies(), []);
        } finally {
          await other.close();
        }
      });

      await t.step("a page on another loopback port gets no credential", async () => {
        const requests: Record<string, string>[] = [];
        const elsewhere = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
          requests.push(Object.fromEntries(req.headers));
          return new Response("<!doctype html><title>dev server</title><p>an agent's page</p>", {
            headers: { "content-type": "text/html" },
          });
        });
        const devUrl = `http://127.0.0.1:${elsewhere.addr.port}/`;
        const tab = await browser.newPage();
        try {
          // In this very tab, and in another: neither sends nor holds anything of the sign-in.
          for (const p of [page, tab]) {
            await p.goto(devUrl);
            const held = await p.evaluate(() => ({
              cookie: document.cookie,
              session: sessionStorage.length,
              local: localStorage.length,
            }));
            assert.deepEqual(held, { cookie: "", session: 0, local: 0 });
          }
        } finally {
          await tab.close();
          await elsewhere.shutdown();
        }
        assert.ok(requests.length >= 2);
        for (const headers of requests) {
          assert.equal(headers.cookie, undefined, JSON.stringify(headers));
          assert.equal(headers.authorization, undefined);
          assert.ok(!JSON.stringify(headers).includes(credential));
        }
        // Back on the dashboard, the tab is still signed in (its origin's storage kept it).
        await page.goto(`${server.url}/`);
        await page.waitForSelector("body[data-ready=true]");
      });

      await t.step("the credential replayed as the old cookie authorizes nothing", async () => {
        const own = server.url;
        const res = await fetch(`${own}/v1/agents`, {
          headers: {
            cookie: `uexec_session_${new URL(own).port}=${credential}`,
            origin: own,
            "sec-fetch-site": "same-origin",
          },
        });
        await res.body?.cancel();
        assert.equal(res.status, 401);
        // (It is a real credential: as the bearer header the page sends, it is the operator.)
        assert.equal((await server.as(credential).get("/v1/agents")).status, 200);
      });

      let sessionId = 0;
      await t.step("a session's output appears in its live terminal", async () => {
        const started = await server.post("/v1/exec_command", {
          cmd: "cat",
          tty: true,
          login: false,
          yield_time_ms: 250,
        });
        assert.equal(started.status, 200);
        sessionId = started.body.session_id;
        const open = `tr[data-session="${sessionId}"] button.open-terminal`;
        await page.waitForSelector(open);
        const row = await page.$eval(
          `tr[data-session="${sessionId}"]`,
          (tr) => [...tr.children].slice(0, 5).map((td) => td.textContent),
        );
        assert.deepEqual(row, [
          String(sessionId),
          "default",
          "cat",
          "workspace-write",
          server.workspace,
        ]);
        await page.waitForFunction(
          (id) =>
            /^[\d.]+ (KiB|MiB)$/.test(
              document.querySelector(`tr[data-session="${id}"] td.memory`)?.textContent ?? "",
            ),
          {},
          sessionId,
        );
        await page.click(open);
        await page.waitForSelector("#terminal .xterm-rows");
        const hostile = "<img src=x data-x=1>hello-from-agent";
        const wrote = await server.post("/v1/write_stdin", {
          session_id: sessionId,
          chars: `${hostile}\n`,
          yield_time_ms: 250,
        });
        assert.equal(wrote.status, 200);
        await waitForTerminal(page, "hello-from-agent");
        const text = await terminalText(page);
        assert.ok(text.includes(hostile), text);
        assert.equal(await page.$$eval("img", (imgs) => imgs.length), 0, "output is text");
        await screenshot(page, "sessions");
      });

      await t.step("the operator types into the terminal after choosing to", async () => {
        await page.focus("#terminal textarea");
        await page.keyboard.type("ignored-while-read-only");
        await page.click("#terminal-type");
        await page.keyboard.type("typed-by-operator\n");
        // The terminal echoes the line, then cat prints it back: both arrive on the stream.
        await page.waitForFunction(
          () =>
            (document.querySelector("#terminal .xterm-rows")?.textContent ?? "")
              .split("typed-by-operator").length === 3,
        );
        assert.ok(!(await terminalText(page)).includes("ignored-while-read-only"));
        await page.click("#terminal-type");
        const killed = await server.del(`/v1/sessions/${sessionId}`);
        assert.equal(killed.status, 200);
        await waitForTerminal(page, `[session ${sessionId} exited with`);
        await page.waitForFunction(
          (id) => !document.querySelector(`tr[data-session="${id}"]`),
          {},
          sessionId,
        );
      });

      await t.step(
        "a pending escalation arrives live, is approved, its command finishes",
        async () => {
          const command = "printf '\x1b[31m<b>x</b>'; echo approved-and-ran";
          const pending = server.post("/v1/exec_command", {
            cmd: command,
            login: false,
            sandbox_permissions: "require_escalated",
            justification: "needs the <i>whole</i> machine",
          });
          await page.click('.tab[data-view="approvals"]');
          const card = await page.waitForSelector("article.approval");
          const shown = await card!.evaluate((article) => ({
            command: article.querySelector("pre.command")?.textContent,
            fields: Object.fromEntries(
              [...article.querySelectorAll("dt")].map((
                dt,
              ) => [dt.textContent, dt.nextElementSibling?.textContent]),
            ),
          }));
          assert.equal(shown.command, "printf '\\x1b[31m<b>x</b>'; echo approved-and-ran");
          assert.equal(shown.fields.agent, "default");
          assert.equal(shown.fields.workdir, server.workspace);
          assert.equal(shown.fields.profile, "workspace-write");
          assert.equal(shown.fields.justification, "needs the <i>whole</i> machine");
          assert.equal(shown.fields.runs, "without any sandbox, with the server's own privileges");
          assert.equal(
            await page.$$eval("article.approval b, article.approval i", (e) => e.length),
            0,
          );
          assert.equal(await page.$eval("#count-approvals", (e) => e.textContent), "1");
          await screenshot(page, "approvals");
          await page.click("article.approval button.approve");
          const r = await pending;
          assert.equal(r.status, 200);
          assert.equal(r.body.exit_code, 0);
          assert.equal(r.body.output, "\x1b[31m<b>x</b>approved-and-ran\r\n");
          await page.waitForSelector("#approvals-empty:not([hidden])");
        },
      );

      await t.step("another is denied in the UI: the agent's call is refused", async () => {
        const target = `${server.workspace}/never`;
        const pending = server.post("/v1/exec_command", {
          cmd: `touch ${target}`,
          login: false,
          sandbox_permissions: "require_escalated",
          justification: "deny me",
        });
        await page.waitForSelector("article.approval button.deny");
        await page.click("article.approval button.deny");
        const r = await pending;
        assert.equal(r.status, 403);
        assert.equal(r.body.error.code, "rejected");
        await assert.rejects(Deno.stat(target), Deno.errors.NotFound);
        await page.waitForSelector("#approvals-empty:not([hidden])");
      });

      await t.step("history: filtered by denial, or a clear message without it", async () => {
        await page.click('.tab[data-view="history"]');
        const probe = await server.operator.get("/v1/history");
        if (probe.status === 404) {
          await page.waitForSelector("#history-message:not([hidden])");
          assert.equal(
            await page.$eval("#history-message", (e) => e.textContent),
            "History is not available on this server (GET /v1/history answered 404).",
          );
          return;
        }
        assert.equal(probe.status, 200);
        await page.waitForSelector("#history-table tbody tr");
        await page.click('#history-filters input[name="denied"]');
        await page.click('#history-filters button[type="submit"]');
        await page.waitForSelector('#history-table[data-query="status=denied&limit=50"]');
        const rows = await page.$$eval(
          "#history-table tbody tr",
          (trs) => trs.map((tr) => [tr.getAttribute("data-status"), tr.children[2].textContent]),
        );
        assert.deepEqual(rows, [["denied", `touch ${server.workspace}/never`]]);
        await screenshot(page, "history");
      });

      await t.step("mint an agent in the UI, then revoke it", async () => {
        await page.click('.tab[data-view="agents"]');
        await page.type('#agent-form input[name="name"]', "ci-bot");
        await page.type('#agent-form input[name="max_profile"]', "read-only");
        await page.click('#agent-form button[type="submit"]');
        await page.waitForSelector('tr[data-agent="ci-bot"]');
        const token = await page.$eval("#agent-minted-token", (e) => e.textContent ?? "");
        assert.match(token, /^uexec_[A-Za-z0-9_-]{43}$/);
        const listed = await server.as(token).get("/v1/sessions");
        assert.equal(listed.status, 200);
        const agents = await server.operator.get("/v1/agents");
        assert.equal(
          agents.body.agents.find((a: { name: string }) => a.name === "ci-bot").max_profile,
          "read-only",
        );
        await screenshot(page, "agents");
        const revoke = 'tr[data-agent="ci-bot"] button.revoke';
        await page.click(revoke);
        await page.waitForSelector(`${revoke}.confirm`);
        await page.click(revoke);
        await page.waitForFunction(() => !document.querySelector('tr[data-agent="ci-bot"]'));
        assert.equal((await server.as(token).get("/v1/sessions")).status, 401);
      });

      await t.step("the page never broke its CSP or threw", () => {
        assert.deepEqual(errors, []);
        // A session that ended before the page asked for its details (the approved one above) is
        // a 404 the page expects; so is history on a server without it.
        const history = refused.includes("404 /v1/history") ? ["404 /v1/history"] : [];
        assert.deepEqual(
          refused.filter((r) => !/^404 \/v1\/sessions\/\d+$/.test(r)),
          ["400 /", ...history],
        );
      });

      await t.step("sign out ends the session and forgets it", async () => {
        await page.click("#sign-out");
        await page.waitForSelector("main.signed-out");
        assert.match(await page.$eval("#notice", (e) => e.textContent) ?? "", /^Not signed in\./);
        assert.deepEqual(await storage(page), []);
        assert.equal((await server.as(credential).get("/v1/agents")).status, 401);
      });
    } finally {
      await browser.close();
      const { stderr } = await server.stop();
      assert.ok(!stderr.includes(server.operatorToken), "no operator token on stderr");
    }
  },
});
