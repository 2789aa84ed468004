/**
 * The error every sandbox failure is reported as (and, where the failure was the server's own
 * shortage of descriptors, the 503 that says so instead).
 *
 * The core turns it into a 500 `sandbox_unavailable` response. Nothing in the sandbox may catch
 * it and carry on: a thread that failed to restrict itself must never spawn a child.
 *
 * @module
 */

import { ApiError, OutOfResourcesError } from "../errors.ts";
import { outOfDescriptors } from "../ffi/libc.ts";

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

/**
 * Refuses the start that asked: the sandbox cannot be what it says while `what` failed (`why`),
 * or, when that was for want of a descriptor, the server is short of them (503
 * `out_of_resources`, to try again once some are free).
 */
export function refuse(what: string, why: string): never {
  if (!outOfDescriptors(new Error(why))) throw new SandboxUnavailableError(`${what}: ${why}`);
  throw new OutOfResourcesError(
    `the server is out of file descriptors (${what}: ${why}); nothing was started, try again ` +
      "once sessions have ended",
  );
}
