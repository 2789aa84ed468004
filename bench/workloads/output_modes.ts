/**
 * Output modes: what `plain` saves and what `plain` and `screen` cost. Real programs run in a
 * uexec PTY at bench time (a pip-style progress bar in python3, `ls -la --color=always`, a
 * coloured `deno test`, `git log --graph --color` of this repository, `top -b -n 1`); each is
 * run with `output_mode: "raw"` and `"plain"` and the server's o200k token counts of both are
 * reported. Then the feed rate of the plain renderer and of `@xterm/headless` (the code the
 * screen worker runs) over those recorded outputs, next to the PTY's own throughput through
 * uexec with and without a screen following it, and the memory a screen session costs.
 * @module
 */

import xterm from "@xterm/headless";
import { PlainRenderer } from "../../src/output/plain.ts";
import { countTokens } from "../../src/output/token_count.ts";
import { type ExecRequest, UexecClient } from "../client.ts";
import { log } from "../log.ts";
import { ptyRate } from "../pty_rate.ts";
import { type Row, row } from "../report.ts";
import { openCat, SH } from "../sessions.ts";
import { connect, type Context, type Outcome, startServer } from "../workload.ts";

const WORKLOAD = "output modes";
/** Enough for every sample: the counts are of the whole output either way. */
const MAX_TOKENS = 262_144;
/** Bytes fed to each renderer per timed pass (the samples repeated). */
const FEED_BYTES = 16 * 1024 * 1024;
/** The chunk size the reactor reads with. */
const CHUNK = 64 * 1024;

const PROGRESS_PY = `
import sys
for i in range(1001):
    done = i * 40 // 1000
    sys.stdout.write("\\r\\x1b[K  Downloading example_pkg-1.0.tar.gz \\x1b[32m" + "━" * done +
        "\\x1b[90m" + "━" * (40 - done) + "\\x1b[0m %5.1f/100.0 MB \\x1b[31m12.5 MB/s\\x1b[0m" % (i / 10))
    sys.stdout.flush()
print()
`;

const DENO_TEST = `
Deno.test("adds", () => { if (1 + 1 !== 2) throw new Error("math"); });
Deno.test("parses", async (t) => {
  await t.step("numbers", () => {});
  await t.step("strings", () => {});
});
Deno.test({ name: "later", ignore: true, fn() {} });
for (let i = 0; i < 20; i++) Deno.test(\`case \${i}\`, () => {});
`;

/** The programs whose output is recorded, each as the command that runs it. */
function samples(ctx: Context): { name: string; cmd: string }[] {
  return [
    { name: "pip-style progress bar (1,001 redraws)", cmd: `python3 -c '${PROGRESS_PY}'` },
    { name: "ls -la --color=always /usr/bin", cmd: "ls -la --color=always /usr/bin" },
    {
      name: "deno test, colours forced",
      cmd: `cd ${ctx.workspace}/modes && env -u NO_COLOR ${Deno.execPath()} test -q ` +
        "--no-check --allow-none colour_test.ts",
    },
    {
      name: "git log --graph --color (this repo, 150)",
      cmd: `git -C ${ctx.root} log --graph --color=always --decorate -n 150`,
    },
    { name: "top -b -n 1 (first 60 lines)", cmd: "top -b -n 1 -w 120 | head -n 60" },
  ];
}

/** One run of `cmd` to its end in raw mode: its output and the server's token count. */
async function record(
  client: UexecClient,
  cmd: string,
): Promise<{ output: string; tokens: number }> {
  const req: ExecRequest = {
    ...SH,
    cmd,
    output_mode: "raw",
    env: { TERM: "xterm-256color", COLUMNS: "120" },
    yield_time_ms: 30_000,
    max_output_tokens: MAX_TOKENS,
  };
  const res = await client.exec(req);
  if (res.exit_code === undefined) throw new Error(`${cmd}: did not end within 30 s`);
  if (res.truncated) throw new Error(`${cmd}: output over ${MAX_TOKENS} tokens`);
  return { output: res.output, tokens: res.original_token_count };
}

