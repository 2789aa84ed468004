/**
 * Client for uexec's routes over a keep-alive HTTP transport: every request is bounded by a
 * time-out and by the workload's abort signal; non-2xx answers become HttpError.
 * @module
 */

import type { CallResult } from "../src/sessions/manager.ts";
import { rawTransport, type Transport } from "./http1.ts";

/** Body of `POST /v1/exec_command` (the fields the bench uses). */
export interface ExecRequest {
  cmd: string;
  shell?: string;
  login?: boolean;
  tty?: boolean;
  yield_time_ms?: number;
  until?: string;
  max_output_tokens?: number;
  profile?: string;
}

/** Body of `POST /v1/write_stdin`. */
export interface WriteRequest {
  session_id: number;
  chars: string;
  yield_time_ms?: number;
  until?: string;
  max_output_tokens?: number;
}

/** The 200 answer of both routes (the server's own result type). */
export type ExecResponse = CallResult;

/** A non-2xx answer. */
export class HttpError extends Error {
  constructor(readonly status: number, readonly body: string, route: string) {
    super(`${route} answered ${status}: ${body.slice(0, 300)}`);
  }
}

/** Slack on top of a request's own yield time before the bench gives up on it. */
const REQUEST_SLACK_MS = 30_000;

/** A client bound to one server and one workload's abort signal. */
export class UexecClient {
  #send: Transport;

  constructor(
    readonly base: string,
    readonly signal: AbortSignal,
    transport: (base: string) => Transport = rawTransport,
  ) {
    this.#send = transport(base);
  }

  async #call(method: string, path: string, body: unknown, timeoutMs: number): Promise<unknown> {
    const res = await this.#send(
      method,
      path,
      body === undefined ? undefined : JSON.stringify(body),
      AbortSignal.any([this.signal, AbortSignal.timeout(timeoutMs)]),
    );
    if (res.status < 200 || res.status > 299) {
      throw new HttpError(res.status, res.text, `${method} ${path}`);
    }
    return JSON.parse(res.text);
  }

  /** `POST /v1/exec_command`. */
  exec(req: ExecRequest): Promise<ExecResponse> {
    const timeout = (req.yield_time_ms ?? 10_000) + REQUEST_SLACK_MS;
    return this.#call("POST", "/v1/exec_command", req, timeout) as Promise<ExecResponse>;
  }

  /** `POST /v1/write_stdin`. */
  write(req: WriteRequest): Promise<ExecResponse> {
    const timeout = (req.yield_time_ms ?? 5_000) + REQUEST_SLACK_MS;
    return this.#call("POST", "/v1/write_stdin", req, timeout) as Promise<ExecResponse>;
  }

  /** `DELETE /v1/sessions/{id}`; a session that is already gone (404) is fine. */
  async kill(sessionId: number): Promise<void> {
    try {
      await this.#call("DELETE", `/v1/sessions/${sessionId}`, undefined, REQUEST_SLACK_MS);
    } catch (e) {
      if (!(e instanceof HttpError && e.status === 404)) throw e;
    }
  }

  /** `GET /healthz`. */
  healthz(): Promise<unknown> {
    return this.#call("GET", "/healthz", undefined, REQUEST_SLACK_MS);
  }
}
