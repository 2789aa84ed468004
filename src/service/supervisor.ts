/**
 * The supervisor: runs each `exec_command` under the right sandbox, asks for approval where
 * the approval policy says so, notices sandbox denials and, when allowed and approved, reruns
 * the command with the narrowest widening the denial names (or unsandboxed where nothing
 * narrower fits, or where the approver picks it).
 *
 * An approval binds everything that decides what runs, and what runs is exactly the request
 * the approver was shown: the request is frozen before it is shown. It must never run a command
 * beyond its profile without an approval (or an explicit server-side full-access default), and
 * never let the agent change the policy or the profiles.
 *
 * @module
 */

import { type ApprovalPolicy, planExecution, RETRY_REASON } from "../approvals/policy.ts";
import type { ApprovalStore, Decision } from "../approvals/store.ts";
import { type Denial, urlDestinations } from "../sandbox/policy/denial.ts";
import { FULL_ACCESS, type SandboxChoice, type SandboxDomains } from "../sandbox/domains.ts";
import { protectedAncestor } from "../sandbox/git_guard/protected.ts";
import { isWithin, type Profile } from "../sandbox/policy/profiles.ts";
import { combine, fitsWithin, isEmpty, type Widening } from "../sandbox/policy/widening.ts";
import { InvalidRequestError, RejectedError } from "../errors.ts";
import type { CallResult, ExecRequest } from "../sessions/calls.ts";
import type { SessionManager } from "../sessions/manager.ts";

/** An `exec_command` as the supervisor receives it: the request minus its sandbox. */
export interface SupervisedExec {
  request: Omit<ExecRequest, "sandbox">;
  /** The profile asked for; the server default when absent. */
  profile?: string;
  /** What the agent asks for beyond the profile; `{}` for a plain sandboxed run. */
  escalation: Widening;
  /**
   * The widest the agent may ever run under (its max_profile and max_widening); a retry
   * beyond it is never proposed. Undefined: no cap.
   */
  cap?: Profile;
  /** Whether `request.shell` is the server's own shell rather than one the agent named. */
  serverShell: boolean;
  justification?: string;
  /** The agent's `max_egress`: the only hosts its egress proxy may ever let through. */
  egressCap?: string[];
}

/** Settings of the supervisor. */
export interface SupervisorOptions {
  manager: SessionManager;
  domains: SandboxDomains;
  approvals: ApprovalStore;
  policy: ApprovalPolicy;
  defaultProfile: string;
  approvalTimeoutMs: number;
}

/** Runs commands under the approval policy. */
export class Supervisor {
  #opts: SupervisorOptions;

  constructor(opts: SupervisorOptions) {
    this.#opts = opts;
  }

  /** The approval policy in force. */
  get policy(): ApprovalPolicy {
    return this.#opts.policy;
  }

  /** The profile a request runs under: the one asked for, or the server default. */
  profileFor(requested?: string): string {
    const name = requested ?? this.#opts.defaultProfile;
    this.#opts.domains.profile(name);
    if (name === FULL_ACCESS && this.#opts.defaultProfile !== FULL_ACCESS) {
      throw new InvalidRequestError(
        "profile: full-access is reachable only through an approved escalation " +
          '(sandbox_permissions: "require_escalated")',
      );
    }
    return name;
  }

