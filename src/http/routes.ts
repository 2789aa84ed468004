/**
 * The HTTP API: routes, validation, authentication and error mapping, on Hono. Every failure
 * becomes a JSON error with a stable code; an unexpected one is logged with a request id and
 * answered 500 while the server keeps running. Routes only translate; sessions do the work.
 *
 * @module
 */

import { Hono } from "hono";
import type { Context } from "hono";
import type { z } from "zod";
import type { EventBus } from "../events/bus.ts";
import { SIGNALS } from "../pty/signals.ts";
import { InvalidRequestError } from "../sessions/errors.ts";
import type { SessionManager } from "../sessions/manager.ts";
import type { Supervisor } from "../sandbox/supervisor.ts";
import type { ApprovalStore } from "../approvals/store.ts";
import { bearerChecker } from "./auth.ts";
import { readJson } from "./body.ts";
import { resultText, wantsText } from "./format.ts";
import {
  DecisionBody,
  describeIssues,
  ExecBody,
  execYield,
  ResizeBody,
  SessionIdParam,
  SignalBody,
  WriteBody,
  writeYield,
} from "./schemas.ts";
import { sseResponse } from "./sse.ts";
import { toolDefinitions } from "./tools.ts";

/** What the routes need from the rest of the server. */
export interface AppDeps {
  manager: SessionManager;
  supervisor: Supervisor;
  approvals: ApprovalStore;
  bus: EventBus;
  /** Bearer token required on /v1 routes, if any. */
  token?: string;
  /** Base directory for relative workdirs. */
  workspace: string;
  /** Default shell. */
  shell: string;
  /** The body of `GET /healthz` (beyond `ok`). */
  health(): Record<string, unknown>;
}

const MAX_BODY_BYTES = 1024 * 1024;

interface Failure {
  status: 400 | 401 | 403 | 404 | 409 | 413 | 429 | 500;
  code: string;
  message: string;
}

function errorBody(f: Failure, requestId?: string) {
  return {
    error: { code: f.code, message: f.message, ...(requestId ? { request_id: requestId } : {}) },
  };
}

function asFailure(err: unknown): Failure | undefined {
  if (err instanceof Error && "status" in err && "code" in err) {
    return {
      status: err.status as Failure["status"],
      code: String(err.code),
      message: err.message,
    };
  }
  return undefined;
}

async function parseBody<T extends z.ZodType>(c: Context, schema: T): Promise<z.output<T>> {
  const raw = await readJson(c.req.raw, MAX_BODY_BYTES, "request body exceeds 1 MiB");
  const parsed = schema.safeParse(raw);
  if (!parsed.success) throw new InvalidRequestError(describeIssues(parsed.error));
  return parsed.data;
}

function sessionId(c: Context): number {
  const parsed = SessionIdParam.safeParse(c.req.param("id"));
  if (!parsed.success) throw new InvalidRequestError(`id: ${describeIssues(parsed.error)}`);
  return parsed.data;
}

/** The shell as an executable path: absolute, or found on the server's PATH. */
function findShell(shell: string): string {
  const candidates = shell.includes("/")
    ? [shell]
    : (Deno.env.get("PATH") ?? "/usr/bin:/bin").split(":").map((dir) => `${dir}/${shell}`);
  for (const path of candidates) {
    try {
      const info = Deno.statSync(path);
      if (info.isFile && ((info.mode ?? 0) & 0o111) !== 0) return path;
    } catch {
      // Not there; try the next one.
    }
  }
  throw new InvalidRequestError(`shell: cannot start ${shell}: ENOENT`);
}

function resolveWorkdir(workspace: string, workdir?: string): string {
  const path = !workdir ? workspace : workdir.startsWith("/") ? workdir : `${workspace}/${workdir}`;
  let info: Deno.FileInfo;
  try {
    info = Deno.statSync(path);
  } catch {
    throw new InvalidRequestError(`workdir: ${path} does not exist`);
  }
  if (!info.isDirectory) throw new InvalidRequestError(`workdir: ${path} is not a directory`);
  return Deno.realPathSync(path);
}

