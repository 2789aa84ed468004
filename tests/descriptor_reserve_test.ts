/**
 * The descriptor reserve under a real RLIMIT_NOFILE (a child process run through prlimit): it
 * gives back exactly what it held, and is taken again only when twice its size is free.
 *
 * @module
 */

import assert from "node:assert/strict";

Deno.test("descriptor reserve: spent at the limit, taken back only when twice its size is free", async () => {
  const child = new URL("./fixtures/descriptor_reserve_child.ts", import.meta.url);
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