  /** Run one `exec_command`. */
  async exec(input: SupervisedExec): Promise<CallResult> {
    const frozen = freeze(input);
    const profile = this.profileFor(frozen.profile);
    const escalating = !isEmpty(frozen.escalation);
    const plan = planExecution({
      policy: this.#opts.policy,
      sandboxPermissions: escalating ? "require_escalated" : "use_default",
      command: frozen.request.cmd,
      env: frozen.request.env,
      serverShell: frozen.serverShell,
      justification: frozen.justification,
    });
    if (plan.action === "reject") throw new RejectedError(plan.message);
    let granted: Widening = {};
    if (plan.action === "ask") {
      const decision = await this.#ask(frozen, profile, {
        escalation: escalating ? frozen.escalation : {},
        reason: plan.reason,
      });
      if (!decision.approved) throw new RejectedError(decision.message);
      granted = decision.granted;
    }
    const sandbox = this.#choose(frozen, profile, granted);
    const first = await this.#opts.manager.exec({ ...frozen.request, sandbox });
    if (!sandbox.policy.enforce || first.exit_code === undefined) return first;
    const next = planExecution({
      policy: this.#opts.policy,
      sandboxPermissions: escalating ? "require_escalated" : "use_default",
      command: frozen.request.cmd,
      // A refusal by the egress proxy is reported whatever the exit; only a failure is retried.
      denialDetected: first.sandbox.denied && first.exit_code !== 0,
    });
    if (next.action !== "ask") return first;
    const denial = first.sandbox.denial;
    const { domains } = this.#opts;
    const narrowest = widening(denial, {
      egress: sandbox.policy.egress !== undefined,
      command: frozen.request.cmd,
      workdir: frozen.request.workdir,
      protectedNames: domains.protectedNames,
      denyRead: sandbox.policy.denyRead,
      // Only a denied connection can be proposed the profile with network.
      withNetwork: denial?.kind === "network"
        ? this.#withNetwork(granted.profile ?? profile)
        : undefined,
    });
    // A directory holding the server's state cannot be granted: only no sandbox would do.
    const grantable = (narrowest.write?.every((path) => domains.writable(path)) ?? true) &&
      (narrowest.read?.every((path) => domains.revealable(path)) ?? true);
    const proposal = combine(granted, grantable ? narrowest : { unsandboxed: true });
    if (frozen.cap && !this.#fits(profile, proposal, frozen.cap)) {
      const message = "the retry this denial needs is beyond the agent's max_profile and " +
        "max_widening, so it was not proposed";
      return { ...first, sandbox: { ...first.sandbox, message } };
    }
    const decision = await this.#ask(frozen, profile, {
      escalation: proposal,
      reason: RETRY_REASON,
      denial,
      // The approver may pick no sandbox instead, unless the agent is capped below that.
      allowUnsandboxed: !frozen.cap?.enforce,
    });
    if (!decision.approved) {
      return { ...first, sandbox: { ...first.sandbox, message: decision.message } };
    }
    const retried = await this.#opts.manager.exec({
      ...frozen.request,
      sandbox: this.#choose(frozen, profile, decision.granted),
    });
    return { ...retried, sandbox: { ...retried.sandbox, retried: true } };
  }

  /**
   * A profile that is `name` plus every host and port and nothing else (workspace-write-net for
   * workspace-write), if one is configured.
   */
  #withNetwork(name: string): string | undefined {
    const { domains } = this.#opts;
    const base = domains.profile(name);
    if (!base.enforce) return undefined;
    // fitsWithin does not weigh unix sockets or limits: they must be the same.
    const rest = (p: Profile) => JSON.stringify([p.unixSockets ?? [], p.limits]);
    const baseRest = rest(base);
    return domains.names.find((other) => {
      const wider = domains.profile(other);
      const offline = { ...wider, network: base.network, tcpPorts: base.tcpPorts };
      return wider.enforce && wider.network === "all" && wider.tcpPorts === undefined &&
        fitsWithin(base, wider) && fitsWithin(offline, base) && rest(wider) === baseRest;
    });
  }

  /** Whether `profile` widened by `w` stays within `cap`. */
  #fits(profile: string, w: Widening, cap: Profile): boolean {
    return fitsWithin(this.#opts.domains.widened(profile, w), cap);
  }

  #choose(input: SupervisedExec, profile: string, granted: Widening): SandboxChoice {
    return this.#opts.domains.choose(profile, input.request.workdir, {
      agent: input.request.owner,
      widening: granted,
      egressCap: input.egressCap,
    });
  }

  #ask(
    input: SupervisedExec,
    profile: string,
    question: { escalation: Widening; reason: string; denial?: Denial; allowUnsandboxed?: boolean },
  ): Promise<Decision> {
    const { request } = input;
    return this.#opts.approvals.request({
      agent: request.owner,
      command: request.cmd,
      shell: request.shell,
      login: request.login,
      workdir: request.workdir,
      tty: request.tty,
      profile,
      env: request.env,
      justification: input.justification,
      execId: request.execId,
      ...question,
    }, this.#opts.approvalTimeoutMs);
  }
}

