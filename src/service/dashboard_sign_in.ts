/**
 * The operator's browser sign-in to the dashboard: a one-time code (from a sign-in link) is
 * exchanged for a browser session, which the operator can end. Only the operator may mint a
 * code or end sessions; a browser session stands for the operator and nobody else. It holds no
 * state of its own (the codes and sessions are `SignInCodes` and `WebSessions`, and in a fleet
 * the store's {@link SharedSignIn}, where this node's `WebSessions` is a copy of what it has
 * seen) and must never hand a session out for a code that was not redeemed here.
 *
 * @module
 */

import { ApiError } from "../errors.ts";
import { OPERATOR, type Principal, requireOperator } from "./principal.ts";
import type { OpenedWebSession, WebSessions } from "./web_sessions.ts";
import type { MintedCode, SignInCodes } from "./sign_in_codes.ts";
import { newToken, tokenDigest } from "./bearer_tokens.ts";

/** The dashboard is turned off (`UEXEC_DASHBOARD=off`; 404 `dashboard_off`). */
export class DashboardOffError extends ApiError {
  readonly code = "dashboard_off";
  constructor() {
    super("the dashboard is off on this server (UEXEC_DASHBOARD=off)");
  }
}

/**
 * A fleet's codes and browser sessions, shared by every node (src/fleet/dashboard.ts): digests
 * only, expiries on the store's clock.
 */
export interface SharedSignIn {
  /** Keep a code's digest for `ttlMs`. */
  addCode(digest: string, ttlMs: number): Promise<void>;
  /** Take a code's digest if kept and unexpired: true once in the whole fleet. */
  takeCode(digest: string): Promise<boolean>;
  /** Keep a session id's digest for `ttlMs`. */
  addSession(digest: string, ttlMs: number): Promise<void>;
  /** How long a session has left, or undefined (unknown, ended or expired). */
  sessionLeftMs(digest: string): Promise<number | undefined>;
  /** Which of `digests` are still live sessions. */
  liveSessions(digests: string[]): Promise<Set<string>>;
  /** End a session (every one: undefined) on every node; how many were live. */
  endSessions(digest?: string): Promise<number>;
}

/** What the sign-in works on (the codes and sessions absent when the dashboard is off). */
export interface DashboardSignInDeps {
  webSessions?: WebSessions;
  signInCodes?: SignInCodes;
  /** In a fleet: the store's codes and sessions. */
  sharedSignIn?: SharedSignIn;
}

/** The dashboard's sign-in, over the server's codes and browser sessions (absent when off). */
export class DashboardSignIn {
  #deps: DashboardSignInDeps;

  constructor(deps: DashboardSignInDeps) {
    this.#deps = deps;
  }

  /**
   * A one-time code for the dashboard's sign-in link; only the operator may have one (403
   * `forbidden` for an agent).
   */
  async mintCode(principal: Principal): Promise<MintedCode> {
    requireOperator(principal, "a dashboard sign-in link");
    const { signInCodes, sharedSignIn } = this.#deps;
    if (!signInCodes) throw new DashboardOffError();
    if (!sharedSignIn) return signInCodes.mint();
    const code = newToken();
    await sharedSignIn.addCode(tokenDigest(code), signInCodes.ttlMs);
    return { code, expiresInSeconds: Math.floor(signInCodes.ttlMs / 1000) };
  }

  /**
   * Exchange a one-time sign-in code for an operator's browser session; undefined when the code
   * is unknown, already used or expired (or the dashboard is off).
   */
  async signIn(code: string): Promise<OpenedWebSession | undefined> {
    const { webSessions, signInCodes, sharedSignIn } = this.#deps;
    if (!webSessions || !signInCodes) return undefined;
    const redeemed = sharedSignIn
      ? await sharedSignIn.takeCode(tokenDigest(code))
      : signInCodes.redeem(code);
    if (!redeemed) return undefined;
    const opened = webSessions.open(OPERATOR);
    try {
      await sharedSignIn?.addSession(tokenDigest(opened.id), webSessions.ttlMs);
    } catch (err) {
      webSessions.close(opened.id);
      throw err;
    }
    return opened;
  }

  /** End every dashboard browser session (operator only); returns how many were live. */
  async endAll(principal: Principal): Promise<number> {
    requireOperator(principal, "ending the dashboard's sessions");
    const { webSessions, sharedSignIn } = this.#deps;
    if (!webSessions) throw new DashboardOffError();
    const live = webSessions.closeAll();
    return sharedSignIn ? await sharedSignIn.endSessions() : live;
  }

  /** The principal of a signed-in browser session id (as this node knows it), or undefined. */
  authenticate(id: string): Principal | undefined {
    return this.#deps.webSessions?.principal(id);
  }

  /**
   * In a fleet, a session id this node does not know: if the store holds it live (opened on
   * another node), this node takes a copy, so that {@link authenticate} knows it.
   */
  async load(id: string): Promise<void> {
    const { webSessions, sharedSignIn } = this.#deps;
    if (!webSessions || !sharedSignIn || webSessions.principal(id)) return;
    const leftMs = await sharedSignIn.sessionLeftMs(tokenDigest(id));
    // A concurrent load of the same id may have taken its copy meanwhile: one copy only.
    if (leftMs === undefined || leftMs <= 0 || webSessions.principal(id)) return;
    webSessions.open(OPERATOR, { id, ttlMs: leftMs });
  }

  /** Sign a browser session out (anyone holding the id may end it), on every node. */
  async signOut(id: string): Promise<void> {
    const { webSessions, sharedSignIn } = this.#deps;
    webSessions?.close(id);
    await sharedSignIn?.endSessions(tokenDigest(id));
  }

  /** A session ended on some node (undefined: all of them): this node's copy ends too. */
  ended(digest: string | undefined): void {
    const { webSessions } = this.#deps;
    if (digest === undefined) webSessions?.closeAll();
    else webSessions?.closeDigest(digest);
  }

  /** After the store was away (a sign-out's notice may be missed): end copies it no longer has. */
  async recheck(): Promise<void> {
    const { webSessions, sharedSignIn } = this.#deps;
    if (!webSessions || !sharedSignIn) return;
    const digests = webSessions.digests();
    const live = await sharedSignIn.liveSessions(digests);
    for (const digest of digests) if (!live.has(digest)) webSessions.closeDigest(digest);
  }
}
