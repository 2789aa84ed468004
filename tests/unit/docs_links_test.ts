/**
 * Every relative link in the documentation resolves: in `README.md`, `CHANGELOG.md` and
 * `docs/*.md`, a link or image to a file must name one that exists, and a `#fragment` must name a
 * heading of the target page (GitHub's anchors: lower case, punctuation dropped, spaces to `-`,
 * `-1`, `-2` for repeats) or an `<a id>` in it. Links inside code are not links.
 *
 * @module
 */

import assert from "node:assert/strict";

const root = new URL("../../", import.meta.url).pathname;

/** The pages checked, relative to the repository. */
function pages(): string[] {
  const docs = [...Deno.readDirSync(`${root}docs`)]
    .filter((entry) => entry.isFile && entry.name.endsWith(".md"))
    .map((entry) => `docs/${entry.name}`);
  return ["README.md", "CHANGELOG.md", ...docs.sort()];
}

/** The text of a page without fenced code blocks and inline code (each left as blanks). */
function prose(text: string): string {
  return text
    .replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, "")
    .replace(/(`+)[\s\S]*?\1/g, "");
}

/** GitHub's anchor for a heading's text. */
export function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/<[^>]+>/g, "")
    .replace(/[^\p{L}\p{N}\p{M} _-]/gu, "")
    .replace(/ /g, "-");
}

/** Every anchor a page has: its headings' (with repeats numbered) and its `<a id>`s. */
function anchors(text: string): Set<string> {
  const found = new Set<string>();
  const seen = new Map<string, number>();
  const noFences = text.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, "");
  for (const m of noFences.matchAll(/^#{1,6} +(.+?) *#*$/gm)) {
    const base = slug(m[1].replace(/`/g, ""));
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    found.add(n === 0 ? base : `${base}-${n}`);
  }
  for (const m of text.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) found.add(m[1]);
  return found;
}

/** The relative links of a page: `[text](target)` and `![alt](target)`, and reference targets. */
function links(text: string): string[] {
  const body = prose(text);
  const inline = [...body.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)].map((m) => m[1]);
  const references = [...body.matchAll(/^\s*\[[^\]]+\]:\s*(\S+)/gm)].map((m) => m[1]);
  return [...inline, ...references].filter((target) => !/^[a-z][a-z0-9+.-]*:/i.test(target));
}

/** What is wrong with each relative link of `page`, empty when every one resolves. */
function broken(page: string): string[] {
  const problems: string[] = [];
  const dir = page.includes("/") ? page.slice(0, page.lastIndexOf("/") + 1) : "";
  for (const target of links(Deno.readTextFileSync(`${root}${page}`))) {
    const [pathPart, fragment] = target.split("#", 2) as [string, string | undefined];
    const path = pathPart === "" ? page : new URL(pathPart, `file:///${dir}`).pathname.slice(1);
    let text: string;
    try {
      const info = Deno.statSync(`${root}${path}`);
      if (fragment === undefined || info.isDirectory) continue;
      text = Deno.readTextFileSync(`${root}${path}`);
    } catch {
      problems.push(`${page}: ${target}: no file ${path}`);
      continue;
    }
    if (!anchors(text).has(decodeURIComponent(fragment))) {
      problems.push(`${page}: ${target}: ${path} has no heading or anchor #${fragment}`);
    }
  }
  return problems;
}

Deno.test("every relative link and anchor in README.md, CHANGELOG.md and docs/*.md resolves", () => {
  const all = pages();
  assert.ok(all.length >= 8, `only ${all.length} pages found`);
  assert.deepEqual(all.flatMap(broken), []);
});

Deno.test("the link check finds broken files and anchors, and reads anchors as GitHub makes them", () => {
  assert.equal(slug("WebSocket (GET /v1/ws)"), "websocket-get-v1ws");
  assert.equal(
    slug("Isolation model: what a session shares, and with whom"),
    "isolation-model-what-a-session-shares-and-with-whom",
  );
  assert.deepEqual([...anchors('# A\n## A\n```\n# not\n```\n<a id="x-y"></a>')], [
    "a",
    "a-1",
    "x-y",
  ]);
  assert.deepEqual(
    links("[a](docs/x.md#y) `[b](no.md)` ![c](p.png) [d](https://e.org)\n```\n[f](g.md)\n```"),
    ["docs/x.md#y", "p.png"],
  );
});

Deno.test("every long page has a table of contents linking each section after it", () => {
  for (const page of pages()) {
    const text = Deno.readTextFileSync(`${root}${page}`);
    if (text.split("\n").length <= 200) continue;
    const noFences = text.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, "");
    // The contents: the first list of links into the page itself (the README's follows its quick
    // start, which a new user should see first); every section after it must be listed there.
    const begins = noFences.search(/^- \[[^\]]+\]\(#/m);
    assert.ok(begins >= 0, `${page}: no table of contents`);
    const sections = [...noFences.slice(begins).matchAll(/^## +(.+?) *$/gm)];
    const contents = noFences.slice(begins, begins + (sections[0]?.index ?? 0));
    const listed = links(contents);
    for (const [, heading] of sections) {
      const anchor = `#${slug(heading.replace(/`/g, ""))}`;
      assert.ok(listed.includes(anchor), `${page}: the contents lack ${anchor}`);
    }
  }
});
