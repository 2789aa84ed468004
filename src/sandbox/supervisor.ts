/**
 * The supervisor: runs each `exec_command` under the right sandbox, asks for approval where
 * the approval policy says so, notices sandbox denials and, when allowed and approved, reruns
 * the command without the sandbox.
 *
 * It must never run a command unsandboxed without an approval (or an explicit server-side
 * full-access default), and never let the agent change the policy or the profiles.
 *
 * @module
 */

import {
  type ApprovalPolicy,
  planExecution,
  type SandboxPermissions,
} from "../approvals/policy.ts";
import type { ApprovalStore, Decision } from "../approvals/store.ts";
import { InvalidRequestError, RejectedError } from "../sessions/errors.ts";
import type { CallResult, ExecRequest, SessionManager } from "../sessions/manager.ts";
import { FULL_ACCESS, type SandboxChoice, type SandboxDomains } from "./domains.ts";

/** An `exec_command` as the supervisor receives it: the request minus its sandbox. */
export interface SupervisedExec {
  request: Omit<ExecRequest, "sandbox">;
  /** The profile asked for; the server default when absent. */
  profile?: string;
  sandboxPermissions: SandboxPermissions;
  justification?: string;
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

  /** Run one `exec_command`. */
  async exec(input: SupervisedExec): Promise<CallResult> {
    const profile = this.#profileFor(input.profile);
    const plan = planExecution({
      policy: this.#opts.policy,
      sandboxPermissions: input.sandboxPermissions,
      command: input.request.cmd,
      justification: input.justification,
    });
    if (plan.action === "reject") throw new RejectedError(plan.message);
    if (plan.action === "ask") await this.#approve(input, profile, plan.reason);
    const wantsSandbox = plan.action === "ask"
      ? plan.thenRun.sandboxed
      : plan.action === "run" && plan.sandboxed;
    const sandbox = wantsSandbox
      ? await this.#opts.domains.choose(profile, input.request.workdir)
      : await this.#unsandboxed(input);
    const first = await this.#opts.manager.exec({ ...input.request, sandbox });
    if (!sandbox.policy.enforce || first.exit_code === undefined) return first;
    const next = planExecution({
      policy: this.#opts.policy,
      sandboxPermissions: input.sandboxPermissions,
      command: input.request.cmd,
      denialDetected: first.sandbox.denied,
    });
    if (next.action !== "ask") return first;
    const decision = await this.#ask(input, profile, next.reason);
    if (!decision.approved) {
      return { ...first, sandbox: { ...first.sandbox, message: decision.message } };
    }
    const retried = await this.#opts.manager.exec({
      ...input.request,
      sandbox: await this.#unsandboxed(input),
    });
    return { ...retried, sandbox: { ...retried.sandbox, retried: true } };
  }

  /**
   * The profile asked for, or the default (checked before anything is asked or prepared);
   * full-access only when it is the server default.
   */
  #profileFor(requested?: string): string {
    const name = requested ?? this.#opts.defaultProfile;
    this.#opts.domains.profile(name);
    if (name === FULL_ACCESS && this.#opts.defaultProfile !== FULL_ACCESS) {
      throw new InvalidRequestError(
        "profile: full-access is reachable only through sandbox_permissions: require_escalated and an approval",
      );
    }
    return name;
  }

  #unsandboxed(input: SupervisedExec): Promise<SandboxChoice> {
    return this.#opts.domains.choose(FULL_ACCESS, input.request.workdir);
  }

  async #approve(input: SupervisedExec, profile: string, reason: string): Promise<void> {
    const decision = await this.#ask(input, profile, reason);
    if (!decision.approved) throw new RejectedError(decision.message);
  }

  #ask(input: SupervisedExec, profile: string, reason: string): Promise<Decision> {
    return this.#opts.approvals.request({
      command: input.request.cmd,
      workdir: input.request.workdir,
      profile,
      reason,
      justification: input.justification,
      tty: input.request.tty,
      sandboxPermissions: input.sandboxPermissions,
    }, this.#opts.approvalTimeoutMs);
  }
}
