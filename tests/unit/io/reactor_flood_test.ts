/**
 * The reactor under a flood, on a real PTY: a writer process floods the slave while a watcher
 * reads the master the way `Child` does (up to 64 KiB a read, until `EAGAIN`). Every byte arrives
 * once and in order over many reads (the reactor's catch-up turns, which under a flood wait on the
 * main thread, lose and repeat nothing), a UTF-8 character cut by a read's end is whole again
 * after the carry, and closing the reactor ends its loop.
 *
 * @module
 */

import assert from "node:assert/strict";
import { E, errno, libc } from "../../../src/ffi/libc.ts";
import { EPOLLIN, Reactor } from "../../../src/io/reactor.ts";
import { CharCarry } from "../../../src/output/carry.ts";
import { completeLength } from "../../../src/output/utf8.ts";
import { openPty } from "../../../src/pty/open.ts";

const READ_SIZE = 64 * 1024;

/**
 * Reads the master as `Child` does: on each readiness until a short read (or `EAGAIN`), telling
 * the reactor of a flood when a read filled the line discipline's buffer (4,095 bytes); resolves
 * once the slave side is closed (EIO).
 */
function drain(
  reactor: Reactor,
  master: number,
  onChunk: (chunk: Uint8Array) => void,
): Promise<void> {
  const c = libc();
  const buf = new Uint8Array(READ_SIZE);
  const done = Promise.withResolvers<void>();
  const reg = reactor.add(master, EPOLLIN, {
    readable() {
      for (;;) {
        const n = c.read(master, buf, BigInt(buf.length));
        if (n > 0) {
          onChunk(buf.slice(0, n));
          if (n < READ_SIZE) return n >= 4095;
          continue;
        }
        const code = n < 0 ? errno() : 0;
        if (code === E.EINTR) continue;
        if (code === E.EAGAIN) return false;
        reactor.remove(reg);
        done.resolve();
        return false;
      }
    },
  });
  return done.promise;
}

/** `file` written into the PTY's slave by a separate process (`cat`), as a command would. */
function writeIntoSlave(file: string, slavePath: string): Promise<Deno.CommandStatus> {
  return new Deno.Command("sh", {
    args: ["-c", 'cat "$1" > "$2"', "sh", file, slavePath],
    stdin: "null",
    stdout: "null",
    stderr: "inherit",
  }).output();
}

Deno.test("a PTY flood reaches its watcher byte for byte over many reads, characters whole after the carry", async () => {
  // 2-, 3- and 4-byte characters and no newline (the terminal would add a CR before each).
  const unit = "é€😀ab";
  const text = unit.repeat(60_000);
  const expected = new TextEncoder().encode(text);
  assert.equal(expected.length, 660_000);
  const file = await Deno.makeTempFile();
  await Deno.writeFile(file, expected);
  const reactor = new Reactor();
  const pty = openPty({ cols: 80, rows: 24 });
  try {
    const chunks: Uint8Array[] = [];
    const carry = new CharCarry();
    let decoded = "";
    const decoder = new TextDecoder("utf-8", { fatal: true });
    const drained = drain(reactor, pty.master, (chunk) => {
      chunks.push(chunk);
      decoded += decoder.decode(carry.complete(chunk));
    });
    const status = await writeIntoSlave(file, pty.slavePath);
    assert.equal(status.code, 0);
    await drained;
    decoded += decoder.decode(carry.complete(new Uint8Array(0), true));

    const got = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
    let at = 0;
    for (const c of chunks) {
      got.set(c, at);
      at += c.length;
    }
    assert.equal(got.length, expected.length);
    assert.deepEqual(got, expected);
    assert.equal(decoded, text);
    // It took many reads (a PTY read returns at most the line discipline's 4 KiB), and some of
    // them ended inside a character, which the carry made whole.
    assert.ok(chunks.length >= expected.length / READ_SIZE, `${chunks.length} reads`);
    assert.ok(chunks.some((c) => completeLength(c) < c.length), "no read ended mid-character");
  } finally {
    libc().close(pty.master);
    await reactor.close();
    await Deno.remove(file);
  }
});
