/**
 * Approval policies and the decision of what to do with one `exec_command`, with Codex's
 * meanings:
 *
 * - `never`: never ask. Commands run sandboxed; a detected denial goes back to the agent;
 *   `require_escalated` is rejected (403 `rejected`).
 * - `on-failure`: run sandboxed without asking; after a detected denial ask to retry with the
 *   narrowest widening that covers it (the supervisor's `widening`: a directory to write, a
 *   port, the command's URL ports, the profile with network), or unsandboxed when nothing
 *   narrower fits; the approver may pick unsandboxed instead.
 * - `on-request` (default): the agent decides. `use_default` runs sandboxed without asking and a
 *   denial goes back to the agent; `require_escalated` asks before running unsandboxed.
 * - `untrusted`: only known-safe read-only commands ({@link isKnownSafeCommand}), with the
 *   server's shell and no environment variables but harmless ones ({@link isKnownSafeEnv}), run
 *   without asking; anything else asks first, then runs sandboxed. After a detected denial it asks
 *   again, because approving a sandboxed run is not approving an unsandboxed one (unless the
 *   first answer was `approved_for_session`, which the store remembers).
 *
 * `require_escalated` under `on-failure` and `untrusted` asks before running unsandboxed.
 * This module is pure: it must never run, prompt or wait; the caller does that.
 *
 * @module
 */

import { isKnownSafeCommand, isKnownSafeEnv } from "./safe_commands.ts";

/** The server's approval policy (`UEXEC_APPROVAL_POLICY`). */
export type ApprovalPolicy = "never" | "on-failure" | "on-request" | "untrusted";

/** Every approval policy, in documentation order. */
export const APPROVAL_POLICIES: readonly ApprovalPolicy[] = [
  "never",
  "on-failure",
  "on-request",
  "untrusted",
];

/** The policy used when none is configured. */
export const DEFAULT_APPROVAL_POLICY: ApprovalPolicy = "on-request";

/** What the agent asked for in `exec_command.sandbox_permissions`. */
export type SandboxPermissions = "use_default" | "require_escalated";

/** The question asked after a sandbox denial. */
export const RETRY_REASON = "command failed in the sandbox; retry it with the access shown?";

/** Parses `UEXEC_APPROVAL_POLICY`; unset or empty gives the default, anything unknown throws. */
export function parseApprovalPolicy(value: string | undefined): ApprovalPolicy {
  if (value === undefined || value === "") return DEFAULT_APPROVAL_POLICY;
  const policy = APPROVAL_POLICIES.find((p) => p === value);
  if (!policy) {
    throw new Error(
      `UEXEC_APPROVAL_POLICY: unknown policy ${JSON.stringify(value)}; expected one of ${
        APPROVAL_POLICIES.join(", ")
      }`,
    );
  }
  return policy;
}

/** What to do next with one command. */
export type ExecPlan =
  | { action: "run"; sandboxed: boolean }
  | { action: "ask"; reason: string; thenRun: { sandboxed: boolean } }
  | { action: "reject"; status: 403; error: "rejected"; message: string }
  | { action: "return_denial" }
  | { action: "return_result" };

/** Input to {@link planExecution}. */
export interface PlanInput {
  policy: ApprovalPolicy;
  sandboxPermissions: SandboxPermissions;
  /** The command line, for `untrusted`'s known-safe check. */
  command: string;
  /**
   * What else decides what runs, for the same check: the environment the request adds, and
   * whether the shell is the server's own (not one the agent named). Without them the command
   * line alone is judged.
   */
  env?: Record<string, string>;
  serverShell?: boolean;
  /**
   * Omitted before the first run. After a sandboxed run: whether a sandbox denial was detected.
   */
  denialDetected?: boolean;
  /** The agent's justification, used as the question when it asks to escalate. */
  justification?: string;
}

const RUN_SANDBOXED: ExecPlan = { action: "run", sandboxed: true };

function askBeforeRunning(sandboxed: boolean, reason: string): ExecPlan {
  return { action: "ask", reason, thenRun: { sandboxed } };
}

function beforeFirstRun(input: PlanInput): ExecPlan {
  const { policy, sandboxPermissions, command } = input;
  if (sandboxPermissions === "require_escalated") {
    if (policy === "never") {
      return {
        action: "reject",
        status: 403,
        error: "rejected",
        message:
          "approval policy is never: require_escalated cannot be approved; run the command with use_default",
      };
    }
    return askBeforeRunning(
      false,
      input.justification || "the agent asks to run this command without the sandbox",
    );
  }
  if (policy === "untrusted" && !isKnownSafeCommand(command)) {
    return askBeforeRunning(true, "untrusted policy: this command is not known to be read-only");
  }
  // A known-safe line can still run anything through a shell, or a variable (LD_PRELOAD,
  // BASH_ENV, PATH, GIT_EXTERNAL_DIFF), the agent chose.
  if (policy === "untrusted" && (input.serverShell === false || !isKnownSafeEnv(input.env))) {
    return askBeforeRunning(
      true,
      "untrusted policy: this command runs with a shell or environment variables the agent chose",
    );
  }
  return RUN_SANDBOXED;
}

/**
 * Decides the next step for one `exec_command`: call it before the first run, then again after
 * a sandboxed run with `denialDetected` set. Results of unsandboxed runs are always final.
 */
export function planExecution(input: PlanInput): ExecPlan {
  if (input.denialDetected === undefined) return beforeFirstRun(input);
  if (!input.denialDetected) return { action: "return_result" };
  if (input.policy === "on-failure" || input.policy === "untrusted") {
    return askBeforeRunning(false, RETRY_REASON);
  }
  return { action: "return_denial" };
}
