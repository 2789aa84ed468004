/**
 * How a failed libc call's errno is read: results come back as small numbers (nothing is
 * allocated between the call and the read), and errno is this thread's own; and the string
 * arrays handed to execve.
 *
 * @module
 */

import assert from "node:assert/strict";
import { cString, cStringArray, E, errno, libc, rawSyscall } from "../../../src/ffi/libc.ts";
import { SYS } from "../../../src/sandbox/syscalls.ts";

Deno.test("a failed call returns -1 as a number, and errno names the failure", () => {
  const c = libc();
  const buf = new Uint8Array(8);
  const results = [
    c.read(-1, buf, 8n),
    c.write(-1, buf, 8n),
    c.pread(-1, buf, 8n, 0n),
    c.pwrite(-1, buf, 8n, 0n),
    rawSyscall(SYS.close, -1),
  ];
  for (const [i, result] of results.entries()) {
    // A 64-bit result would come back as a BigInt, allocated after the call: a garbage
    // collection it starts could run code that overwrites errno before it is read.
    assert.equal(typeof result, "number", `call ${i}`);
    assert.equal(result, -1, `call ${i}`);
    assert.equal(errno(), E.EBADF, `call ${i}`);
  }
  assert.equal(rawSyscall(SYS.openat, -100, cString("/nonexistent/uexec"), 0, 0), -1);
  assert.equal(errno(), E.ENOENT);
});

Deno.test("errno is the calling thread's: a worker's failure does not change this thread's", async () => {
  assert.equal(rawSyscall(SYS.close, -1), -1);
  const worker = new Worker(new URL("../../fixtures/errno_worker.ts", import.meta.url), {
    type: "module",
  });
  try {
    const [r, code] = await new Promise<[number, number]>((resolve, reject) => {
      worker.onmessage = (e) => resolve(e.data);
      worker.onerror = (e) => reject(e);
    });
    assert.deepEqual([r, code], [-1, E.ENOENT]);
  } finally {
    worker.terminate();
  }
  assert.equal(errno(), E.EBADF);
});

Deno.test("cStringArray: NUL-terminated copies, packed, behind a NULL-terminated pointer array", () => {
  const items = ["/bin/sh", "", "LANG=C.UTF-8", "é→✓ 🙂", "x".repeat(5000)];
  const held: Uint8Array[] = [];
  const array = cStringArray(items, held);
  assert.equal(held.length, 1, "one buffer holds every string");
  const ptrs = new BigUint64Array(array.buffer);
  assert.equal(ptrs.length, items.length + 1);
  assert.equal(ptrs[items.length], 0n, "NULL-terminated");
  const read = [...ptrs.subarray(0, items.length)].map((p) =>
    Deno.UnsafePointerView.getCString(Deno.UnsafePointer.create(p)!)
  );
  assert.deepEqual(read, items);
});
