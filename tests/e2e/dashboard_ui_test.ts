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
import type { Page } from "puppeteer-core";
import {
  launchBrowser,
  pageErrors,
  signInDashboard,
  terminalText,
  waitForTerminal,
} from "../helpers/dashboard.ts";
import { startServer, type TestServer } from "../helpers/server.ts";

/** The page's globals, as the functions puppeteer runs in the browser use them. */
// deno-lint-ignore no-explicit-any
declare const document: any;
declare const localStorage: { getItem(key: string): string | null; removeItem(key: string): void };
// deno-lint-ignore no-explicit-any
declare function getComputedStyle(e: any): any;

/** Where screenshots go: `UEXEC_SCREENSHOTS` (`deno task screenshots` sets docs/), else artifacts. */
const SHOTS = Deno.env.get("UEXEC_SCREENSHOTS") ??
  new URL("../artifacts/", import.meta.url).pathname;

async function shot(page: Page, name: string): Promise<void> {
  await Deno.mkdir(SHOTS, { recursive: true });
  await page.screenshot({ path: `${SHOTS}/${name}.png` });
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
    const browser = await launchBrowser();
    const page = await browser.newPage();
    const errors = pageErrors(page);
    try {
      await signInDashboard(page, server);

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
          // Nothing after the marker: what the page dropped is what the API says is gone.
          "head -c 1200000 /dev/zero | tr '\\0' x; echo; printf END-OF-BIG; read x",
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

      await t.step("kill asks for a confirmation, then kills", async () => {
        const id = await start(server, "echo kill-me; cat", "kill-me");
        const kill = `tr[data-session="${id}"] button.kill`;
        await page.waitForSelector(kill);
        await page.click(kill);
        assert.equal(await page.$eval(kill, (e) => e.textContent), "Confirm kill");
        assert.equal((await server.get(`/v1/sessions/${id}`)).status, 200, "still alive");
        await page.click(kill);
        await page.waitForFunction(
          (id) => !document.querySelector(`tr[data-session="${id}"]`),
          {},
          id,
        );
        assert.equal((await server.get(`/v1/sessions/${id}`)).status, 404);
      });

      await t.step("Ctrl-C interrupts the foreground process", async () => {
        // The shell stays (its trap reports the signal); its foreground child is interrupted:
        // the sh that printed "sleeping" and then became sleep (either dies of SIGINT: 130).
        const id = await start(
          server,
          "trap 'echo got-SIGINT' INT; sh -c 'echo sleeping; exec sleep 1000'; " +
            "echo sleep-ended-$?; trap - INT; read x",
          "sleeping",
        );
        await openTerminal(page, id);
        await waitForTerminal(page, "sleeping");
        await (await page.waitForSelector(`tr[data-session="${id}"] button.interrupt`))!.click();
        await waitForTerminal(page, "sleep-ended-130");
        const text = await terminalText(page);
        assert.ok(text.includes("got-SIGINT"), text);
        assert.equal((await server.get(`/v1/sessions/${id}`)).status, 200, "the shell lives on");
        // Now the shell is in the foreground, without its trap: the panel's button ends it.
        await page.click("#terminal-interrupt");
        await waitForTerminal(page, `[session ${id} exited with 130]`);
      });

      await t.step("download saves the held output byte for byte", async () => {
        const id = await start(server, "printf 'dl-\\377\\376-\\033[31mred\\n'; read x", "red");
        const dir = await Deno.makeTempDir({ prefix: "uexec-download-" });
        try {
          const cdp = await browser.target().createCDPSession();
          await cdp.send("Browser.setDownloadBehavior", {
            behavior: "allow",
            downloadPath: dir,
            eventsEnabled: true,
          });
          const done = new Promise<string>((resolve, reject) => {
            cdp.on("Browser.downloadProgress", (e) => {
              if (e.state === "completed") resolve(e.guid);
              else if (e.state === "canceled") reject(new Error("download canceled"));
            });
          });
          const named = new Promise<string>((resolve) => {
            cdp.on("Browser.downloadWillBegin", (e) => resolve(e.suggestedFilename));
          });
          await (await page.waitForSelector(`tr[data-session="${id}"] button.download`))!.click();
          const name = await named;
          await done;
          assert.equal(name, `uexec-session-${id}.log`);
          const saved = await Deno.readFile(`${dir}/${name}`);
          const held = await server.get(`/v1/sessions/${id}/output?encoding=base64`);
          assert.deepEqual(saved, Uint8Array.from(atob(held.body.base64), (c) => c.charCodeAt(0)));
          assert.deepEqual(
            saved,
            new Uint8Array(
              [..."dl-"].map((c) => c.charCodeAt(0)).concat(
                [0xff, 0xfe],
                [..."-\x1b[31mred\r\n"].map((c) => c.charCodeAt(0)),
              ),
            ),
          );
          await cdp.detach();
        } finally {
          await Deno.remove(dir, { recursive: true });
          await server.del(`/v1/sessions/${id}`);
        }
      });

      await t.step(
        "the filter box narrows sessions and history by agent, command, profile",
        async () => {
          const minted = await server.operator.post("/v1/agents", { name: "ci-bot" });
          assert.equal(minted.status, 201);
          const ciBot = server.as(minted.body.token);
          const bot = await ciBot.post("/v1/exec_command", {
            cmd: "echo bot-ready; cat",
            login: false,
            profile: "read-only",
            until: "bot-ready",
            yield_time_ms: 30000,
          });
          assert.equal(bot.status, 200, JSON.stringify(bot.body));
          const own = await start(server, "echo own-ready; sleep 1000", "own-ready");
          await page.waitForSelector(`tr[data-session="${bot.body.session_id}"]`);
          await page.waitForSelector(`tr[data-session="${own}"]`);
          const shown = () =>
            page.$$eval(
              "#sessions-table tbody tr:not([hidden])",
              (trs) => trs.map((tr) => Number(tr.getAttribute("data-session"))),
            );
          const filter = async (selector: string, text: string) => {
            await page.click(selector, { count: 3 });
            await page.keyboard.press("Backspace");
            await page.type(selector, text);
          };
          for (
            const [query, expected] of [
              ["agent:ci-bot", [bot.body.session_id]],
              ["CI-BOT", [bot.body.session_id]],
              ["sleep", [own]],
              ["profile:read-only", [bot.body.session_id]],
              ["workspace-write own-ready", [own]],
              ["nothing-like-this", []],
              // Only agent, command and profile: not the workdir every row shares.
              ["uexec-ws", []],
              ["", [bot.body.session_id, own].sort((a, b) => a - b)],
            ] as const
          ) {
            await filter("#sessions-filter", query);
            assert.deepEqual(await shown(), expected, query);
            assert.equal(
              await page.$eval("#sessions-empty", (e) => e.hidden),
              expected.length > 0,
              query,
            );
          }
          await page.click('.tab[data-view="history"]');
          await page.waitForSelector("#history-table tbody tr");
          await filter("#history-filter", "agent:ci-bot");
          const rows = await page.$$eval(
            "#history-table tbody tr:not([hidden])",
            (trs) => trs.map((tr) => [tr.children[1].textContent, tr.children[2].textContent]),
          );
          assert.deepEqual(rows, [["ci-bot", "echo bot-ready; cat"]]);
          await filter("#history-filter", "profile:no-such-profile");
          await page.waitForSelector("#history-message:not([hidden])");
          await filter("#history-filter", "");
          await page.click('.tab[data-view="sessions"]');
          await filter("#sessions-filter", "");
          assert.equal((await server.del(`/v1/sessions/${own}`)).status, 200);
        },
      );

      // Kept pending through the layout checks and screenshots; denied at the end.
      let pendingApproval: Promise<unknown> | undefined;
      await t.step("a pending approval counts down to its timeout", async () => {
        pendingApproval = server.post("/v1/exec_command", {
          cmd: "npm install --no-audit",
          login: false,
          sandbox_permissions: "require_escalated",
          justification: "fetch the dependencies from the registry",
        });
        await page.click('.tab[data-view="approvals"]');
        const countdown = "article.approval .countdown[data-seconds]";
        await page.waitForSelector(countdown);
        const [first, text] = await page.$eval(
          countdown,
          (e) => [Number(e.getAttribute("data-seconds")), e.textContent] as const,
        );
        assert.ok(first > 0 && first <= 60, String(first));
        assert.equal(text, `denied in ${first} s unless decided`);
        await page.waitForFunction(
          (sel, first) =>
            Number(
              document.querySelector(sel)?.getAttribute("data-seconds"),
            ) <
              first,
          {},
          countdown,
          first,
        );
        const [later, laterText] = await page.$eval(
          countdown,
          (e) => [Number(e.getAttribute("data-seconds")), e.textContent] as const,
        );
        assert.ok(later < first && later > 0, `${later} after ${first}`);
        assert.equal(laterText, `denied in ${later} s unless decided`);
        const [approval] = (await server.operator.get("/v1/approvals")).body.approvals;
        assert.equal(
          Date.parse(approval.expires_at) - Date.parse(approval.created_at),
          60000,
          "the server's default timeout",
        );
      });

      let showcase = 0;
      await t.step("Tab reaches every session action, with a visible focus ring", async () => {
        // A test run as an operator would open it: a short command, coloured output.
        await Deno.writeTextFile(
          `${server.workspace}/run-tests.sh`,
          "printf '\\033[1;32mPASS\\033[0m  src/parser.test.ts (42 tests)\\n'\n" +
            "printf '\\033[1;32mPASS\\033[0m  src/session.test.ts (17 tests)\\n\\n'\n" +
            "printf 'Tests: 59 passed\\n'\nexec cat\n",
        );
        showcase = await start(server, "sh run-tests.sh", "passed");
        await page.click('.tab[data-view="sessions"]');
        await page.waitForSelector(`tr[data-session="${showcase}"]`);
        await page.focus("#sessions-filter");
        const reached: string[] = [];
        for (let i = 0; i < 30 && !reached.includes("kill"); i++) {
          await page.keyboard.press("Tab");
          const focused = await page.evaluate((id) => {
            const e = document.activeElement;
            const row = e?.closest?.("tr[data-session]");
            return row?.getAttribute("data-session") === String(id) ? e.className : "";
          }, showcase);
          if (focused) reached.push(focused);
        }
        assert.deepEqual(reached, ["open-terminal", "interrupt", "download", "kill"]);
        const ring = await page.evaluate(() => {
          const style = getComputedStyle(document.activeElement);
          return [style.outlineStyle, style.outlineWidth];
        });
        assert.deepEqual(ring, ["solid", "3px"]);
        // Enter arms the kill; leaving the button disarms it; Shift+Tab back to Terminal and
        // Enter opens it.
        const kill = `tr[data-session="${showcase}"] button.kill`;
        await page.keyboard.press("Enter");
        assert.equal(await page.$eval(kill, (e) => e.textContent), "Confirm kill");
        for (let i = 0; i < 3; i++) {
          await page.keyboard.down("Shift");
          await page.keyboard.press("Tab");
          await page.keyboard.up("Shift");
        }
        assert.equal(await page.$eval(kill, (e) => e.textContent), "Kill");
        await page.keyboard.press("Enter");
        await waitForTerminal(page, "Tests: 59 passed");
        assert.equal((await server.get(`/v1/sessions/${showcase}`)).status, 200);
      });

      await t.step("dark mode follows the system, and the toggle is remembered", async () => {
        const background = () =>
          page.evaluate(() => getComputedStyle(document.documentElement).backgroundColor);
        const LIGHT = "rgb(246, 247, 249)";
        const DARK = "rgb(18, 22, 27)";
        await page.emulateMediaFeatures([{ name: "prefers-color-scheme", value: "light" }]);
        assert.equal(await background(), LIGHT);
        assert.equal(await page.$eval("#theme", (e) => e.textContent), "Dark");
        await page.emulateMediaFeatures([{ name: "prefers-color-scheme", value: "dark" }]);
        assert.equal(await background(), DARK);
        await page.waitForFunction(() => document.querySelector("#theme")?.textContent === "Light");
        await page.click("#theme");
        assert.equal(await background(), LIGHT);
        assert.equal(await page.evaluate(() => localStorage.getItem("uexec.theme")), "light");
        await page.reload();
        await page.waitForSelector("body[data-ready=true]");
        assert.equal(await background(), LIGHT, "the choice outlives a reload");
        await page.click("#theme");
        assert.equal(await background(), DARK);
        await page.emulateMediaFeatures([{ name: "prefers-color-scheme", value: "light" }]);
        assert.equal(await background(), DARK, "a choice overrides the system");
        await page.click("#theme");
        assert.equal(await page.evaluate(() => localStorage.getItem("uexec.theme")), "light");
        await page.emulateMediaFeatures([]);
      });

      await t.step("at phone widths no tab scrolls sideways", async () => {
        await page.setViewport({ width: 390, height: 844 });
        const wide = await start(
          server,
          `echo phone-ready; cat ${"/very/long/path/without/any/space".repeat(6)} - # ${
            "x".repeat(200)
          }`,
          "phone-ready",
        );
        await page.waitForSelector(`tr[data-session="${wide}"]`);
        await openTerminal(page, wide);
        await page.click('.tab[data-view="history"]');
        await page.waitForSelector("#history-table tbody tr");
        for (const width of [390, 360]) {
          await page.setViewport({ width, height: 844 });
          for (const view of ["sessions", "approvals", "history", "agents"]) {
            await page.click(`.tab[data-view="${view}"]`);
            const [scroll, client, rows] = await page.evaluate((view) => [
              document.documentElement.scrollWidth,
              document.documentElement.clientWidth,
              document.querySelectorAll(`#view-${view} tbody tr, #view-${view} article`).length,
            ], view);
            assert.ok(rows > 0, `${view} has data`);
            assert.ok(scroll <= client, `${view} at ${width} px: ${scroll} > ${client}`);
          }
        }
        await page.setViewport({ width: 390, height: 844 });
        await page.click('.tab[data-view="sessions"]');
        assert.equal((await server.del(`/v1/sessions/${wide}`)).status, 200);
        await page.waitForFunction(
          (id) => !document.querySelector(`tr[data-session="${id}"]`),
          {},
          wide,
        );
        await page.click("#terminal-close");
        await shot(page, "dashboard-phone");
        await page.setViewport({ width: 1280, height: 900 });
      });

      await t.step("screenshots: sessions with a live terminal, approvals, agents", async () => {
        await page.click('.tab[data-view="sessions"]');
        await openTerminal(page, showcase);
        await waitForTerminal(page, "Tests: 59 passed");
        await shot(page, "dashboard-sessions");
        await page.emulateMediaFeatures([{ name: "prefers-color-scheme", value: "dark" }]);
        await page.evaluate(() => localStorage.removeItem("uexec.theme"));
        await page.reload();
        await page.waitForSelector("body[data-ready=true]");
        await openTerminal(page, showcase);
        await waitForTerminal(page, "Tests: 59 passed");
        await shot(page, "dashboard-dark");
        await page.emulateMediaFeatures([]);
        await page.click('.tab[data-view="approvals"]');
        await page.waitForSelector("article.approval .countdown[data-seconds]");
        await shot(page, "dashboard-approvals");
        await page.click("article.approval button.deny");
        const denied = await pendingApproval as { status: number };
        assert.equal(denied.status, 403);
        await page.click('.tab[data-view="agents"]');
        await page.waitForSelector('tr[data-agent="ci-bot"]');
        await shot(page, "dashboard-agents");
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
