/**
 * The layering of `src/`, held to the table in docs/architecture.md (the one place it is
 * stated): every import (`import`, `export ... from`, a worker's
 * `new URL("./x.ts", import.meta.url)`) goes to the importer's own layer or one its row allows,
 * never up; and no file in `src/` is over 600 lines. Today's known exceptions are listed here by
 * name, and an exception that no longer occurs fails the test too, so the lists only shrink.
 *
 * @module
 */

import assert from "node:assert/strict";

const ROOT = new URL("../../", import.meta.url).pathname;
const SRC = `${ROOT}src/`;
const MAX_LINES = 600;

/**
 * Imports that run up the layers, each `importer -> imported` (paths under `src/`): none. An
 * entry here is a debt to pay, and the test fails once it is paid so the list cannot go stale.
 */
const KNOWN_UPWARD: string[] = [];

/** Files over {@link MAX_LINES} lines (paths under `src/`): none, kept as {@link KNOWN_UPWARD}. */
const KNOWN_LONG: string[] = [];

interface Layer {
  number: number;
  name: string;
  /** Paths under `src/`: a folder ends in `/`. */
  paths: string[];
  /** The other layers it may import from: `[first, last]`, or none. */
  mayImport?: [number, number];
}

/** The layer table of docs/architecture.md. */
async function layerTable(): Promise<Layer[]> {
  const doc = await Deno.readTextFile(`${ROOT}docs/architecture.md`);
  const section = doc.split("\n## The layers\n")[1]?.split("\n## ")[0];
  assert.ok(section, "docs/architecture.md has a section 'The layers'");
  const layers: Layer[] = [];
  for (const line of section.split("\n")) {
    // A row: `| # | layer | folders and files | may import |` (deno fmt pads the cells).
    const cells = line.split("|").slice(1, -1).map((cell) => cell.trim());
    if (cells.length !== 4 || !/^\d+$/.test(cells[0])) continue;
    const range = /(\d+)(?:–(\d+))?$/.exec(cells[3]);
    layers.push({
      number: Number(cells[0]),
      name: cells[1],
      paths: [...cells[2].matchAll(/`([^`]+)`/g)].map((m) => m[1]),
      mayImport: range ? [Number(range[1]), Number(range[2] ?? range[1])] : undefined,
    });
  }
  return layers;
}

/** Every file under `dir`, as paths relative to `src/`. */
async function filesUnder(dir: string, prefix = ""): Promise<string[]> {
  const files: string[] = [];
  for await (const entry of Deno.readDir(dir)) {
    if (entry.isDirectory) {
      files.push(...await filesUnder(`${dir}${entry.name}/`, `${prefix}${entry.name}/`));
    } else files.push(`${prefix}${entry.name}`);
  }
  return files.sort();
}

/** The layer of `file` (under `src/`): the one with the longest path that holds it. */
function layerOf(layers: Layer[], file: string): Layer | undefined {
  let best: { layer: Layer; length: number } | undefined;
  for (const layer of layers) {
    for (const path of layer.paths) {
      const holds = path.endsWith("/") ? file.startsWith(path) : file === path;
      if (holds && (!best || path.length > best.length)) best = { layer, length: path.length };
    }
  }
  return best?.layer;
}

const SPECIFIERS = [
  /^\s*import\s+(?:type\s+)?[^"'`;]*?\s+from\s+["']([^"']+)["']/gm,
  /^\s*import\s+["']([^"']+)["']/gm,
  /^\s*export\s+(?:type\s+)?(?:\*|\{[^}]*\})(?:\s+as\s+\w+)?\s+from\s+["']([^"']+)["']/gm,
  /new URL\(\s*["']([^"']+\.(?:ts|js))["'],\s*import\.meta\.url\s*\)/g,
];

/** The files under `src/` that `file` imports (relative specifiers only), as `src/` paths. */
function importsOf(file: string, text: string): string[] {
  const found = new Set<string>();
  for (const pattern of SPECIFIERS) {
    for (const [, specifier] of text.matchAll(pattern)) {
      if (!specifier.startsWith(".")) continue;
      const url = new URL(specifier, `file://${SRC}${file}`);
      if (url.pathname.startsWith(SRC)) found.add(url.pathname.slice(SRC.length));
    }
  }
  return [...found].sort();
}

Deno.test("the layer table of docs/architecture.md is whole and ordered", async () => {
  const layers = await layerTable();
  assert.ok(layers.length >= 10, `${layers.length} layers read`);
  layers.forEach((layer, i) => {
    assert.equal(layer.number, i + 1, `${layer.name} is numbered in order`);
    if (i < layers.length - 1) {
      assert.deepEqual(layer.mayImport, [i + 2, layers.length], `${layer.name}: may import`);
    } else assert.equal(layer.mayImport, undefined, `${layer.name} imports no other layer`);
  });
  // Every module of src/ is placed; every row names something that exists.
  const files = await filesUnder(SRC);
  const modules = files.filter((f) => /\.(ts|js|mjs)$/.test(f));
  const unplaced = modules.filter((f) => !layerOf(layers, f));
  assert.deepEqual(unplaced, [], "modules in no layer of the table");
  for (const path of layers.flatMap((l) => l.paths)) {
    assert.ok(files.some((f) => path.endsWith("/") ? f.startsWith(path) : f === path), path);
  }
});

Deno.test("no import in src/ runs from a lower layer to a higher one", async () => {
  const layers = await layerTable();
  const upward: string[] = [];
  for (const file of await filesUnder(SRC)) {
    if (!/\.(ts|js|mjs)$/.test(file)) continue;
    const from = layerOf(layers, file)!;
    for (const imported of importsOf(file, await Deno.readTextFile(`${SRC}${file}`))) {
      const to = layerOf(layers, imported);
      assert.ok(to, `${file} imports ${imported}, which is in no layer`);
      if (to === from) continue;
      const [first, last] = from.mayImport ?? [0, -1];
      if (to.number < first || to.number > last) {
        upward.push(`${file} -> ${imported}`);
      }
    }
  }
  const unknown = upward.filter((edge) => !KNOWN_UPWARD.includes(edge));
  assert.deepEqual(unknown, [], "imports from a lower layer to a higher one");
  const gone = KNOWN_UPWARD.filter((edge) => !upward.includes(edge));
  assert.deepEqual(gone, [], "known exceptions that no longer occur: drop them from the list");
});

Deno.test("no file in src/ is over 600 lines", async () => {
  const long: string[] = [];
  for (const file of await filesUnder(SRC)) {
    const text = await Deno.readTextFile(`${SRC}${file}`);
    const lines = text.split("\n").length - (text.endsWith("\n") ? 1 : 0);
    if (lines > MAX_LINES) long.push(file);
  }
  const unknown = long.filter((file) => !KNOWN_LONG.includes(file));
  assert.deepEqual(unknown, [], `files over ${MAX_LINES} lines`);
  const gone = KNOWN_LONG.filter((file) => !long.includes(file));
  assert.deepEqual(gone, [], "known long files that are no longer long: drop them from the list");
});

Deno.test("the import reader sees every form of import, and only relative ones", () => {
  const text = [
    'import { a } from "./a.ts";',
    'import type { B } from "../b/b.ts";',
    "import {\n  c,\n  d,\n} from './c.ts';",
    'import "./side.ts";',
    'export { e } from "./e.ts";',
    'export * from "./f.ts";',
    'export type { G } from "./g.ts";',
    'const w = new Worker(new URL("./w.ts", import.meta.url), { type: "module" });',
    'import { z } from "zod";',
    'import x from "./static/x.html" with { type: "text" };',
    '// a comment that says import { y } from "./nope.ts" mid-line is no import',
  ].join("\n");
  assert.deepEqual(importsOf("sessions/m.ts", text), [
    "b/b.ts",
    "sessions/a.ts",
    "sessions/c.ts",
    "sessions/e.ts",
    "sessions/f.ts",
    "sessions/g.ts",
    "sessions/side.ts",
    "sessions/static/x.html",
    "sessions/w.ts",
  ]);
});
