/**
 * Reusing a session's emptied cgroups (`reuseCgroups`), on real cgroups of this host: a cgroup
 * is handed on only when nothing of its session is left in it (no process in a v1 twin, no
 * cgroup made beneath it, little memory still charged), with the baseline its next session's
 * usage is counted from; otherwise it is removed, with what was made beneath it.
 *
 * @module
 */

import assert from "node:assert/strict";
import { closeAll } from "../../../../src/ffi/libc.ts";
import { reuseCgroups, type ReusePlan } from "../../../../src/sandbox/containment/cgroup_fs.ts";
import { cgroupRoot } from "../../../../src/sandbox/containment/hierarchy.ts";
import { exists } from "../../../helpers/fs.ts";

const V2 = cgroupRoot(undefined);
const V1 = { pids: "/sys/fs/cgroup/pids", memory: "/sys/fs/cgroup/memory" };
const MiB = 1 << 20;

/** A fresh directory for this test beneath `hierarchy`, removed (depth first) after `body`. */
async function scratch(
  hierarchy: string,
  body: (dir: string) => void | Promise<void>,
): Promise<void> {
  const dir = `${hierarchy}/uexec-test-${crypto.randomUUID().slice(0, 8)}`;
  Deno.mkdirSync(dir);
  try {
    await body(dir);
  } finally {
    for (const d of [`${dir}/s/sub`, `${dir}/s`, dir]) {
      try {
        Deno.removeSync(d);
      } catch {
        // Removed by the code under test, or never made.
      }
    }
  }
}

/**
 * A session cgroup's path in the v2 hierarchy and its twin's in the v1 `hierarchy`, beneath
 * fresh scratch directories there (neither made yet).
 */
function withTwin(
  hierarchy: string,
  body: (s: string, twin: string) => void | Promise<void>,
): Promise<void> {
  return scratch(V2!, (root) => scratch(hierarchy, (v1root) => body(`${root}/s`, `${v1root}/s`)));
}

/** Run the shell `script` inside the cgroups whose `cgroup.procs` files are `procs`. */
async function runIn(procs: string[], script: string): Promise<void> {
  const enter = procs.map((p) => `echo $$ > ${p}`).join("; ");
  const out = await new Deno.Command("sh", { args: ["-c", `${enter}; ${script}`] }).output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
}

function plan(dirs: string[], extra: Partial<ReusePlan> = {}): ReusePlan {
  return {
    dirs,
    maxLeftBytes: MiB,
    writes: [],
    procs: dirs.map((d) => `${d}/cgroup.procs`),
    ...extra,
  };
}

const cpuUsec = (dir: string) =>
  Number(/^usage_usec (\d+)$/m.exec(Deno.readTextFileSync(`${dir}/cpu.stat`))![1]);

Deno.test({
  name: "an emptied cgroup is handed on with its counters as the baseline",
  ignore: V2 === undefined,
  fn: () =>
    scratch(V2!, async (root) => {
      const s = `${root}/s`;
      Deno.mkdirSync(s);
      await runIn([`${s}/cgroup.procs`], "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done");
      const used = cpuUsec(s);
      assert.ok(used > 0);
      const reused = reuseCgroups(plan([s], { writes: [] }));
      assert.ok(reused, "an emptied cgroup was not reused");
      closeAll(reused.procs);
      assert.equal(reused.procs.length, 1);
      assert.deepEqual(reused.baseline, { cpuUsec: used, memoryBytes: 0, oomKills: 0 });
      assert.equal(exists(s), true);
    }),
});

Deno.test({
  name: "a cgroup with a cgroup made beneath it is removed with it, not handed on",
  ignore: V2 === undefined,
  fn: () =>
    scratch(V2!, (root) => {
      const s = `${root}/s`;
      Deno.mkdirSync(`${s}/sub`, { recursive: true });
      assert.equal(reuseCgroups(plan([s])), undefined);
      assert.equal(exists(s), false, "the cgroup (or the one beneath it) is left");
    }),
});

Deno.test({
  name: "a cgroup whose v1 twin still holds a process is not handed on",
  ignore: V2 === undefined || !exists(V1.pids),
  fn: () =>
    withTwin(V1.pids, async (s, twin) => {
      Deno.mkdirSync(s);
      Deno.mkdirSync(twin);
      // Moved into the v1 twin only (as a root command may do), and left running.
      const child = new Deno.Command("sh", {
        args: ["-c", `echo $$ > ${twin}/cgroup.procs && echo in && exec sleep 1007`],
        stdout: "piped",
      }).spawn();
      try {
        const { value } = await child.stdout.getReader().read();
        assert.equal(new TextDecoder().decode(value), "in\n");
        assert.equal(reuseCgroups(plan([s, twin])), undefined);
        assert.equal(exists(s), false);
        assert.equal(exists(twin), true, "a cgroup holding a process was removed");
      } finally {
        child.kill("SIGKILL");
        await child.status;
      }
    }),
});

Deno.test({
  name: "a limit a (root) command changed in its cgroup is set again before reuse",
  ignore: V2 === undefined || !exists(V1.pids),
  fn: () =>
    withTwin(V1.pids, (s, twin) => {
      Deno.mkdirSync(s);
      Deno.mkdirSync(twin);
      Deno.writeTextFileSync(`${twin}/pids.max`, "max");
      const writes = [{ path: `${twin}/pids.max`, text: "32" }];
      const reused = reuseCgroups(plan([s, twin], { writes }));
      assert.ok(reused);
      closeAll(reused.procs);
      assert.equal(Deno.readTextFileSync(`${twin}/pids.max`), "32\n");
    }),
});

Deno.test({
  name: "a cgroup still charged with more memory than allowed is not handed on",
  ignore: V2 === undefined || !exists(V1.memory),
  fn: () =>
    withTwin(V1.memory, async (s, twin) => {
      const file = await Deno.makeTempFile({ prefix: "uexec-charged-" });
      try {
        const charge = async () => {
          Deno.mkdirSync(s);
          Deno.mkdirSync(twin);
          // Page cache written from inside stays charged to the twin after the process left.
          await runIn(
            [`${s}/cgroup.procs`, `${twin}/cgroup.procs`],
            `head -c ${4 * MiB} /dev/zero > ${file}`,
          );
          const left = Number(Deno.readTextFileSync(`${twin}/memory.usage_in_bytes`));
          assert.ok(left >= 4 * MiB, `${left}`);
          return left;
        };
        await charge();
        assert.equal(reuseCgroups(plan([s, twin], { memory: twin })), undefined);
        assert.equal(exists(s) || exists(twin), false);

        const left = await charge();
        const reused = reuseCgroups(plan([s, twin], { memory: twin, maxLeftBytes: 64 * MiB }));
        assert.ok(reused);
        closeAll(reused.procs);
        // Nothing runs in the twin, so its charge can only fall (the kernel uncharges lazily):
        // the baseline is what was charged when it was read, between the 4 MiB written and
        // `left`, and the high-water mark starts again from no more than that.
        const baseline = reused.baseline.memoryBytes;
        assert.ok(baseline >= 4 * MiB && baseline <= left, `${baseline} of ${left}`);
        const high = Number(Deno.readTextFileSync(`${twin}/memory.max_usage_in_bytes`));
        assert.ok(high >= 4 * MiB && high <= baseline, `${high} of ${baseline}`);
      } finally {
        await Deno.remove(file);
      }
    }),
});
