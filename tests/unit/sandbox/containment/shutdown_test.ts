/**
 * A server's cgroups at shutdown, on real cgroups of this host: once the host is `closing`, a
 * session's kill leaves the killing to the instance's one `cgroup.kill` (`killAll`) and
 * resolves after it, and the directories of every session go with the instance's (the sweep),
 * so that nothing of the instance is left and its record is forgotten.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Reactor } from "../../../../src/io/reactor.ts";
import { CgroupHost } from "../../../../src/sandbox/containment/cgroups.ts";
import { cgroupRoot } from "../../../../src/sandbox/containment/hierarchy.ts";
import { instanceName } from "../../../../src/sandbox/instance.ts";
import { exists } from "../../../helpers/fs.ts";

const V2 = cgroupRoot(undefined);

Deno.test({
  name: "shutdown: one kill empties every session cgroup; their directories go with the instance",
  ignore: Deno.uid() !== 0 || V2 === undefined,
  async fn() {
    const reactor = new Reactor();
    const host = CgroupHost.open(reactor, V2!);
    const sleepers: Deno.ChildProcess[] = [];
    try {
      const cgroups = ["agent-a", "agent-b"].map((owner) => host.create({}, owner, true));
      const dirs = cgroups.flatMap((c) => host.dirsOf(c.name));
      for (const cgroup of cgroups) {
        const sleeper = new Deno.Command("sleep", { args: ["1000"] }).spawn();
        sleepers.push(sleeper);
        for (const procs of host.procsOf(cgroup.name)) {
          Deno.writeTextFileSync(procs, `${sleeper.pid}`);
        }
      }
      // The janitor's thread is up (as in a server long before its shutdown): the sweep's
      // deadline counts from closing, not from the thread's start.
      await host.remove([]);
      host.closing();
      let killed = 0;
      const kills = cgroups.map((c) => c.kill().then(() => killed++));
      // The sessions' kills wait for the instance's: nothing was killed by them meanwhile.
      await Promise.resolve();
      assert.equal(killed, 0);
      for (const cgroup of cgroups) {
        const procs = Deno.readTextFileSync(`${cgroup.dir}/cgroup.procs`).trim();
        assert.notEqual(procs, "", `${cgroup.name} was emptied before killAll`);
      }
      await host.killAll();
      await Promise.all(kills);
      assert.equal(killed, 2);
      for (const sleeper of sleepers) assert.equal((await sleeper.status).signal, "SIGKILL");
      await host.close();
      for (const dir of [host.dir, ...dirs]) assert.equal(exists(dir), false, `${dir} was left`);
      const record = `/run/uexec/cgroups/${instanceName()}`;
      assert.equal(exists(record), false, "the instance's record was kept");
    } finally {
      for (const s of sleepers) {
        try {
          s.kill("SIGKILL");
        } catch { /* dead */ }
        await s.status;
      }
      await host.close();
      await reactor.close();
    }
  },
});