/** The recorded raw output as `plain` shows it (the server's renderer and tokenizer). */
function plainOf(raw: string): { output: string; tokens: number } {
  const r = new PlainRenderer();
  r.feed(raw);
  const output = r.take();
  return { output, tokens: countTokens(output) };
}

/** `texts` repeated up to `FEED_BYTES`, cut into reactor-sized chunks. */
function corpus(texts: string[]): { chunks: Uint8Array[]; strings: string[]; bytes: number } {
  const one = new TextEncoder().encode(texts.join(""));
  const all = new Uint8Array(FEED_BYTES);
  for (let at = 0; at < FEED_BYTES; at += one.length) {
    all.set(one.subarray(0, Math.min(one.length, FEED_BYTES - at)), at);
  }
  const chunks: Uint8Array[] = [];
  for (let at = 0; at < all.length; at += CHUNK) chunks.push(all.subarray(at, at + CHUNK));
  const decoder = new TextDecoder();
  const strings = chunks.map((c) => decoder.decode(c, { stream: true }));
  return { chunks, strings, bytes: all.length };
}

function plainRate(strings: string[], bytes: number): number {
  const t0 = performance.now();
  const r = new PlainRenderer();
  for (const s of strings) {
    r.feed(s);
    r.take();
  }
  return bytes / 1e6 / ((performance.now() - t0) / 1000);
}

async function screenRate(chunks: Uint8Array[], bytes: number): Promise<number> {
  const term = new xterm.Terminal({
    cols: 120,
    rows: 40,
    scrollback: 1000,
    allowProposedApi: true,
  });
  const t0 = performance.now();
  for (const c of chunks) await new Promise<void>((resolve) => term.write(c, resolve));
  const seconds = (performance.now() - t0) / 1000;
  term.dispose();
  return bytes / 1e6 / seconds;
}

/** KiB of resident memory per terminal in this process: `n` terminals fed `text` each. */
async function terminalKiB(n: number, text: string): Promise<number> {
  const before = Deno.memoryUsage().rss;
  const terms = [];
  for (let i = 0; i < n; i++) {
    const term = new xterm.Terminal({
      cols: 80,
      rows: 24,
      scrollback: 1000,
      allowProposedApi: true,
    });
    await new Promise<void>((resolve) => term.write(text, resolve));
    terms.push(term);
  }
  const kib = (Deno.memoryUsage().rss - before) / 1024 / n;
  for (const term of terms) term.dispose();
  return kib;
}

/** What the screen worker costs the server: its RSS before and after the first screen. */
async function workerMemory(ctx: Context): Promise<{ rows: Row[]; rss: Record<string, number> }> {
  await using server = await startServer(ctx);
  const client = connect(ctx, server);
  const ids = [await openCat(client)];
  const before = server.memory().rssMiB;
  ids.push(await openScreenCat(client));
  const after = server.memory().rssMiB;
  for (const id of ids) await client.kill(id);
  const rows = [
    row({
      workload: WORKLOAD,
      metric: "RSS of the screen worker (first screen)",
      unit: "MiB",
      uexec: Math.round((after - before) * 10) / 10,
      note: "paid once, when the first screen session starts; none without screens",
    }),
  ];
  return { rows, rss: { before, after } };
}

