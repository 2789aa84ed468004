/**
 * The egress gateway: one proxy listener inside each egress domain's network namespace (at
 * `127.0.0.1:3128` there, the namespace's only way out), the sessions each connection is
 * attributed to, and the audit of every connection. The listeners, the attribution and the
 * relays run on a thread of their own (gateway_worker.ts, started with the first egress domain);
 * this is the main thread's handle on it: it tells the worker which uid is which session's and
 * which listeners to open, and takes each connection's record from it for the audit and for the
 * session's refusals.
 *
 * A connection is attributed by the kernel, not by anything the client says: every session runs
 * as a uid of its own, and the namespace's socket diagnostics (sandbox/identity/tcp_peers.ts)
 * name the uid that owns the client's socket. Connections per session are capped (a session past
 * the cap is refused without delaying others), and an idle connection is closed.
 *
 * It must never let a domain run without its listener (an open that fails fails the domain:
 * fail closed), never let a session's command start before the worker knows its uid, never
 * report a session's refusals before the records the worker made ahead of the ask
 * ({@link EgressGateway.settle}), and never drop a record it was sent.
 *
 * @module
 */

import type { Cidr, EgressRules } from "./rules.ts";
import {
  type EgressEvent,
  type EgressSession,
  type FromWorker,
  PROXY_PORT,
  type ToWorker,
} from "./gateway_protocol.ts";
import { closeAll } from "../ffi/libc.ts";
import { startWorker } from "../io/descriptor_reserve.ts";
import { SandboxUnavailableError } from "../sandbox/errors.ts";

export { type EgressEvent, type EgressSession, PROXY_PORT };

/** The environment that points a session's tools at the proxy. */
export function proxyEnv(): Record<string, string> {
  const url = `http://127.0.0.1:${PROXY_PORT}`;
  return {
    HTTP_PROXY: url,
    HTTPS_PROXY: url,
    ALL_PROXY: url,
    http_proxy: url,
    https_proxy: url,
    all_proxy: url,
    NO_PROXY: "localhost,127.0.0.1",
    no_proxy: "localhost,127.0.0.1",
  };
}

/** Settings of the gateway. */
export interface GatewayOptions {
  /** `UEXEC_EGRESS_HOSTS`: a file in /etc/hosts form consulted before DNS. */
  hostsFile?: string;
  /** `UEXEC_EGRESS_ALLOW_PRIVATE`: ranges the proxy may dial although private. */
  allowPrivate: Cidr[];
  /** Live connections one session may hold (default 64). */
  maxPerSession?: number;
  /** Close a connection after this long without traffic (default 60 s). */
  idleMs?: number;
  /** Told of every connection once it ended (a refused one: once judged). */
  onConnection?: (event: EgressEvent) => void;
}

/** A live listener in one namespace. */
export interface EgressListener {
  close(): void;
}

/** Refusals kept per session for its result's denial (the first few only). */
const MAX_REFUSALS = 16;
/** Sessions whose refusals are kept until their result takes them. */
const MAX_REFUSING_SESSIONS = 1024;

/**
 * A failure of the egress proxy, as the command that needed it is refused: `sandbox_unavailable`
 * (its network cannot be what its profile says).
 */
function unavailable(why: string): SandboxUnavailableError {
  return new SandboxUnavailableError(`the egress proxy: ${why}`);
}

/** Proxies, session attribution and audit for every egress domain. */
export class EgressGateway {
  #opts: GatewayOptions;
  #worker?: Worker;
  /** Why the worker stopped, once it did: nothing opens after that. */
  #dead?: string;
  #seq = 0;
  /** Opens, registrations and settles waiting for the worker's answer, by their number. */
  #waiting = new Map<number, (error?: string) => void>();
  #refusals = new Map<number, EgressEvent[]>();

  constructor(opts: GatewayOptions) {
    this.#opts = opts;
  }

