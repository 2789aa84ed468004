/**
 * The error every sandbox failure is reported as.
 *
 * The core turns it into a 500 `sandbox_unavailable` response. Nothing in the sandbox may catch
 * it and carry on: a thread that failed to restrict itself must never spawn a child.
 *
 * @module
 */

import { ApiError } from "../errors.ts";

/** The sandbox could not be set up; the command must not run. */
export class SandboxUnavailableError extends ApiError {
  readonly code = "sandbox_unavailable";
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

/** Runs `step`, rethrowing any failure as a {@link SandboxUnavailableError} prefixed by `what`. */
export function sandboxStep<T>(what: string, step: () => T): T {
  try {
    return step();
  } catch (e) {
    if (e instanceof SandboxUnavailableError) throw e;
    const detail = e instanceof Error ? e.message : String(e);
    throw new SandboxUnavailableError(`${what}: ${detail}`, { cause: e });
  }
}
