/**
 * The dashboard in a real browser: headless Chromium (Debian's `chromium`, which `.ci/run`
 * installs) driven by puppeteer-core against a real server with real sandboxed sessions. One
 * browser for the file; every wait is on the page's DOM or on the API, never a sleep.
 * Screenshots go to tests/artifacts/ (the README's come from there).
 *
 * @module
 */

import assert from "node:assert/strict";
import puppeteer, { type Browser, type Page } from "puppeteer-core";
import { startServer } from "./helpers/server.ts";

/** The page's global, as the functions puppeteer runs in the browser use it. */
declare const document: {
  cookie: string;
  querySelector(selector: string): { textContent: string | null } | null;
};

const CHROMIUM = "/usr/bin/chromium";
const ARTIFACTS = new URL("./artifacts/", import.meta.url).pathname;

async function launch(): Promise<Browser> {
  try {
    await Deno.stat(CHROMIUM);
  } catch {
    throw new Error(`${CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)`);
  }
  return await puppeteer.launch({
    executablePath: CHROMIUM,
    args: ["--no-sandbox", "--headless=new", "--disable-gpu", "--window-size=1280,900"],
    defaultViewport: { width: 1280, height: 900 },
  });
}

async function screenshot(page: Page, name: string): Promise<void> {
  await Deno.mkdir(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: `${ARTIFACTS}${name}.png` });
}

/** The text of the open terminal's rendered rows. */
function terminalText(page: Page): Promise<string> {
  return page.$eval("#terminal .xterm-rows", (rows) => rows.textContent ?? "");
}

/** Wait until the open terminal shows `text`. */
async function waitForTerminal(page: Page, text: string): Promise<void> {
  await page.waitForFunction(
    (wanted) => document.querySelector("#terminal .xterm-rows")?.textContent?.includes(wanted),
    {},
    text,
  );
}

Deno.test({
  name: "dashboard in a browser: sign in, watch, approve, deny, manage agents",
  // puppeteer keeps its own timers and sockets around the browser process.
  sanitizeOps: false,
  sanitizeResources: false,
  async fn(t) {
    const server = await startServer({ UEXEC_APPROVAL_POLICY: "on-request" });
    const browser = await launch();
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on("pageerror", (err) => errors.push(String(err)));
    page.on("console", (msg) => {
      if (msg.type() === "error" && !msg.text().startsWith("Failed to load resource")) {
        errors.push(msg.text());
      }
    });
    const refused: string[] = [];
    page.on("response", (res) => {
      if (res.status() >= 400) refused.push(`${res.status()} ${new URL(res.url()).pathname}`);
    });
    try {
      await t.step("an agent's token in ?token= does not open the dashboard", async () => {
        const res = await page.goto(`${server.url}/?token=${server.agentToken}`);
        assert.equal(res?.status(), 403);
        assert.deepEqual(await page.cookies(), []);
        const message = await page.$eval(".error", (e) => e.textContent);
        assert.equal(message, "This token may not open the dashboard: it is not the operator's.");
      });

      await t.step(
        "sign in: the token leaves the URL for an HttpOnly SameSite cookie",
        async () => {
          await page.goto(`${server.url}/?token=${encodeURIComponent(server.operatorToken)}`);
          assert.equal(page.url(), `${server.url}/`);
          const cookies = await page.cookies();
          assert.equal(cookies.length, 1);
          const [cookie] = cookies;
          assert.equal(cookie.name, `uexec_session_${new URL(server.url).port}`);
          assert.equal(cookie.httpOnly, true);
          assert.equal(cookie.sameSite, "Strict");
          assert.equal(cookie.secure, false);
          assert.equal(cookie.path, "/");
          assert.notEqual(cookie.value, server.operatorToken);
          assert.equal(await page.evaluate(() => document.cookie), "");
          await page.waitForSelector("body[data-ready=true]");
          assert.equal(await page.$eval("#status", (e) => e.textContent), "live");
        },
      );

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
          ["403 /", ...history],
        );
      });
    } finally {
      await browser.close();
      const { stderr } = await server.stop();
      assert.ok(!stderr.includes(server.operatorToken), "no operator token on stderr");
    }
  },
});
