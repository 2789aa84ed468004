/**
 * Every setting the server reads from its environment is in the README's configuration table:
 * a `UEXEC_*` name read in `src/` (as `env.NAME`, `env("NAME")`, `Deno.env.get("NAME")`, or named
 * anywhere in `src/config.ts`, where settings are parsed) that the table lacks fails here.
 *
 * @module
 */

import assert from "node:assert/strict";

const root = new URL("../../", import.meta.url).pathname;

/** Names that are not settings: what the server exports to its children, not what it reads. */
const NOT_SETTINGS = new Set(["UEXEC_LOGIN_PATH"]);

function* sources(dir: string): Generator<string> {
  for (const entry of Deno.readDirSync(dir)) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory) yield* sources(path);
    else if (entry.name.endsWith(".ts")) yield path;
  }
}

Deno.test("every UEXEC_* setting read in src/ is documented in the README's configuration table", () => {
  const read = new Set<string>();
  for (const path of [...sources(`${root}src`), `${root}main.ts`]) {
    const text = Deno.readTextFileSync(path);
    for (const m of text.matchAll(/(?:env\.|env\("|get\(")(UEXEC_[A-Z0-9_]+)/g)) read.add(m[1]);
    if (path.endsWith("/src/config.ts")) {
      for (const m of text.matchAll(/\bUEXEC_[A-Z0-9]+(?:_[A-Z0-9]+)*\b/g)) read.add(m[0]);
    }
  }
  const readme = Deno.readTextFileSync(`${root}README.md`);
  const table = readme.split("\n").filter((line) => /^\| .*`UEXEC_/.test(line)).join("\n");
  const missing = [...read].filter((name) => !NOT_SETTINGS.has(name) && !table.includes(name));
  assert.deepEqual(missing.sort(), [], "settings the README's configuration table lacks");
  assert.ok(read.size > 30, `only ${read.size} settings found: the scan is broken`);
});
