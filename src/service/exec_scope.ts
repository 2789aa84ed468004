/**
 * What an `exec_command` may ask for, decided for its caller before anyone is asked or anything
 * starts: the profile (within an agent's `max_profile`), the escalation beyond it (within
 * `max_profile` plus `max_widening`, hosts within `max_egress`, extra writable roots that exist
 * and hold none of the server's state), the workdir (inside the workspace or an allowed root,
 * unless the run is an escalation the approver sees) and the shell as an executable path.
 *
 * It must never let an agent ask past its cap, nor grant a directory holding the server's state.
 *
 * @module
 */

import type { z } from "zod";
import { patternWithin } from "../egress/rules.ts";
import { ApiError, InvalidRequestError } from "../errors.ts";
import { FULL_ACCESS, type SandboxDomains } from "../sandbox/domains.ts";
import { isWithin, normalizeAbsolutePath, type Profile } from "../sandbox/policy/profiles.ts";
import { realPathOrSelf } from "../sandbox/fs/fsinfo.ts";
import { canonical, describe, fitsWithin, type Widening } from "../sandbox/policy/widening.ts";
import { type Agent, ForbiddenError, type Principal } from "./principal.ts";
import type { AgentBody, ExecBody } from "./schemas.ts";
import type { Supervisor } from "./supervisor.ts";

/** A workdir outside the workspace and the allowed roots (403 `forbidden_workdir`). */
export class ForbiddenWorkdirError extends ApiError {
  readonly code = "forbidden_workdir";
}

/** What the scope is decided from. */
export interface ExecScopeDeps {
  domains: SandboxDomains;
  supervisor: Pick<Supervisor, "profileFor">;
  /** Base directory for relative workdirs; workdirs must resolve inside it or `allowedRoots`. */
  workspace: string;
  /** More roots workdirs may be in (`UEXEC_ALLOWED_ROOTS`), resolved. */
  allowedRoots: string[];
  /** `UEXEC_MEMORY_MAX` and `UEXEC_SESSION_MEMORY_MAX`, in bytes. */
  memory: { max: number; session: number };
}

/** The checks of what an `exec_command` asks for, and of the caps an agent is given. */
export class ExecScope {
  #deps: ExecScopeDeps;

  constructor(deps: ExecScopeDeps) {
    this.#deps = deps;
  }

  /**
   * The caps of a new agent checked (`max_profile` exists, `max_widening` widens it with
   * absolute paths, `max_memory_bytes` within all sessions' memory); returns its `max_widening`
   * as an escalation's writable roots are compared with it: normalised, symlinks resolved where
   * they exist (a trailing slash or a link would otherwise match nothing the agent asks for).
   */
  agentCaps(body: z.output<typeof AgentBody>): Widening | undefined {
    if (body.max_profile !== undefined) this.#deps.domains.profile(body.max_profile);
    if (body.max_widening !== undefined) {
      if (body.max_profile === undefined) {
        throw new InvalidRequestError("max_widening: widens max_profile; give max_profile too");
      }
      const relative = body.max_widening.write?.find((path) => !path.startsWith("/"));
      if (relative !== undefined) {
        throw new InvalidRequestError(`max_widening.write: ${relative} is not absolute`);
      }
    }
    const { max } = this.#deps.memory;
    if (body.max_memory_bytes !== undefined && body.max_memory_bytes > max) {
      throw new InvalidRequestError(
        `max_memory_bytes: at most the memory of all sessions together ` +
          `(UEXEC_MEMORY_MAX, ${max}), got ${body.max_memory_bytes}`,
      );
    }
    return body.max_widening && canonical({
      ...body.max_widening,
      write: body.max_widening.write?.map((path) => realPathOrSelf(normalizeAbsolutePath(path))),
    });
  }

  /**
   * The memory a session of `principal` may use: its agent's `max_memory_bytes`, else the
   * per-session default; never more than all sessions together may (the cap may have been
   * lowered since the agent was made).
   */
  memory(principal: Principal): number {
    const { max, session } = this.#deps.memory;
    const own = principal.role === "agent" ? principal.maxMemoryBytes : undefined;
    return Math.min(own ?? session, max);
  }

  /** The profile the request runs under, within the agent's cap. */
  profile(principal: Principal, requested?: string): string {
    const { domains, supervisor } = this.#deps;
    const cap = principal.role === "agent" ? principal.maxProfile : undefined;
    if (cap === undefined) return supervisor.profileFor(requested);
    const capProfile = domains.profile(cap);
    if (requested === undefined) {
      const fallback = supervisor.profileFor(undefined);
      return fitsWithin(domains.profile(fallback), capProfile) ? fallback : cap;
    }
    this.#withinCap(principal, requested, "profile");
    return supervisor.profileFor(requested);
  }

  /**
   * The widest an agent may ever run under: its max_profile widened by its max_widening;
   * undefined for the operator and an agent without max_profile.
   */
  cap(principal: Principal): Profile | undefined {
    if (principal.role !== "agent" || principal.maxProfile === undefined) return undefined;
    return this.#deps.domains.widened(principal.maxProfile, principal.maxWidening ?? {});
  }

