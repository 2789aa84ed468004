/**
 * The log's writer: text goes out in order, one write in flight at a time, what arrives
 * meanwhile in the next write; with a delay a batch waits for it unless it grows past its limit
 * or is flushed; text given as a function is made only when it goes out; `flush` waits for all of it; a failed stream is dropped without an error. And
 * the server's logger on a real stderr: every line out before exit after `flush`, and before an
 * exit without it (an uncaught error, `Deno.exit`), and a closed stderr does not crash it.
 *
 * @module
 */

import assert from "node:assert/strict";
import { BatchedWriter } from "../../../src/io/batched_writer.ts";

const decoder = new TextDecoder();

/** A stream whose writes complete when the test says so, taking at most `max` bytes each. */
function heldStream(max = Infinity) {
  const writes: string[] = [];
  const pending: (() => void)[] = [];
  let nextArrives = Promise.withResolvers<void>();
  const write = (bytes: Uint8Array) => {
    const n = Math.min(bytes.length, max);
    writes.push(decoder.decode(bytes.subarray(0, n)));
    const done = Promise.withResolvers<number>();
    pending.push(() => done.resolve(n));
    nextArrives.resolve();
    nextArrives = Promise.withResolvers<void>();
    return done.promise;
  };
  return {
    writes,
    write,
    /** Waits for the next write to start. */
    started: () => nextArrives.promise,
    /** Completes the oldest write in flight. */
    complete: () => pending.shift()!(),
    get inFlight() {
      return pending.length;
    },
  };
}

Deno.test("batched writer: what arrives during a write goes out next, as one write", async () => {
  const stream = heldStream();
  const out = new BatchedWriter(stream.write);
  let started = stream.started();
  out.write("a\n");
  await started;
  assert.deepEqual(stream.writes, ["a\n"]);
  out.write("b\n");
  out.write("c\n");
  assert.equal(stream.inFlight, 1);
  let flushed = false;
  const flush = out.flush().then(() => flushed = true);
  started = stream.started();
  stream.complete();
  await started;
  assert.deepEqual(stream.writes, ["a\n", "b\nc\n"]);
  assert.equal(stream.inFlight, 1);
  assert.equal(flushed, false);
  stream.complete();
  await flush;
  assert.equal(flushed, true);
  started = stream.started();
  out.write("d\n");
  await started;
  stream.complete();
  await out.flush();
  assert.deepEqual(stream.writes, ["a\n", "b\nc\n", "d\n"]);
});

Deno.test("batched writer: what several callbacks of one event-loop turn write is one write", async () => {
  const writes: string[] = [];
  const out = new BatchedWriter((bytes) => {
    writes.push(decoder.decode(bytes));
    return Promise.resolve(bytes.length);
  });
  // Timers due together fire in one turn, each followed by its own microtasks: a batch that
  // ended at a microtask would go out per callback, as a stream that writes at once would
  // under load.
  const fired = ["a\n", "b\n", "c\n"].map((line) =>
    new Promise<void>((resolve) =>
      setTimeout(() => {
        out.write(line);
        resolve();
      }, 0)
    )
  );
  await Promise.all(fired);
  await out.flush();
  assert.deepEqual(writes, ["a\nb\nc\n"]);
});

