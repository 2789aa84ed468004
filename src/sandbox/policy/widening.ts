/**
 * Narrow escalation: what an approved command may do beyond its profile. A widening names a
 * wider profile, extra writable roots, deny-read entries of the profile to lift, extra TCP
 * ports, extra hosts for the egress proxy (of a profile with egress rules), or (the widest) no
 * sandbox at all; it is
 * applied to a profile to give the profile the command then runs under, still sandboxed unless
 * `unsandboxed` is set.
 *
 * Pure: it must never touch the file system or decide whether a widening is allowed (the
 * supervisor asks the approver; the caller validates paths and profile names).
 *
 * @module
 */

import { isWithin, type Profile } from "./profiles.ts";
import type { ResourceLimits } from "./policy.ts";

/** What an escalation adds; `{}` adds nothing. */
export interface Widening {
  /** Run under this (wider) profile instead. */
  profile?: string;
  /** Extra writable roots (absolute, existing directories). */
  write?: string[];
  /**
   * Deny-read entries of the profile (absolute, as resolved) to lift: what a denied read aimed
   * at. The server's own hidden paths stay hidden whatever this says (domains.ts).
   */
  read?: string[];
  /** Extra TCP ports the command may connect to, on any host. */
  tcp_ports?: number[];
  /** Extra host patterns the egress proxy lets through (a profile with egress rules only). */
  hosts?: string[];
  /** No sandbox at all. */
  unsandboxed?: boolean;
}

/** True when the widening adds nothing. */
export function isEmpty(w: Widening): boolean {
  return !w.unsandboxed && w.profile === undefined && !w.write?.length && !w.read?.length &&
    !w.tcp_ports?.length && !w.hosts?.length;
}

function union<T>(a: T[] | undefined, b: T[] | undefined): T[] | undefined {
  if (!a?.length && !b?.length) return undefined;
  return [...new Set([...(a ?? []), ...(b ?? [])])];
}

/** A canonical form: sorted, deduplicated, empty parts left out (for keys and display). */
export function canonical(w: Widening): Widening {
  if (w.unsandboxed) return { unsandboxed: true };
  const write = union(w.write, undefined)?.sort();
  const read = union(w.read, undefined)?.sort();
  const ports = union(w.tcp_ports, undefined)?.sort((a, b) => a - b);
  const hosts = union(w.hosts, undefined)?.sort();
  return {
    ...(w.profile === undefined ? {} : { profile: w.profile }),
    ...(write ? { write } : {}),
    ...(read ? { read } : {}),
    ...(ports ? { tcp_ports: ports } : {}),
    ...(hosts ? { hosts } : {}),
  };
}

/** Both widenings at once. */
export function combine(a: Widening, b: Widening): Widening {
  if (a.unsandboxed || b.unsandboxed) return { unsandboxed: true };
  return canonical({
    profile: b.profile ?? a.profile,
    write: union(a.write, b.write),
    read: union(a.read, b.read),
    tcp_ports: union(a.tcp_ports, b.tcp_ports),
    hosts: union(a.hosts, b.hosts),
  });
}

/**
 * The profile `base` widened by `w`. `lookup` resolves profile names (the wider profile, and
 * `unsandboxedProfile` for no sandbox).
 */
export function widen(
  base: Profile,
  w: Widening,
  lookup: (name: string) => Profile,
  unsandboxedProfile: string,
): Profile {
  if (w.unsandboxed) return lookup(unsandboxedProfile);
  const profile = w.profile === undefined ? base : lookup(w.profile);
  if (!profile.enforce) return profile;
  const writableRoots = union(profile.writableRoots, w.write) ?? [];
  const readable = union(profile.liftedDenyRead, w.read);
  const lifted = readable ? { liftedDenyRead: readable } : {};
  const egress = profile.egress && w.hosts?.length
    ? { ...profile.egress, allow: union(profile.egress.allow, w.hosts)! }
    : profile.egress;
  const withEgress = egress ? { egress } : {};
  if (!w.tcp_ports?.length) return { ...profile, writableRoots, ...lifted, ...withEgress };
  const open = profile.network === "all" && profile.tcpPorts === undefined;
  // Ports on any host leave the egress namespace: connections go out directly.
  const { egress: _proxied, ...direct } = profile;
  return {
    ...direct,
    writableRoots,
    ...lifted,
    network: "all",
    ...(open ? {} : { tcpPorts: union(profile.tcpPorts, w.tcp_ports) }),
  };
}