  /** 403 unless `profile` widened by `escalation` stays within the agent's `cap`. */
  escalationWithinCap(
    principal: Principal,
    profile: string,
    escalation: Widening,
    cap: Profile,
  ): void {
    if (fitsWithin(this.#deps.domains.widened(profile, escalation), cap)) return;
    const agent = principal as Agent;
    throw new ForbiddenError(
      `escalate: agent ${agent.name} may not ask to run ${describe(profile, escalation)}; ` +
        `it is capped at ${agent.maxProfile}` +
        (agent.maxWidening ? ` plus ${JSON.stringify(agent.maxWidening)}` : "") +
        " (max_profile, max_widening)",
    );
  }

  #withinCap(principal: Principal, name: string, field: string): void {
    if (principal.role !== "agent" || principal.maxProfile === undefined) return;
    const { domains } = this.#deps;
    if (!fitsWithin(domains.profile(name), domains.profile(principal.maxProfile))) {
      throw new ForbiddenError(
        `${field}: agent ${principal.name} may not ask for ${name}; ` +
          `its widest profile is ${principal.maxProfile}`,
      );
    }
  }

  /** What the request asks for beyond its profile, checked against the agent's cap. */
  escalation(
    principal: Principal,
    body: z.output<typeof ExecBody>,
    profile: string,
  ): Widening {
    const { escalate } = body;
    if (!escalate) {
      if (body.sandbox_permissions !== "require_escalated") return {};
      this.#withinCap(principal, FULL_ACCESS, "sandbox_permissions");
      return { unsandboxed: true };
    }
    if (escalate.profile !== undefined) {
      this.#deps.domains.profile(escalate.profile);
      this.#withinCap(principal, escalate.profile, "escalate.profile");
      if (escalate.profile === FULL_ACCESS) return { unsandboxed: true };
    }
    const base = body.workdir ? this.#workdirPath(body.workdir) : this.#deps.workspace;
    const write = escalate.write?.map((path, i) => this.#writableRoot(base, path, i));
    if (escalate.hosts) this.#egressHosts(principal, escalate.hosts, escalate.profile ?? profile);
    return canonical({
      profile: escalate.profile,
      write,
      tcp_ports: escalate.tcp_ports,
      hosts: escalate.hosts,
    });
  }

  /**
   * Hosts asked for through the egress proxy: only under a profile with egress rules, and
   * within the agent's `max_egress` (403 before the operator is asked).
   */
  #egressHosts(principal: Principal, hosts: string[], profile: string): void {
    if (!this.#deps.domains.profile(profile).egress) {
      throw new InvalidRequestError(
        `escalate.hosts: profile ${profile} has no egress proxy; ` +
          "run under a profile with egress rules (e.g. workspace-write-egress)",
      );
    }
    const cap = principal.role === "agent" ? principal.maxEgress : undefined;
    const beyond = cap && hosts.find((host) => !patternWithin(host, cap));
    if (beyond) {
      throw new ForbiddenError(
        `escalate.hosts: agent ${(principal as { name: string }).name} may not ask for ` +
          `${beyond}; its max_egress is ${cap.length ? cap.join(", ") : "empty"}`,
      );
    }
  }

  /** An extra writable root: an existing directory, never one holding the server's state. */
  #writableRoot(base: string, path: string, index: number): string {
    const field = `escalate.write.${index}`;
    const real = existingDir(path.startsWith("/") ? path : `${base}/${path}`, field);
    if (!this.#deps.domains.writable(real)) {
      throw new ForbiddenError(`${field}: ${real} holds the server's state; it cannot be granted`);
    }
    return real;
  }

  #workdirPath(workdir: string): string {
    return workdir.startsWith("/") ? workdir : `${this.#deps.workspace}/${workdir}`;
  }

  /**
   * The workdir, resolved after symlinks; it must lie inside the workspace or an allowed root
   * unless the request is an escalation (the approver is shown the workdir).
   */
  workdir(workdir: string | undefined, escalating: boolean): string {
    const real = existingDir(this.#workdirPath(workdir ?? ""), "workdir");
    const roots = [this.#deps.workspace, ...this.#deps.allowedRoots];
    if (escalating || roots.some((root) => isWithin(real, root))) return real;
    throw new ForbiddenWorkdirError(
      `workdir: ${real} is outside the workspace ${this.#deps.workspace}` +
        (this.#deps.allowedRoots.length ? ` and UEXEC_ALLOWED_ROOTS` : "") +
        `; add it to UEXEC_ALLOWED_ROOTS, or ask for an escalation`,
    );
  }
}

/** `path` resolved after symlinks; it must be an existing directory. */
function existingDir(path: string, field: string): string {
  let info: Deno.FileInfo;
  try {
    info = Deno.statSync(path);
  } catch {
    throw new InvalidRequestError(`${field}: ${path} does not exist`);
  }
  if (!info.isDirectory) throw new InvalidRequestError(`${field}: ${path} is not a directory`);
  return Deno.realPathSync(path);
}

/** The shell as an executable path: absolute, or found on the server's PATH. */
export function findShell(shell: string): string {
  const candidates = shell.includes("/")
    ? [shell]
    : (Deno.env.get("PATH") ?? "/usr/bin:/bin").split(":").map((dir) => `${dir}/${shell}`);
  for (const path of candidates) {
    try {
      const info = Deno.statSync(path);
      if (info.isFile && ((info.mode ?? 0) & 0o111) !== 0) return path;
    } catch {
      // Not there; try the next one.
    }
  }
  throw new InvalidRequestError(`shell: cannot start ${shell}: ENOENT`);
}
