/**
 * The egress proxy's name resolution from the operator's hosts file (src/egress/resolver.ts):
 * an edit applies to the next lookup, whether the file is rewritten in place at the same size
 * within the same second or replaced by a rename, and a hosts file that is gone fails the lookup
 * rather than answering from what was read before.
 *
 * @module
 */

import assert from "node:assert/strict";
import { fileStamp, Resolver } from "../../../src/egress/resolver.ts";

Deno.test("egress resolver: hosts file edits apply to the next lookup", async () => {
  const dir = await Deno.makeTempDir({ prefix: "uexec-resolver-" });
  try {
    const hosts = `${dir}/hosts`;
    await Deno.writeTextFile(hosts, "10.0.0.1 a.test\n");
    const r = new Resolver(hosts);
    assert.deepEqual(r.resolve("a.test"), ["10.0.0.1"]);
    // Rewritten in place at the same size: the stamp's nanoseconds tell it apart.
    const before = fileStamp(hosts);
    await Deno.writeTextFile(hosts, "10.0.0.2 a.test\n");
    assert.notEqual(fileStamp(hosts), before);
    assert.deepEqual(r.resolve("a.test"), ["10.0.0.2"]);
    // Replaced by a rename.
    await Deno.writeTextFile(`${dir}/next`, "10.0.0.3 a.test\n10.0.0.4 b.test\n");
    await Deno.rename(`${dir}/next`, hosts);
    assert.deepEqual(r.resolve("a.test"), ["10.0.0.3"]);
    assert.deepEqual(r.resolve("b.test"), ["10.0.0.4"]);
    // Literals need no file.
    assert.deepEqual(r.resolve("192.0.2.7"), ["192.0.2.7"]);
    // Gone: the lookup fails (the proxy answers 502), nothing stale is used.
    await Deno.remove(hosts);
    assert.throws(() => r.resolve("a.test"), /stat\(.*hosts\).*ENOENT/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
