/**
 * The descriptor reserve under a real RLIMIT_NOFILE (a child process run through prlimit): it
 * gives back exactly what it held, and is taken again only when twice its size is free. And the
 * one test every layer uses for "no descriptor free", against each way such a failure arrives.
 *
 * @module
 */

import assert from "node:assert/strict";
import { E, loggable, OsError, outOfDescriptors } from "../../../src/ffi/libc.ts";

Deno.test("descriptor reserve: spent at the limit, taken back only when twice its size is free", async () => {
  const child = new URL("../../fixtures/descriptor_reserve_child.ts", import.meta.url);
  const out = await new Deno.Command("prlimit", {
    args: [
      "--nofile=80:80",
      "--",
      Deno.execPath(),
      "run",
      "--allow-ffi",
      "--allow-read",
      child.href,
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stderr = new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 0, stderr);
  assert.deepEqual(JSON.parse(new TextDecoder().decode(out.stdout)), {
    heldAtStart: true,
    afterSpend: { held: false, free: 4 },
    sevenFree: { replenished: false, held: false, free: 7 },
    eightFree: { replenished: true, held: true, free: 4 },
    again: true,
  });
});

Deno.test("out of descriptors: recognised from our calls, Deno's errors and a worker's message", () => {
  const coded = (code: string) => Object.assign(new Error("accept failed"), { code });
  const yes = [
    new OsError("posix_openpt", E.EMFILE),
    new OsError("pipe2", E.ENFILE),
    coded("EMFILE"),
    coded("ENFILE"),
    new Error("Too many open files (os error 24)"),
    new Error("spawn failed: open(/dev/ptmx) failed: EMFILE (errno 24)"),
  ];
  const no = [
    new OsError("open", E.ENOENT),
    coded("ENOENT"),
    new Error("EMFILES are fine"),
    new Error("no such file"),
    "EMFILE",
    undefined,
  ];
  assert.deepEqual(yes.map(outOfDescriptors), yes.map(() => true));
  assert.deepEqual(no.map(outOfDescriptors), no.map(() => false));
});

Deno.test("loggable: a failure to get a descriptor is logged as its one line, other errors whole", () => {
  const emfile = new OsError("open(/x)", E.EMFILE);
  assert.equal(loggable(emfile), `OsError: ${emfile.message}`);
  const denoEmfile = Object.assign(new Error("Too many open files (os error 24)"), {
    code: "EMFILE",
  });
  assert.equal(loggable(denoEmfile), "Error: Too many open files (os error 24)");
  const other = new TypeError("not a descriptor matter");
  assert.equal(loggable(other), other, "printed with its stack, as before");
  assert.equal(loggable("text"), "text");
});