export async function outputModes(ctx: Context): Promise<Outcome> {
  await Deno.mkdir(`${ctx.workspace}/modes`, { recursive: true });
  await Deno.writeTextFile(`${ctx.workspace}/modes/colour_test.ts`, DENO_TEST);
  const memory = await workerMemory(ctx);
  await using server = await startServer(ctx);
  const client = connect(ctx, server);
  const rows: Row[] = [];
  const recorded: Record<string, { raw: number; plain: number; raw_bytes: number }> = {};
  const raws: string[] = [];
  for (const sample of samples(ctx)) {
    log(`recording ${sample.name}`);
    const raw = await record(client, sample.cmd);
    const plain = plainOf(raw.output);
    raws.push(raw.output);
    recorded[sample.name] = {
      raw: raw.tokens,
      plain: plain.tokens,
      raw_bytes: new TextEncoder().encode(raw.output).length,
    };
    rows.push(row({
      workload: WORKLOAD,
      metric: `o200k tokens, plain: ${sample.name}`,
      unit: "tokens",
      uexec: plain.tokens,
      baseline: { value: raw.tokens, label: "raw" },
      note: "one recording; raw counted by the server, plain by the same renderer and " +
        "tokenizer; ratio = plain / raw",
    }));
  }

  log(`feed rates over the recorded outputs, ${FEED_BYTES / 1024 ** 2} MiB per pass, best of 3`);
  const { chunks, strings, bytes } = corpus(raws);
  let plainMbps = 0;
  let screenMbps = 0;
  for (let i = 0; i < 3; i++) {
    plainMbps = Math.max(plainMbps, plainRate(strings, bytes));
    screenMbps = Math.max(screenMbps, await screenRate(chunks, bytes));
  }
  const ptyBytes = Math.min(ctx.sizes.throughputBytes, 20_000_000);
  log(`PTY throughput through uexec, ${ptyBytes / 1e6} MB of base64, without and with a screen`);
  const pty = await ptyRate(client, ptyBytes);
  const ptyScreen = await ptyRate(client, ptyBytes, true);
  const pty2 = Math.round(pty * 10) / 10;
  const ptyBaseline = { value: pty2, label: "PTY through uexec" };
  rows.push(
    row({
      workload: WORKLOAD,
      metric: "plain renderer feed rate",
      unit: "MB/s",
      uexec: Math.round(plainMbps * 10) / 10,
      baseline: ptyBaseline,
      note: "the recorded outputs repeated, 64 KiB pieces, on one thread",
    }),
    row({
      workload: WORKLOAD,
      metric: "screen (@xterm/headless) feed rate",
      unit: "MB/s",
      uexec: Math.round(screenMbps * 10) / 10,
      baseline: ptyBaseline,
      note: "the same bytes written to a 120x40 terminal, 1,000 lines of scrollback",
    }),
    row({
      workload: WORKLOAD,
      metric: "PTY throughput of a screen session",
      unit: "MB/s",
      uexec: Math.round(ptyScreen * 10) / 10,
      baseline: ptyBaseline,
      note: "its child runs at the emulator's pace: over 4 MiB behind, its output is paused",
    }),
  );

  log("memory per terminal in this process: 200 with a prompt, 20 with a full scrollback");
  const emptyKiB = await terminalKiB(200, "$ ");
  const fullKiB = await terminalKiB(20, `${"x".repeat(79)}\r\n`.repeat(1100));
  rows.push(
    ...memory.rows,
    row({
      workload: WORKLOAD,
      metric: "RSS per terminal (80x24, a prompt)",
      unit: "KiB",
      uexec: Math.round(emptyKiB),
      note: "200 @xterm/headless terminals in the bench process",
    }),
    row({
      workload: WORKLOAD,
      metric: "RSS per terminal (full 1,000-line scrollback)",
      unit: "KiB",
      uexec: Math.round(fullKiB),
      note: "20 terminals fed 1,100 lines of 80 columns each",
    }),
  );
  return {
    rows,
    details: {
      tokens: recorded,
      plain_mbps: plainMbps,
      screen_mbps: screenMbps,
      pty_mbps: pty,
      pty_with_screen_mbps: ptyScreen,
      rss_mib: memory.rss,
    },
  };
}

async function openScreenCat(client: UexecClient): Promise<number> {
  const res = await client.exec({
    ...SH,
    cmd: "echo cat-ready; exec cat",
    until: "cat-ready",
    screen: true,
    yield_time_ms: 10_000,
  });
  if (res.session_id === undefined) throw new Error("screen cat session did not stay open");
  return res.session_id;
}
