/**
 * The layers of `src/sandbox/` (see the module doc of `src/sandbox/domains.ts`): nothing in it
 * imports the layers above the sandbox (workers, sessions, the service, the front doors), its
 * root files (`errors.ts`, `instance.ts`, `syscalls.ts`) import none of its folders, each folder
 * imports only the folders below it, and only the facade `domains.ts` sits on top. Read from the
 * source text: every static import, dynamic import and worker URL.
 *
 * @module
 */

import assert from "node:assert/strict";

const SRC = new URL("../../../src/", import.meta.url).pathname;
const SANDBOX = `${SRC}sandbox/`;

/** The folders of `sandbox/`, lowest first: each may import only those before it. */
const FOLDERS = ["policy", "fs", "identity", "containment", "enforce", "git_guard", "grants"];

/** The parts of `src/` above the sandbox, which it must never import. */
const ABOVE = [
  "approvals/",
  "dashboard/",
  "events/",
  "history/",
  "http/",
  "mcp/",
  "metrics/",
  "service/",
  "sessions/",
  "workers/",
  "ws/",
  "config.ts",
  "runtime.ts",
  "server.ts",
];

const SPECIFIER = /(?:\bfrom\s*|\bimport\s*\(\s*|new URL\(\s*)"(\.{1,2}\/[^"]+)"/g;

function* sources(dir: string): Generator<string> {
  for (const entry of Deno.readDirSync(dir)) {
    const path = `${dir}${entry.name}`;
    if (entry.isDirectory) yield* sources(`${path}/`);
    else if (entry.name.endsWith(".ts")) yield path;
  }
}

/** `path` (absolute) relative to `src/`, with `..` resolved. */
function fromSrc(path: string): string {
  const parts: string[] = [];
  for (const part of path.split("/")) {
    if (part === "..") parts.pop();
    else if (part !== "." && part !== "") parts.push(part);
  }
  return parts.join("/").slice(SRC.length - 1);
}

/** A sandbox file's layer: root files -1, folders by {@link FOLDERS}, the facade on top. */
function layer(inSandbox: string): number {
  const slash = inSandbox.indexOf("/");
  if (slash < 0) return inSandbox === "domains.ts" ? FOLDERS.length : -1;
  const folder = FOLDERS.indexOf(inSandbox.slice(0, slash));
  assert.notEqual(folder, -1, `sandbox/${inSandbox}: a folder the layers do not name`);
  return folder;
}

/** Every import of the sandbox that runs up: `file -> target`, paths relative to `src/`. */
function upwardImports(): string[] {
  const found: string[] = [];
  for (const file of sources(SANDBOX)) {
    const from = fromSrc(file);
    const dir = file.slice(0, file.lastIndexOf("/") + 1);
    for (const [, spec] of Deno.readTextFileSync(file).matchAll(SPECIFIER)) {
      const to = fromSrc(dir + spec);
      if (!to.startsWith("sandbox/")) {
        if (ABOVE.some((up) => to.startsWith(up))) {
          found.push(`${from} -> ${to}`);
        }
        continue;
      }
      const [mine, theirs] = [layer(from.slice(8)), layer(to.slice(8))];
      const sameFolder = mine >= 0 && mine === theirs;
      if (!sameFolder && theirs !== -1 && theirs >= mine) found.push(`${from} -> ${to}`);
    }
  }
  return found.sort();
}

Deno.test("no import in src/sandbox/ runs up: out of the sandbox, or to a folder above", () => {
  assert.deepEqual(upwardImports(), []);
});

Deno.test("the layer check reads every sandbox folder and finds their imports", () => {
  // Guards the check itself: a scan that reads nothing would pass the test above.
  const files = [...sources(SANDBOX)].map(fromSrc);
  for (const folder of FOLDERS) {
    assert.ok(files.some((f) => f.startsWith(`sandbox/${folder}/`)), `no file in ${folder}/`);
  }
  const domains = Deno.readTextFileSync(`${SANDBOX}domains.ts`);
  assert.ok([...domains.matchAll(SPECIFIER)].length > 20, "domains.ts imports not found");
});
