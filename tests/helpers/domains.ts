/**
 * A sandbox domain registry for a test, made as the server makes one: the shipped profiles,
 * root's home, this process as the server, over a test's workspace.
 *
 * @module
 */

import type { Reactor } from "../../src/io/reactor.ts";
import { type DomainOptions, SandboxDomains } from "../../src/sandbox/domains.ts";
import { loadProfiles } from "../../src/sandbox/policy/profiles.ts";
import { Spawner } from "../../src/workers/pool.ts";

const PROFILE_DIR = new URL("../../sandbox-profiles", import.meta.url).pathname;

/** The registry for `workspace`, with `extra` options; close it (then `reactor`) after. */
export function testDomains(
  workspace: string,
  reactor: Reactor,
  extra: Partial<DomainOptions> = {},
): SandboxDomains {
  return new SandboxDomains({
    profiles: loadProfiles(PROFILE_DIR),
    home: "/root",
    serverPid: Deno.pid,
    workspace,
    reactor,
    reaper: () => new Spawner(),
    ...extra,
  });
}
