/**
 * The dashboard's view of egress (issue 32), in headless Chromium against a real root server: a
 * session under `workspace-write-egress` makes one allowed and one refused request through the
 * egress proxy (names mapped by `UEXEC_EGRESS_HOSTS` to the test's own origin on loopback, let
 * through by `UEXEC_EGRESS_ALLOW_PRIVATE`), and the page, which heard of them on its event stream,
 * counts them in the session's row and lists both under the session's open terminal, live: a
 * third connection made while the panel is open appears without a reload. Every wait is on the
 * page's DOM, never a sleep.
 *
 * @module
 */

import assert from "node:assert/strict";
import type { Page } from "puppeteer-core";
import { launchBrowser, signInDashboard } from "../helpers/dashboard.ts";
import { startServer } from "../helpers/server.ts";

// deno-lint-ignore no-explicit-any
declare const document: any;

/** The egress table under the open terminal: each row's cells' text. */
function egressRows(page: Page): Promise<string[][]> {
  return page.$$eval(
    "#terminal-egress tbody tr",
    // deno-lint-ignore no-explicit-any
    (rows: any[]) => rows.map((tr) => [...tr.children].map((td: any) => td.textContent)),
  );
}

/** Wait until the egress table under the open terminal has `n` rows. */
async function waitForRows(page: Page, n: number): Promise<void> {
  await page.waitForFunction(
    (n) => document.querySelectorAll("#terminal-egress tbody tr").length === n,
    {},
    n,
  );
}

/** Wait until the element `selector` names reads `text`. */
async function waitForText(page: Page, selector: string, text: string): Promise<void> {
  await page.waitForFunction(
    (selector, text) => document.querySelector(selector)?.textContent === text,
    {},
    selector,
    text,
  );
}

Deno.test({
  name: "dashboard: a session's egress connections, allowed and denied, live in its panel",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const body = "x".repeat(1000);
    const web = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen() {} },
      () => new Response(body),
    );
    const hosts = await Deno.makeTempFile({ prefix: "uexec-egress-hosts-" });
    await Deno.writeTextFile(hosts, "127.0.0.1 allowed.test other.test\n");
    const server = await startServer({
      UEXEC_EGRESS_HOSTS: hosts,
      UEXEC_EGRESS_ALLOW: "allowed.test",
      UEXEC_EGRESS_ALLOW_PRIVATE: "127.0.0.1/32",
    });
    const browser = await launchBrowser();
    try {
      const page = await browser.newPage();
      const errors: string[] = [];
      page.on("pageerror", (err) => errors.push(String(err)));
      await signInDashboard(page, server);
      const port = web.addr.port;
      const r = await server.post("/v1/exec_command", {
        cmd: `curl -sS -o /dev/null http://allowed.test:${port}/a; ` +
          `curl -sS -o /dev/null http://other.test:${port}/b; echo EGRESS-DONE; read x; ` +
          `curl -sS -o /dev/null http://allowed.test:${port}/c; echo EGRESS-AGAIN; read y`,
        profile: "workspace-write-egress",
        tty: true,
        login: false,
        until: "EGRESS-DONE",
        yield_time_ms: 30_000,
      });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      const id = r.body.session_id;
      assert.ok(id, JSON.stringify(r.body));

      // The row counts both connections, one of them denied.
      const badge = `tr[data-session="${id}"] .egress-badge`;
      await waitForText(page, badge, "egress 2 · 1 denied");
      assert.equal(await page.$eval(badge, (e) => e.className), "egress-badge denied");

      await page.click(`tr[data-session="${id}"] button.open-terminal`);
      await waitForRows(page, 2);
      assert.equal(await page.$eval("#terminal-egress", (e) => e.hidden), false);
      // In the order the connections ended: the allowed one may end after the refusal.
      const rows = await egressRows(page);
      const allowed = rows.find((r) => r[0].startsWith("allowed.test:"))!;
      const denied = rows.find((r) => r[0].startsWith("other.test:"))!;
      // destination, method, decision (rule), address, up, down, duration
      assert.deepEqual(allowed.slice(0, 4), [
        `allowed.test:${port}`,
        "GET",
        "allowed (allow:allowed.test)",
        "127.0.0.1",
      ]);
      assert.match(allowed[4], /^\d+ B$/);
      // The answer's head and its 1000-byte body came down.
      assert.match(allowed[5], /^1\.\d KiB$/);
      assert.match(allowed[6], /^\d+ ms$/);
      assert.deepEqual(denied.slice(0, 6), [
        `other.test:${port}`,
        "GET",
        "denied (not-allowed)",
        "",
        "0 B",
        "0 B",
      ]);
      assert.equal(await page.$eval("#terminal-egress .egress-count", (e) => e.textContent), "2");

      // Live: a connection made while the panel is open is listed without a reload.
      const again = await server.post("/v1/write_stdin", {
        session_id: id,
        chars: "\n",
        until: "EGRESS-AGAIN",
        yield_time_ms: 30_000,
      });
      assert.equal(again.status, 200);
      await waitForRows(page, 3);
      assert.equal((await egressRows(page))[2][0], `allowed.test:${port}`);
      await waitForText(page, badge, "egress 3 · 1 denied");
      // Shown as text: no element but the destination's <code> inside the cells.
      assert.equal(
        await page.$$eval("#terminal-egress tbody td *", (els) => els.length),
        3,
      );
      assert.deepEqual(errors, []);
      assert.equal((await server.del(`/v1/sessions/${id}`)).status, 200);
    } finally {
      await browser.close();
      await server.stop();
      await web.shutdown();
      await Deno.remove(hosts);
    }
  },
});