/** Resolves once the current event-loop turn, its immediates and a zero-delay timer have run. */
function laterTurn(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

Deno.test("batched writer: with a delay, a batch waits for it; flush ends the wait", async () => {
  const stream = heldStream();
  // An hour: a test that passes has ended the wait by flushing (the test's sanitizer would
  // report the timer otherwise).
  const out = new BatchedWriter(stream.write, { delayMs: 3_600_000 });
  out.write("a\n");
  await laterTurn();
  out.write("b\n");
  await laterTurn();
  assert.deepEqual(stream.writes, []);
  const started = stream.started();
  const flushed = out.flush();
  await started;
  assert.deepEqual(stream.writes, ["a\nb\n"]);
  stream.complete();
  await flushed;
});

Deno.test("batched writer: a batch that reaches its size goes out without waiting", async () => {
  const stream = heldStream();
  const out = new BatchedWriter(stream.write, { delayMs: 3_600_000, maxChars: 6 });
  out.write("abc");
  await laterTurn();
  assert.deepEqual(stream.writes, []);
  const started = stream.started();
  out.write("def");
  out.write("g");
  await started;
  assert.deepEqual(stream.writes, ["abcdefg"]);
  stream.complete();
  await out.flush();
});

Deno.test("batched writer: a partial write is continued before anything newer", async () => {
  const stream = heldStream(3);
  const out = new BatchedWriter(stream.write);
  const started = stream.started();
  out.write("hello");
  await started;
  out.write("+0");
  assert.deepEqual(stream.writes, ["hel"]);
  for (const seen of [["hel", "lo"], ["hel", "lo", "+0"]]) {
    const started = stream.started();
    stream.complete();
    await started;
    assert.deepEqual(stream.writes, seen);
  }
  stream.complete();
  await out.flush();
  assert.equal(stream.inFlight, 0);
});

Deno.test("batched writer: deferred text is made when its batch goes out, in order", async () => {
  const stream = heldStream();
  const out = new BatchedWriter(stream.write);
  const made: string[] = [];
  const deferred = (text: string) => () => (made.push(text), text);
  out.write("a");
  out.write(deferred("b"));
  out.write("c");
  assert.deepEqual(made, [], "nothing is made when it is written");
  await stream.started();
  assert.deepEqual(made, ["b"]);
  out.write(deferred("d"));
  assert.deepEqual(made, ["b"], "what waits behind a write in flight is made when it goes out");
  stream.complete();
  await stream.started();
  stream.complete();
  await out.flush();
  assert.deepEqual(stream.writes, ["abc", "d"]);
  assert.deepEqual(made, ["b", "d"]);
});

Deno.test("batched writer: a failed stream drops its text and never throws", async () => {
  const attempts: string[] = [];
  const out = new BatchedWriter((bytes) => {
    attempts.push(decoder.decode(bytes));
    return Promise.reject(new Deno.errors.BrokenPipe("closed"));
  });
  out.write("a");
  out.write("b");
  await out.flush();
  out.write("c");
  await out.flush();
  assert.deepEqual(attempts, ["ab"]);
});

/** Runs a script that logs `count` lines through the server's logger and flushes. */
function logScript(count: number, then: string): string {
  return [
    `import { Logger } from ${
      JSON.stringify(new URL("../../../src/log.ts", import.meta.url).href)
    };`,
    `const log = new Logger("json");`,
    `for (let i = 0; i < ${count}; i++) log.info("line", { i });`,
    `await log.flush();`,
    then,
  ].join("\n");
}

Deno.test("logger: every line reaches stderr, in order, before an exit after flush", async () => {
  const count = 5000;
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["eval", logScript(count, "Deno.exit(0);")],
    stdout: "null",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0);
  const lines = decoder.decode(out.stderr).trim().split("\n").map((l) => JSON.parse(l));
  assert.deepEqual(lines.map((l) => l.i), Array.from({ length: count }, (_, i) => i));
});

for (
  const [death, how, after] of [
    [
      "an uncaught exception",
      `setTimeout(() => { throw new Error("boom"); }, 0);`,
      /Uncaught.*boom/,
    ],
    ["an unhandled rejection", `setTimeout(() => Promise.reject(new Error("boom")), 0);`, /boom/],
    ["Deno.exit", `setTimeout(() => Deno.exit(1), 0);`, /^$/],
  ] as const
) {
  Deno.test(`logger: lines still waiting reach stderr before an exit by ${death}`, async () => {
    const out = await new Deno.Command(Deno.execPath(), {
      args: [
        "eval",
        [
          `import { Logger } from ${
            JSON.stringify(new URL("../../../src/log.ts", import.meta.url).href)
          };`,
          `const log = new Logger("json");`,
          `for (let i = 0; i < 3; i++) log.info("line", { i });`,
          how,
        ].join("\n"),
      ],
      stdout: "null",
      stderr: "piped",
    }).output();
    assert.equal(out.code, 1);
    const text = decoder.decode(out.stderr);
    const lines = text.split("\n").slice(0, 3).map((l) => JSON.parse(l));
    assert.deepEqual(lines.map((l) => l.i), [0, 1, 2]);
    assert.match(text.split("\n").slice(3).join("\n").trim(), after);
  });
}

Deno.test("logger: a closed stderr does not stop the process", async () => {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "eval",
      [
        `await new Promise((resolve) => Deno.stdin.read(new Uint8Array(1)).then(resolve));`,
        logScript(1000, `console.log("alive");`),
      ].join("\n"),
    ],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  await child.stderr.cancel();
  await child.stdin.close();
  const [status, stdout] = await Promise.all([child.status, new Response(child.stdout).text()]);
  assert.equal(stdout, "alive\n");
  assert.equal(status.code, 0);
});

