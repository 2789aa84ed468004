/**
 * Configuration in one place: every `UEXEC_*` name read in `src/` (as `env.NAME`, `env("NAME")`,
 * `Deno.env.get("NAME")`, or named anywhere in `src/config.ts`, where settings are parsed) is in the
 * settings table of `src/settings.ts`; `docs/configuration.md` holds exactly that table's rows; the
 * real `deno task serve --help` lists the same settings, each with its default; and each plain
 * default in the table is the one `loadConfig` takes.
 *
 * @module
 */

import assert from "node:assert/strict";
import { settingLabel, SETTINGS } from "../../src/settings.ts";

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

/** Every name a setting is read under: its own and its aliases. */
const tableNames = new Set(SETTINGS.flatMap((s) => [s.name, ...(s.aliases ?? [])]));

/** The cells of the docs' settings table: rows whose first cell names a `UEXEC_*` variable. */
function docsRows(): string[][] {
  const text = Deno.readTextFileSync(`${root}docs/configuration.md`);
  return text.split("\n")
    .filter((line) => /^\| .*`UEXEC_/.test(line))
    .map((line) => line.slice(1, line.lastIndexOf("|")).split("|").map((cell) => cell.trim()));
}

Deno.test("every UEXEC_* setting read in src/ is in the settings table (src/settings.ts)", () => {
  const read = new Set<string>();
  for (const path of [...sources(`${root}src`), `${root}main.ts`]) {
    const text = Deno.readTextFileSync(path);
    for (const m of text.matchAll(/(?:env\.|env\("|get\(")(UEXEC_[A-Z0-9_]+)/g)) read.add(m[1]);
    if (path.endsWith("/src/config.ts")) {
      for (const m of text.matchAll(/\bUEXEC_[A-Z0-9]+(?:_[A-Z0-9]+)*\b/g)) read.add(m[0]);
    }
  }
  assert.ok(read.size > 30, `only ${read.size} settings found: the scan is broken`);
  const missing = [...read].filter((name) => !NOT_SETTINGS.has(name) && !tableNames.has(name));
  assert.deepEqual(
    missing.sort(),
    [],
    "settings read in src/ that src/settings.ts lacks (add a row there and to docs/configuration.md)",
  );
  assert.equal(tableNames.size, SETTINGS.length + 1, "a name is in the table twice");
});

Deno.test("docs/configuration.md's table is the settings table, row for row", () => {
  const expected = SETTINGS.map((s) => [settingLabel(s), s.default, s.description]);
  assert.deepEqual(
    docsRows(),
    expected,
    "docs/configuration.md and src/settings.ts differ (each row: setting | default | meaning)",
  );
});

Deno.test("deno task serve --help lists the docs' settings with their defaults, exits 0 and starts nothing", async () => {
  // An environment the server itself would refuse (exit 2): --help must not even read it.
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["task", "--quiet", "--config", `${root}deno.json`, "serve", "--help"],
    cwd: root,
    env: { UEXEC_WORKSPACE: "/nonexistent/uexec-help", UEXEC_PORT: "not-a-port" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stdout = new TextDecoder().decode(out.stdout);
  const stderr = new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 0, stderr);
  // What a start prints first (tests/helpers/server.ts waits for it): none of it.
  assert.doesNotMatch(stdout + stderr, /^uexec (?:listening on|: sandbox uids|: operator token)/m);
  const lines = new Map(
    [...stdout.matchAll(/^ {2}(?:--\w+ \/ )?(UEXEC_\w+).*$/gm)].map((m) => [m[1], m[0]]),
  );
  const documented = docsRows().map((row) => /`(UEXEC_\w+)`/.exec(row[0])![1]);
  assert.deepEqual([...lines.keys()].sort(), documented.sort());
  for (const setting of SETTINGS) {
    assert.ok(
      lines.get(setting.name)?.endsWith(`(default: ${setting.default.replaceAll("`", "")})`),
      `${setting.name}'s line lacks its default: ${lines.get(setting.name)}`,
    );
  }
});

Deno.test("each plain default in the settings table is what the server takes when it is unset", async () => {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "--v8-flags=--enable-experimental-regexp-engine",
      `${root}tests/fixtures/config_defaults/main.ts`,
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  const { checked, differ } = JSON.parse(new TextDecoder().decode(out.stdout));
  assert.ok(checked.length >= 20, `only ${checked.length} defaults checked: ${checked}`);
  assert.deepEqual(differ, [], "settings whose documented default is not the real one");
});