/** One sentence saying how a command runs under `profile` widened by `w`. */
export function describe(profile: string, w: Widening): string {
  if (w.unsandboxed) return "without any sandbox, with the server's own privileges";
  const parts = [`sandboxed under ${w.profile ?? profile}`];
  if (w.profile !== undefined) parts[0] += ` instead of ${profile}`;
  if (w.write?.length) {
    // A repository's configuration and hooks decide what git runs, for the operator too.
    const git = w.write.some((path) => path.split("/").includes(".git"));
    parts.push(
      `plus write access to ${w.write.join(", ")}` +
        (git
          ? " (a git directory: its config and hooks can make git run commands for whoever " +
            "uses that repository next, outside any sandbox)"
          : ""),
    );
  }
  if (w.read?.length) {
    parts.push(`plus read access to ${w.read.join(", ")} (which the profile hides)`);
  }
  if (w.hosts?.length) {
    parts.push(
      `plus HTTP(S) through the egress proxy to ${w.hosts.join(", ")} (for this command only)`,
    );
  }
  if (w.tcp_ports?.length) {
    // The network becomes "all" with a TCP port list: Landlock limits TCP only, so UDP (which
    // name lookups need) goes to any host. The approver must read that too.
    parts.push(
      `plus TCP to port${w.tcp_ports.length > 1 ? "s" : ""} ${w.tcp_ports.join(", ")} ` +
        "on any host (connect and listen) and UDP to any host (name lookups)",
    );
  }
  return parts.join(", ");
}

const NETWORK_RANK = { none: 0, loopback: 1, all: 2 } as const;

function rootsWithin(roots: string[], caps: string[]): boolean {
  return roots.every((root) =>
    caps.some((cap) =>
      root === cap || (cap.startsWith("/") && root.startsWith("/") && isWithin(root, cap))
    )
  );
}

/** True when every limit `cap` sets, `limits` sets too, no higher. */
function limitsWithin(limits: ResourceLimits, cap: ResourceLimits): boolean {
  return (Object.keys(cap) as (keyof ResourceLimits)[]).every((key) =>
    cap[key] === undefined || (limits[key] !== undefined && limits[key]! <= cap[key]!)
  );
}

/**
 * True when `profile` grants nothing that `cap` does not: no more to read, write or reach (unix
 * sockets included), no looser limits, and everything `cap` hides hidden too. An unenforced cap admits everything; an unenforced profile
 * fits only such a cap.
 */
export function fitsWithin(profile: Profile, cap: Profile): boolean {
  if (!cap.enforce) return true;
  if (!profile.enforce) return false;
  if (NETWORK_RANK[profile.network] > NETWORK_RANK[cap.network]) return false;
  if (profile.network !== "none" && cap.tcpPorts !== undefined) {
    if (!profile.tcpPorts?.every((port) => cap.tcpPorts!.includes(port))) return false;
  }
  // What a widening lifted may be anything the cap hides.
  if (profile.liftedDenyRead?.length) return false;
  // A unix socket reaches whatever listens on it (the Docker daemon is root on the host).
  if (!(profile.unixSockets ?? []).every((s) => cap.unixSockets?.includes(s))) return false;
  if (!limitsWithin(profile.limits, cap.limits)) return false;
  const denied = new Set(profile.denyRead.map((d) => JSON.stringify(d)));
  return rootsWithin(profile.readableRoots, cap.readableRoots) &&
    rootsWithin(profile.writableRoots, cap.writableRoots) &&
    cap.denyRead.every((d) => denied.has(JSON.stringify(d))) &&
    cap.readOnlySubpaths.every((sub) => profile.readOnlySubpaths.includes(sub));
}
