/**
 * The HTTP API: routes, body validation, authentication and error mapping, on Hono. Every
 * failure becomes a JSON error with a stable code; an unexpected one is logged with a request
 * id and answered 500 while the server keeps running. Routes only translate: every route but
 * `/healthz` and the API's description (docs/routes.ts) authenticates the caller first and
 * hands the principal to the application core, which decides what it may do. A route must
 * never act without a principal.
 *
 * @module
 */

import { Hono } from "hono";
import type { Context } from "hono";
import type { z } from "zod";
import { outOfDescriptors } from "../ffi/libc.ts";
import { ApiError, type ErrorCode, ERRORS, InvalidRequestError } from "../errors.ts";
import type { Principal } from "../service/principal.ts";
import {
  AgentBody,
  DecisionBody,
  describeIssues,
  ExecBody,
  parseInput,
  ResizeBody,
  SessionIdParam,
  SignalBody,
  WriteBody,
} from "../service/schemas.ts";
import { resultText } from "../service/results.ts";
import type { Service } from "../service/service.ts";
import { toolDefinitions } from "../service/tools.ts";
import { bearerToken, SandboxedPeerError, UnauthorizedError } from "./auth.ts";
import { readJson } from "./body.ts";
import { mcpRoutes } from "./mcp_routes.ts";
import { dashboardRoutes } from "./dashboard/routes.ts";
import { docsRoutes } from "./docs/routes.ts";
import { wantsText } from "./format.ts";
import { connectionOf } from "./connection_relay.ts";
import { registerOutputRoutes } from "./output_routes.ts";
import { screenRoutes } from "./screen_routes.ts";
import { sseResponse } from "./sse.ts";
import { registerHistoryRoutes } from "./history_routes.ts";
import { wsRoutes } from "./ws_routes.ts";
import type { RemoteSessions } from "../ws/connection.ts";
import { noteCaller, requestIdOf, requestLog } from "./request_log.ts";
import type { Logger } from "../log.ts";

/** What the routes need from the rest of the server. */
export interface AppDeps {
  service: Service;
  /** The body of `GET /healthz` (beyond `ok`). */
  health(): Record<string, unknown> | Promise<Record<string, unknown>>;
  /**
   * True when the request's TCP peer is a sandboxed process; `info` is what `Deno.serve` gave
   * the handler (absent on unix sockets and in-process calls).
   */
  fromSandbox?(info: Deno.ServeHandlerInfo | undefined): boolean;
  /** Where request lines are logged (none when absent). */
  log?: Logger;
  /** Serve the web dashboard at `/` (`UEXEC_DASHBOARD`). */
  dashboard?: boolean;
  /** A fleet node's way to other nodes' sessions, for the WebSocket (src/http/forward.ts). */
  remoteSessions?: RemoteSessions;
}

const MAX_BODY_BYTES = 1024 * 1024;

interface Failure {
  code: ErrorCode;
  message: string;
}

function errorBody(f: Failure, requestId?: string) {
  return {
    error: { code: f.code, message: f.message, ...(requestId ? { request_id: requestId } : {}) },
  };
}

/** A request's JSON body, within the 1 MiB every front door of this app allows. */
function readBody(req: Request): Promise<unknown> {
  return readJson(req, MAX_BODY_BYTES, "request body exceeds 1 MiB");
}

async function parseBody<T extends z.ZodType>(c: Context, schema: T): Promise<z.output<T>> {
  return parseInput(schema, await readBody(c.req.raw));
}

/**
 * A signal that aborts when the client went away before its response was sent. Run the server
 * with `--unstable-no-legacy-abort`: without it Deno also aborts it after every successful
 * response (harmless here, as every listener is gone by then, but Deno warns once).
 */
function callerGone(c: Context): AbortSignal {
  return c.req.raw.signal;
}

function sessionId(c: Context): number {
  const parsed = SessionIdParam.safeParse(c.req.param("id"));
  if (!parsed.success) throw new InvalidRequestError(`id: ${describeIssues(parsed.error)}`);
  return parsed.data;
}

