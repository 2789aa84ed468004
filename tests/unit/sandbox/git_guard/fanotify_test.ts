/**
 * What the git guard's watch knows a directory by: a key that holds across renames (the guard
 * opens a moved directory's old place by it), and that the guard can tell is stale once the
 * directory is removed (so it forgets it).
 *
 * @module
 */

import assert from "node:assert/strict";
import { EntryWatch, pathOf } from "../../../../src/sandbox/git_guard/fanotify.ts";
import { openEntry } from "../../../../src/sandbox/fs/entries.ts";
import { closeFd } from "../../../../src/sandbox/syscalls.ts";
import { AT_FDCWD } from "../../../../src/ffi/libc.ts";

Deno.test("a directory's key: there while it exists, renamed or not; gone once removed", async () => {
  const watch = new EntryWatch();
  const dir = Deno.makeTempDirSync({ dir: "/var/tmp", prefix: "uexec-key-" });
  try {
    watch.watch(dir);
    const fd = openEntry(AT_FDCWD, dir)!;
    const key = watch.dirKey(fd);
    closeFd(fd);
    assert.equal(watch.isGone(key), false);
    Deno.renameSync(dir, `${dir}-moved`);
    assert.equal(watch.isGone(key), false);
    // Opened by its key, it is found where it is now.
    const opened = watch.open(key)!;
    assert.equal(pathOf(opened), `${dir}-moved`);
    closeFd(opened);
    Deno.removeSync(`${dir}-moved`);
    assert.equal(watch.isGone(key), true);
  } finally {
    watch.close();
    for (const path of [dir, `${dir}-moved`]) {
      await Deno.remove(path, { recursive: true }).catch(() => {});
    }
  }
});
