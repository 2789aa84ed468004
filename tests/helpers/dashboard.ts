/**
 * The dashboard in a browser, for tests: headless Chromium (Debian's `chromium`) driven by
 * puppeteer-core, and the operator's sign-in as a person does it: a fresh one-time link from
 * `POST /v1/dashboard/sign-in-links` (the operator's token), opened in the page.
 *
 * @module
 */

import puppeteer, { type Browser, type Page } from "puppeteer-core";
import type { TestServer } from "./server.ts";

const CHROMIUM = "/usr/bin/chromium";

/** Start headless Chromium (as root: without its own sandbox). */
export async function launchBrowser(): Promise<Browser> {
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

/** A fresh one-time sign-in link (`http://127.0.0.1:PORT/#code=…`) minted by the operator. */
export async function signInLink(server: TestServer): Promise<string> {
  const r = await server.operator.post("/v1/dashboard/sign-in-links", {});
  if (r.status !== 201) throw new Error(`minting a sign-in link: ${r.status} ${r.body}`);
  return r.body.url;
}

/**
 * Sign `page` in to `server`'s dashboard with a fresh link (or `link`); resolves once the page
 * has loaded every view and its event stream is live.
 */
export async function signInDashboard(
  page: Page,
  server: TestServer,
  link?: string,
): Promise<void> {
  // From the dashboard itself, a link differing only in its #fragment would not load the page.
  await page.goto("about:blank");
  await page.goto(link ?? await signInLink(server));
  await page.waitForSelector("body[data-ready=true]");
}

/**
 * The page's script errors and console errors, collected as they happen (a refused request's
 * "Failed to load resource" is left to the tests that check responses).
 */
export function pageErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on("pageerror", (err) => errors.push(String(err)));
  page.on("console", (msg) => {
    if (msg.type() === "error" && !msg.text().startsWith("Failed to load resource")) {
      errors.push(msg.text());
    }
  });
  return errors;
}

/** The page's `document`, as far as the function puppeteer runs in the browser here uses it. */
declare const document: {
  querySelector(selector: string): { textContent: string | null } | null;
};

/** The text of the open terminal's rendered rows. */
export function terminalText(page: Page): Promise<string> {
  return page.$eval("#terminal .xterm-rows", (rows) => rows.textContent ?? "");
}

/** Wait until the open terminal shows `text`. */
export async function waitForTerminal(page: Page, text: string): Promise<void> {
  await page.waitForFunction(
    (wanted) => document.querySelector("#terminal .xterm-rows")?.textContent?.includes(wanted),
    {},
    text,
  );
}
