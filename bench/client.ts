/**
 * Client for uexec's routes over a keep-alive HTTP transport: every request is bounded by the
 * workload's abort signal (its time limit); non-2xx answers become HttpError. Requests carry no
 * timer of their own: a timer per request (with its dependent signal) cost the client more CPU
 * than the rest of a round trip, on the cores it shares with the server under test.
 * @module
 */

import type { CallResult } from "../src/sessions/calls.ts";
import { rawTransport, type Transport, type TransportFactory } from "./http1.ts";

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
  env?: Record<string, string>;
  output_mode?: "raw" | "plain" | "screen";
  screen?: boolean;
  until_idle_ms?: number;
  until_input?: boolean;
}

/** Body of `POST /v1/write_stdin`. */
export interface WriteRequest {
  session_id: number;
  chars: string;
  yield_time_ms?: number;
  until?: string;
  max_output_tokens?: number;
  output_mode?: "raw" | "plain" | "screen";
  until_idle_ms?: number;
  until_input?: boolean;
}

/** The 200 answer of both routes (the server's own result type). */
export type ExecResponse = CallResult;

/** A non-2xx answer. */
export class HttpError extends Error {
  constructor(readonly status: number, readonly body: string, route: string) {
    super(`${route} answered ${status}: ${body.slice(0, 300)}`);
  }
}

/** A client bound to one server and one workload's abort signal. */
export class UexecClient {
  #send: Transport;

  constructor(
    readonly base: string,
    token: string,
    readonly signal: AbortSignal,
    transport: TransportFactory = rawTransport,
  ) {
    this.#send = transport(base, token);
  }

  async #call(method: string, path: string, body?: unknown): Promise<unknown> {
    const res = await this.#send(
      method,
      path,
      body === undefined ? undefined : JSON.stringify(body),
      this.signal,
    );
    if (res.status < 200 || res.status > 299) {
      throw new HttpError(res.status, res.text, `${method} ${path}`);
    }
    return JSON.parse(res.text);
  }

  /** `POST /v1/exec_command`. */
  exec(req: ExecRequest): Promise<ExecResponse> {
    return this.#call("POST", "/v1/exec_command", req) as Promise<ExecResponse>;
  }

  /** `POST /v1/write_stdin`. */
  write(req: WriteRequest): Promise<ExecResponse> {
    return this.#call("POST", "/v1/write_stdin", req) as Promise<ExecResponse>;
  }

  /** `DELETE /v1/sessions/{id}`; a session that is already gone (404) is fine. */
  async kill(sessionId: number): Promise<void> {
    try {
      await this.#call("DELETE", `/v1/sessions/${sessionId}`);
    } catch (e) {
      if (!(e instanceof HttpError && e.status === 404)) throw e;
    }
  }

  /** `GET /v1/sessions/{id}/screen`. */
  screen(sessionId: number): Promise<unknown> {
    return this.#call("GET", `/v1/sessions/${sessionId}/screen`);
  }

  /** `GET /healthz`. */
  healthz(): Promise<unknown> {
    return this.#call("GET", "/healthz");
  }
}