/** What {@link widening} weighs besides the denial. */
export interface ProposalContext {
  /** The command that was denied: its URLs give the port a failed name lookup does not. */
  command: string;
  workdir: string;
  /** Names of protected directories (`.git`): a denied write inside one asks for all of it. */
  protectedNames?: ReadonlySet<string>;
  /** A profile that is the denied run's plus every host and port, if one is configured. */
  withNetwork?: string;
  /** What the denied run's policy hid: a denied read inside one of these asks for it alone. */
  denyRead?: string[];
  /** Whether the denied run went out through the egress proxy (which names hosts). */
  egress?: boolean;
}

/**
 * The narrowest widening a denial names: the host the egress proxy refused (not on its allow
 * list), through the proxy; write access to the directory a denied write aimed at
 * (its nearest existing directory; inside a protected directory, that whole directory: git
 * writes all over its `.git`); for a denied connection, the TCP port it aimed at, else the
 * ports of the command's URLs (those of the host the message names, when it names one), else
 * the profile with network; for a denied read, the deepest deny-read entry of the policy that
 * hides what it aimed at; no sandbox when nothing narrower fits.
 */
export function widening(denial: Denial | undefined, context: ProposalContext): Widening {
  // The proxy refused a name off its list: that name, through the proxy, and nothing else.
  if (denial?.kind === "network" && context.egress && denial.rule !== undefined) {
    // A deny rule or a private address: no host approval opens it; only no sandbox would.
    return denial.rule === "not-allowed" ? { hosts: [denial.host!] } : { unsandboxed: true };
  }
  if (denial?.kind === "network") {
    if (denial.port !== undefined) return { tcp_ports: [denial.port] };
    const host = denial.host?.toLowerCase();
    const ports = urlDestinations(context.command)
      .filter((url) => host === undefined || url.host === host)
      .map((url) => url.port);
    if (ports.length > 0) return { tcp_ports: [...new Set(ports)] };
    if (context.withNetwork !== undefined) return { profile: context.withNetwork };
  }
  if (denial?.kind === "fs-read" && denial.path !== undefined) {
    const path = denial.path.startsWith("/") ? denial.path : `${context.workdir}/${denial.path}`;
    const hiding = (context.denyRead ?? []).filter((entry) => isWithin(path, entry))
      .sort((a, b) => b.length - a.length)[0];
    if (hiding !== undefined && hiding !== "/") return { read: [hiding] };
  }
  if (denial?.kind === "fs-write" && denial.path !== undefined) {
    const { workdir, protectedNames = new Set() } = context;
    const path = denial.path.startsWith("/") ? denial.path : `${workdir}/${denial.path}`;
    const dir = existingDirectory(protectedAncestor(path, protectedNames, null) ?? path);
    if (dir !== undefined && dir !== "/") return { write: [dir] };
  }
  return { unsandboxed: true };
}

function existingDirectory(path: string): string | undefined {
  for (let p = path; p !== ""; p = p.slice(0, p.lastIndexOf("/"))) {
    try {
      const real = Deno.realPathSync(p);
      if (Deno.statSync(real).isDirectory) return real;
    } catch {
      // Not there: try its parent.
    }
  }
  return undefined;
}

/** A deep copy that cannot change under the approver (the env and escalation lists too). */
function freeze(input: SupervisedExec): SupervisedExec {
  return Object.freeze({
    ...input,
    request: Object.freeze({ ...input.request, env: Object.freeze({ ...input.request.env }) }),
    escalation: Object.freeze(structuredClone(input.escalation)),
  });
}