Deno.test("logger: a stderr pipe nobody reads blocks nothing; every line arrives once it is read", async () => {
  const count = 20_000; // about 1.3 MB: far past a pipe's 64 KiB
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "eval",
      [
        `import { Logger } from ${
          JSON.stringify(new URL("../../../src/log.ts", import.meta.url).href)
        };`,
        `const log = new Logger("json");`,
        `for (let i = 0; i < ${count}; i++) log.info("line", { i });`,
        // The event loop still turns while stderr is full: timers fire, stdout is written.
        `await new Promise((resolve) => setTimeout(resolve, 0));`,
        `console.log("alive");`,
        `await log.flush();`,
      ].join("\n"),
    ],
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const stdout = child.stdout.getReader();
  let timer: ReturnType<typeof setTimeout> | undefined;
  let stderr;
  try {
    const first = await Promise.race([
      stdout.read(),
      new Promise<never>((_, reject) =>
        timer = setTimeout(() => reject(new Error("the logger blocked on a full stderr")), 30_000)
      ),
    ]);
    assert.equal(decoder.decode(first.value), "alive\n");
    stderr = await new Response(child.stderr).text();
  } finally {
    clearTimeout(timer);
    if (stderr === undefined) {
      child.kill("SIGKILL");
      await child.stderr.cancel();
    }
    stdout.releaseLock();
    await child.stdout.cancel();
  }
  assert.equal((await child.status).code, 0);
  const lines = stderr.trim().split("\n").map((l) => JSON.parse(l));
  assert.deepEqual(lines.map((l) => l.i), Array.from({ length: count }, (_, i) => i));
});

Deno.test("logger: stderr's own flags stay as they were; its own descriptor is close-on-exec", async () => {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "eval",
      [
        `import { Logger } from ${
          JSON.stringify(new URL("../../../src/log.ts", import.meta.url).href)
        };`,
        `const log = new Logger("json");`,
        `log.info("line", { i: 0 });`,
        `await log.flush();`,
        `const flags = (fd) => parseInt(/^flags:\\s*(\\d+)/m.exec(Deno.readTextFileSync("/proc/self/fdinfo/" + fd))[1], 8);`,
        // (The directory's own descriptor is gone by the time its entries are read.)
        `const link = (fd) => { try { return Deno.readLinkSync("/proc/self/fd/" + fd); } catch { return ""; } };`,
        `const own = [...Deno.readDirSync("/proc/self/fd")].map((e) => Number(e.name))`,
        `  .filter((fd) => fd > 2 && link(fd) === link(2));`,
        `console.log(JSON.stringify({ stderr: flags(2), own: own.map(flags) }));`,
      ].join("\n"),
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0, decoder.decode(out.stderr));
  const O_NONBLOCK = 0o4000, O_CLOEXEC = 0o2000000;
  const { stderr, own } = JSON.parse(decoder.decode(out.stdout));
  assert.equal(stderr & O_NONBLOCK, 0, "fd 2 was made non-blocking");
  // Deno holds a duplicate of fd 2 (close-on-exec, blocking); the logger one opened anew.
  const nonBlocking = own.filter((f: number) => f & O_NONBLOCK);
  assert.equal(nonBlocking.length, 1, "the logger holds one non-blocking descriptor on the pipe");
  assert.equal(nonBlocking[0] & O_CLOEXEC, O_CLOEXEC);
  for (const f of own) assert.equal(f & O_CLOEXEC, O_CLOEXEC);
  assert.equal(JSON.parse(decoder.decode(out.stderr)).i, 0);
});

Deno.test("logger: stderr a regular file: lines and console.error's share its offset", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const file = `${dir}/log`;
    const script = [
      `import { Logger } from ${
        JSON.stringify(new URL("../../../src/log.ts", import.meta.url).href)
      };`,
      `const log = new Logger("json");`,
      `for (let i = 0; i < 100; i++) log.info("line", { i });`,
      `await log.flush();`,
      `console.error(JSON.stringify({ msg: "console" }));`,
      `for (let i = 100; i < 200; i++) log.info("line", { i });`,
      `await log.flush();`,
    ].join("\n");
    const out = await new Deno.Command("sh", {
      args: ["-c", `exec "$0" eval "$1" 2>"$2"`, Deno.execPath(), script, file],
    }).output();
    assert.equal(out.code, 0);
    const lines = (await Deno.readTextFile(file)).trim().split("\n").map((l) => JSON.parse(l));
    assert.deepEqual(
      lines.map((l) => l.msg === "console" ? "console" : l.i),
      [
        ...Array.from({ length: 100 }, (_, i) => i),
        "console",
        ...Array.from({ length: 100 }, (_, i) => i + 100),
      ],
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