/** Build the Hono app. */
export function createApp(deps: AppDeps): Hono<{ Bindings: Deno.ServeHandlerInfo | undefined }> {
  const app = new Hono<{ Bindings: Deno.ServeHandlerInfo | undefined }>();
  const { service } = deps;
  if (deps.log) app.use(requestLog(deps.log));

  app.onError((err, c) => {
    if (err instanceof ApiError) return c.json(errorBody(err), err.status);
    if (outOfDescriptors(err)) {
      // Logged as one string: formatting the error's stack may itself need a descriptor.
      console.error(`uexec: ${c.req.method} ${c.req.path}: out of descriptors: ${err.message}`);
      const message = "the server is out of file descriptors; try again once sessions have ended";
      return c.json(errorBody({ code: "out_of_resources", message }), ERRORS.out_of_resources[0]);
    }
    // The id the request is logged under, so the answer, its header and the log line agree.
    const requestId = requestIdOf(c.req.raw) ?? crypto.randomUUID();
    console.error(`uexec: request ${requestId} ${c.req.method} ${c.req.path} failed:`, err);
    return c.json(
      errorBody({ code: "internal", message: "internal error" }, requestId),
      ERRORS.internal[0],
    );
  });
  app.notFound((c) =>
    c.json(
      errorBody({ code: "not_found", message: `No route ${c.req.method} ${c.req.path}` }),
      ERRORS.not_found[0],
    )
  );

  // A liveness probe needs no more than `ok`: what else the server says (the sandbox's reach, its
  // uids and cgroups, the WebSocket port) is for an authenticated caller that is not a sandboxed
  // command; to anyone else it would be a map of the walls.
  app.get("/healthz", async (c) => {
    const principal = authenticate(service, c.req.raw, connectionOf(c.env));
    if (!principal || deps.fromSandbox?.(c.env)) return c.json({ ok: true });
    return c.json({ ok: true, ...await deps.health() });
  });

  /** The caller, authenticated; every route but /healthz starts here. */
  const who = (c: Context): Principal => {
    const principal = authenticate(service, c.req.raw, connectionOf(c.env));
    if (!principal) throw new UnauthorizedError();
    if (deps.fromSandbox?.(c.env)) throw new SandboxedPeerError();
    noteCaller(c.req.raw, principal);
    return principal;
  };
  const reply = (c: Context, result: Parameters<typeof resultText>[0]) =>
    wantsText(c.req.header("accept")) ? c.text(resultText(result)) : c.json(result);

  app.post("/v1/exec_command", async (c) => {
    const principal = who(c);
    const body = await parseBody(c, ExecBody);
    return reply(
      c,
      await service.exec(principal, body, {
        signal: callerGone(c),
        idempotencyKey: c.req.header("idempotency-key"),
      }),
    );
  });

  app.post("/v1/write_stdin", async (c) => {
    const principal = who(c);
    const body = await parseBody(c, WriteBody);
    return reply(c, await service.write(principal, body, { signal: callerGone(c) }));
  });

  app.get("/v1/sessions", (c) => c.json({ sessions: service.sessions(who(c)) }));
  app.get("/v1/usage", (c) => c.json({ usage: service.sessionUsage(who(c)) }));
  app.get("/v1/sessions/:id", (c) => c.json(service.session(who(c), sessionId(c)).info()));
  app.delete("/v1/sessions/:id", async (c) => c.json(await service.kill(who(c), sessionId(c))));

  app.post("/v1/sessions/:id/resize", async (c) => {
    const principal = who(c);
    const id = sessionId(c);
    service.resize(principal, id, await parseBody(c, ResizeBody));
    return c.json({ ok: true });
  });

  app.post("/v1/sessions/:id/signal", async (c) => {
    const principal = who(c);
    const id = sessionId(c);
    service.signal(principal, id, (await parseBody(c, SignalBody)).signal);
    return c.json({ ok: true });
  });

  registerOutputRoutes(app, service, who);

  app.get("/v1/events", (c) => {
    const principal = who(c);
    return sseResponse((send, close) =>
      service.subscribe(principal, (event) => {
        const { type, ...data } = event;
        send(type, data);
      }, close)
    );
  });

  app.get("/v1/tools", (c) => {
    who(c);
    return c.json({ tools: toolDefinitions() });
  });

  screenRoutes(app, who, sessionId, service);

  app.get("/v1/approvals", (c) => c.json({ approvals: service.approvals(who(c)) }));
  app.post("/v1/approvals/:id", async (c) => {
    const principal = who(c);
    return c.json(service.decide(principal, c.req.param("id"), await parseBody(c, DecisionBody)));
  });

  app.get("/v1/agents", (c) => c.json({ agents: service.agents(who(c)) }));
  app.post("/v1/agents", async (c) => {
    const principal = who(c);
    return c.json(await service.createAgent(principal, await parseBody(c, AgentBody)), 201);
  });
  app.delete("/v1/agents/:name", async (c) => {
    const principal = who(c);
    return c.json(await service.revokeAgent(principal, c.req.param("name")));
  });

  mcpRoutes(app, service, who, readBody);
  registerHistoryRoutes(app, service, who);
  docsRoutes(app);
  wsRoutes(app, service, who, deps.remoteSessions);

  if (deps.dashboard) dashboardRoutes(app, deps, who);
  return app;
}

/**
 * The principal of a request: its `Authorization: Bearer` credential, an agent's or the
 * operator's token or else a dashboard browser session's id. Nothing else authenticates: no
 * cookie, so nothing a browser attaches by itself to a request of another page counts.
 */
function authenticate(
  service: Service,
  req: Request,
  connection: object | undefined,
): Principal | undefined {
  const vouched = service.vouchedFor(req);
  if (vouched) return vouched;
  const token = bearerToken(req.headers.get("authorization"));
  if (token === undefined) return undefined;
  return service.authenticate(token, connection) ?? service.dashboard.authenticate(token);
}
