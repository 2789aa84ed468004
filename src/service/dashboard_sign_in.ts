/**
 * The operator's browser sign-in to the dashboard: a one-time code (from a sign-in link) is
 * exchanged for a browser session, which the operator can end. Only the operator may mint a
 * code or end sessions; a browser session stands for the operator and nobody else. It holds no
 * state of its own (the codes and sessions are `SignInCodes` and `WebSessions`) and must never
 * hand a session out for a code that was not redeemed here.
 *
 * @module
 */

import { ApiError } from "../errors.ts";
import { OPERATOR, type Principal, requireOperator } from "./principal.ts";
import type { OpenedWebSession, WebSessions } from "./web_sessions.ts";
import type { MintedCode, SignInCodes } from "./sign_in_codes.ts";

/** The dashboard is turned off (`UEXEC_DASHBOARD=off`; 404 `dashboard_off`). */
export class DashboardOffError extends ApiError {
  readonly code = "dashboard_off";
  constructor() {
    super("the dashboard is off on this server (UEXEC_DASHBOARD=off)");
  }
}

/** The dashboard's sign-in, over the server's codes and browser sessions (absent when off). */
export class DashboardSignIn {
  #deps: { webSessions?: WebSessions; signInCodes?: SignInCodes };

  constructor(deps: { webSessions?: WebSessions; signInCodes?: SignInCodes }) {
    this.#deps = deps;
  }

  /**
   * A one-time code for the dashboard's sign-in link; only the operator may have one (403
   * `forbidden` for an agent).
   */
  mintCode(principal: Principal): MintedCode {
    requireOperator(principal, "a dashboard sign-in link");
    const { signInCodes } = this.#deps;
    if (!signInCodes) throw new DashboardOffError();
    return signInCodes.mint();
  }

  /**
   * Exchange a one-time sign-in code for an operator's browser session; undefined when the code
   * is unknown, already used or expired (or the dashboard is off).
   */
  signIn(code: string): OpenedWebSession | undefined {
    const { webSessions, signInCodes } = this.#deps;
    if (!webSessions || !signInCodes?.redeem(code)) return undefined;
    return webSessions.open(OPERATOR);
  }

  /** End every dashboard browser session (operator only); returns how many were live. */
  endAll(principal: Principal): number {
    requireOperator(principal, "ending the dashboard's sessions");
    const { webSessions } = this.#deps;
    if (!webSessions) throw new DashboardOffError();
    return webSessions.closeAll();
  }

  /** The principal of a signed-in browser session id, or undefined. */
  authenticate(id: string): Principal | undefined {
    return this.#deps.webSessions?.principal(id);
  }

  /** Sign a browser session out (anyone holding the id may end it). */
  signOut(id: string): void {
    this.#deps.webSessions?.close(id);
  }
}