  /**
   * Connections from `uid` belong to `session` from when this resolves (the worker has it) until
   * the function it gives is called. Rejects when the worker cannot be had or stopped (the
   * session could not reach its proxy either): out of descriptors (an EMFILE `OsError`), or
   * `sandbox_unavailable`.
   */
  async register(uid: number, session: EgressSession): Promise<() => void> {
    const { answer } = this.#ask(
      this.#started(),
      (seq) => ({ type: "register", seq, uid, session }),
    );
    const error = await answer;
    if (error !== undefined) throw unavailable(error);
    return () => this.#post({ type: "unregister", uid, sessionId: session.sessionId });
  }

  /**
   * The connections refused to `sessionId` so far, oldest first; taken, not kept. Those refused
   * before a {@link settle} that has resolved are all here.
   */
  takeRefusals(sessionId: number): EgressEvent[] {
    const found = this.#refusals.get(sessionId) ?? [];
    this.#refusals.delete(sessionId);
    return found;
  }

  /**
   * Resolves once every record the worker made before this call has been taken here (and told
   * to `onConnection`): ask it after a session's exit, before its refusals.
   */
  async settle(): Promise<void> {
    if (this.#worker && !this.#dead) {
      await this.#ask(this.#worker, (seq) => ({ type: "settle", seq })).answer;
    }
  }

  /**
   * Opens the proxy listener inside the namespace `nsFd` (which the gateway takes over and
   * closes), judging by `rules`; rejects when it cannot be opened (`sandbox_unavailable`, or
   * out of descriptors).
   */
  async open(nsFd: number, rules: EgressRules): Promise<EgressListener> {
    let worker: Worker;
    try {
      worker = this.#started();
    } catch (err) {
      closeAll([nsFd]);
      throw err;
    }
    const { seq, answer } = this.#ask(worker, (seq) => ({ type: "open", seq, nsFd, rules }));
    const error = await answer;
    if (error !== undefined) throw unavailable(`cannot open its listener: ${error}`);
    let closed = false;
    return {
      close: () => {
        if (closed) return;
        closed = true;
        this.#post({ type: "close", seq });
      },
    };
  }

  /** Stops every listener and the worker (server shutdown). */
  close(): void {
    this.#worker?.terminate();
    this.#stopped("the egress gateway is closed");
  }

  /**
   * Sends `worker` the message `make` builds with a new number `seq`; `answer` resolves with the
   * error of the worker's answer to it (undefined: done), or with why the worker stopped.
   */
  #ask(
    worker: Worker,
    make: (seq: number) => ToWorker,
  ): { seq: number; answer: Promise<string | undefined> } {
    const seq = ++this.#seq;
    const answer = new Promise<string | undefined>((resolve) => this.#waiting.set(seq, resolve));
    worker.postMessage(make(seq));
    return { seq, answer };
  }

  /** The worker, started with the settings at the first use; throws once it stopped. */
  #started(): Worker {
    if (this.#dead) throw unavailable(this.#dead);
    if (this.#worker) return this.#worker;
    const worker = startWorker(new URL("./gateway_worker.ts", import.meta.url));
    worker.onmessage = (e: MessageEvent<FromWorker>) => this.#received(e.data);
    worker.onerror = (e) => {
      e.preventDefault();
      console.error(`uexec: egress proxy thread failed: ${e.message}`);
      this.#stopped(`the egress proxy thread failed: ${e.message}`);
      worker.terminate();
    };
    const o = this.#opts;
    worker.postMessage(
      {
        type: "init",
        settings: {
          hostsFile: o.hostsFile,
          allowPrivate: o.allowPrivate,
          maxPerSession: o.maxPerSession ?? 64,
          idleMs: o.idleMs ?? 60_000,
        },
      } satisfies ToWorker,
    );
    return this.#worker = worker;
  }

  /** No more answers will come: whatever waits is answered now (opens fail, settles resolve). */
  #stopped(why: string): void {
    this.#dead ??= why;
    for (const answer of this.#waiting.values()) answer(why);
    this.#waiting.clear();
  }

  #post(message: ToWorker): void {
    if (!this.#dead) this.#worker?.postMessage(message);
  }

  #received(m: FromWorker): void {
    if (m.type === "connection") return this.#recorded(m.event);
    const answer = this.#waiting.get(m.seq);
    this.#waiting.delete(m.seq);
    answer?.(m.error);
  }

  #recorded(event: EgressEvent): void {
    if (event.decision === "denied" && event.session_id !== undefined) {
      const id = event.session_id;
      const list = this.#refusals.get(id) ?? [];
      if (list.length < MAX_REFUSALS) list.push(event);
      this.#refusals.delete(id);
      this.#refusals.set(id, list);
      // Results never read (a session killed) leave theirs: the oldest go past the cap.
      for (const key of this.#refusals.keys()) {
        if (this.#refusals.size <= MAX_REFUSING_SESSIONS) break;
        this.#refusals.delete(key);
      }
    }
    this.#opts.onConnection?.(event);
  }
}
