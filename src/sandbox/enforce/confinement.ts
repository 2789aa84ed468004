/**
 * What each profile denies beyond its file rules, in the shape `/healthz` reports per profile:
 * the seccomp filter's refusals for the profile's network mode and which pathname unix sockets
 * stay reachable. Derived from the same tables the enforcement uses; pure, so it must never
 * probe or change the system.
 *
 * @module
 */

import type { Profile } from "../policy/profiles.ts";
import { type SeccompDenials, seccompDenials } from "./seccomp.ts";

/** What one enforcing profile denies beyond files. */
export interface ProfileDenials extends SeccompDenials {
  /**
   * Pathname unix sockets: every one outside the writable roots and the workdir is out of reach,
   * whenever it was bound, but these.
   */
  unix_sockets: { hidden: string; reachable: string[] };
}

/** What `profile` denies, or null when it enforces nothing (`full-access`). */
export function deniedByProfile(
  profile: Pick<Profile, "enforce" | "network" | "unixSockets">,
): ProfileDenials | null {
  if (!profile.enforce) return null;
  return {
    ...seccompDenials(profile.network),
    unix_sockets: {
      hidden: "every pathname socket outside the writable roots and the workdir, whenever bound",
      reachable: [...profile.unixSockets ?? []],
    },
  };
}