/** Build the Hono app. */
export function createApp(deps: AppDeps): Hono {
  const app = new Hono();
  const { manager, bus } = deps;

  app.onError((err, c) => {
    const known = asFailure(err);
    if (known) return c.json(errorBody(known), known.status);
    const requestId = crypto.randomUUID();
    console.error(`uexec: request ${requestId} ${c.req.method} ${c.req.path} failed:`, err);
    return c.json(
      errorBody({ status: 500, code: "internal", message: "internal error" }, requestId),
      500,
    );
  });
  app.notFound((c) =>
    c.json(
      errorBody({
        status: 404,
        code: "not_found",
        message: `No route ${c.req.method} ${c.req.path}`,
      }),
      404,
    )
  );

  app.get("/healthz", (c) => c.json({ ok: true, ...deps.health() }));

  if (deps.token) {
    const check = bearerChecker(deps.token);
    app.use("/v1/*", async (c, next) => {
      if (!check(c.req.header("authorization"))) {
        return c.json(
          errorBody({
            status: 401,
            code: "unauthorized",
            message: "missing or wrong bearer token",
          }),
          401,
        );
      }
      await next();
    });
  }
  const reply = (c: Context, result: Parameters<typeof resultText>[0]) =>
    wantsText(c.req.header("accept")) ? c.text(resultText(result)) : c.json(result);

  app.post("/v1/exec_command", async (c) => {
    const body = await parseBody(c, ExecBody);
    const result = await deps.supervisor.exec({
      request: {
        cmd: body.cmd,
        workdir: resolveWorkdir(deps.workspace, body.workdir),
        shell: findShell(body.shell ?? deps.shell),
        login: body.login,
        tty: body.tty,
        size: { cols: body.cols, rows: body.rows },
        env: body.env,
        yieldMs: execYield(body.yield_time_ms),
        maxOutputTokens: body.max_output_tokens,
        until: body.until,
        timeoutMs: body.timeout_ms,
      },
      profile: body.profile,
      sandboxPermissions: body.sandbox_permissions,
      justification: body.justification,
    });
    return reply(c, result);
  });

  app.post("/v1/write_stdin", async (c) => {
    const body = await parseBody(c, WriteBody);
    return reply(
      c,
      await manager.write({
        sessionId: body.session_id,
        chars: body.chars,
        yieldMs: writeYield(body.chars, body.yield_time_ms),
        maxOutputTokens: body.max_output_tokens,
        until: body.until,
      }),
    );
  });

  app.get("/v1/sessions", (c) => c.json({ sessions: manager.list() }));
  app.get("/v1/sessions/:id", (c) => c.json(manager.get(sessionId(c)).info()));
  app.delete("/v1/sessions/:id", async (c) => c.json(await manager.kill(sessionId(c))));

  app.post("/v1/sessions/:id/resize", async (c) => {
    const id = sessionId(c);
    const body = await parseBody(c, ResizeBody);
    manager.resize(id, body);
    return c.json({ ok: true });
  });

  app.post("/v1/sessions/:id/signal", async (c) => {
    const id = sessionId(c);
    const body = await parseBody(c, SignalBody);
    const sig = SIGNALS[body.signal];
    if (sig === undefined) {
      throw new InvalidRequestError(
        `signal: unknown signal ${JSON.stringify(body.signal)}; use one of ${
          Object.keys(SIGNALS).join(", ")
        }`,
      );
    }
    manager.signal(id, sig);
    return c.json({ ok: true });
  });

  app.get("/v1/sessions/:id/stream", (c) => {
    const session = manager.get(sessionId(c));
    const base64 = c.req.query("encoding") === "base64";
    return sseResponse((send, close) => {
      const decoder = new TextDecoder();
      const unlisten = session.listen({
        output: (bytes) =>
          send(
            "output",
            base64
              ? { base64: encodeBase64(bytes) }
              : { text: decoder.decode(bytes, { stream: true }) },
          ),
      });
      session.closed.then((status) => {
        send("exit", { exit_code: status.code });
        close();
      });
      return unlisten;
    });
  });

  app.get("/v1/events", () =>
    sseResponse((send) =>
      bus.subscribe((event) => {
        const { type, ...data } = event;
        send(type, data);
      })
    ));

  app.get("/v1/tools", (c) => c.json({ tools: toolDefinitions() }));

  app.get("/v1/approvals", (c) => c.json({ approvals: deps.approvals.list() }));
  app.post("/v1/approvals/:id", async (c) => {
    const body = await parseBody(c, DecisionBody);
    return c.json(deps.approvals.decide(c.req.param("id"), body.decision));
  });

  return app;
}

function encodeBase64(bytes: Uint8Array): string {
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}
