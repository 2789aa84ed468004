/**
 * The fleet's front door in front of the HTTP app (`UEXEC_STORE` set): a call for a session
 * another node owns (`DELETE`/`GET /v1/sessions/{id}...`, its output stream, `write_stdin`) is
 * forwarded to that node, authenticated with this node's own credential and the caller's
 * identity in `X-Uexec-Agent` (never the caller's token); `GET /v1/sessions` lists the fleet's
 * live sessions; a session whose node is lost answers 410 `node_lost`.
 *
 * `X-Uexec-Agent` is believed only from a live node's credential: an agent or operator token
 * sending it is refused (403 `forbidden_node_header`), so nobody can act as another agent by
 * naming it. The owning node still checks that this agent owns the session. It must never
 * answer with, log or forward a caller's token or a node credential.
 *
 * @module
 */

import { OPERATOR, OPERATOR_OWNER, type Principal } from "../service/principal.ts";
import type { Service } from "../service/service.ts";
import type { FleetMember } from "../fleet/fleet.ts";
import { type FleetNode, NodeLostError, NodeUnreachableError } from "../fleet/nodes.ts";
import { bearerToken, UnauthorizedError } from "./auth.ts";
import { ApiError, RelayedError } from "../errors.ts";
import { connectionOf } from "./connection_relay.ts";
import type { RemoteSessions } from "../ws/connection.ts";
import { type Outbox, QUEUE_BOUND } from "../ws/subscription.ts";
import { notificationFrame } from "../ws/json_rpc.ts";
import { readJson } from "./body.ts";
import { DecisionBody, parseInput } from "../service/schemas.ts";

/** The header a node names the caller in when it forwards a call. */
export const AGENT_HEADER = "x-uexec-agent";

/** The largest body read here, as the app reads (1 MiB). */
const MAX_BODY = 1024 * 1024;

type Handler = (req: Request, info?: Deno.ServeHandlerInfo) => Response | Promise<Response>;

/** `X-Uexec-Agent` with a credential that is no live node's (403 `forbidden_node_header`). */
export class ForgedNodeHeaderError extends ApiError {
  readonly code = "forbidden_node_header";
  constructor() {
    super(`${AGENT_HEADER} may be sent by a fleet node only`);
  }
}

/** The JSON error answer of `err`, as the app gives its own. */
function failure(err: ApiError): Response {
  return Response.json({ error: { code: err.code, message: err.message } }, {
    status: err.status,
  });
}

/**
 * `next` behind the fleet's forwarding; a request `fromSandbox` says came from a sandboxed
 * command goes straight to `next`, which refuses it.
 */
export function fleetFront(
  service: Service,
  fleet: FleetMember,
  next: Handler,
  fromSandbox: (info: Deno.ServeHandlerInfo | undefined) => boolean,
): Handler {
  return async (req, info) => {
    if (fromSandbox(info)) return next(req, info);
    const token = bearerToken(req.headers.get("authorization"));
    const named = req.headers.get(AGENT_HEADER);
    if (named !== null) {
      const peer = token === undefined ? undefined : await fleet.peerOf(token);
      if (peer === undefined) {
        return failure(new ForgedNodeHeaderError());
      }
      let principal = named === OPERATOR_OWNER ? OPERATOR : service.registeredAgent(named);
      if (principal === undefined) {
        // Minted a moment ago on the forwarding node: its NOTIFY may not have landed here yet.
        await fleet.reloadAgents();
        principal = service.registeredAgent(named);
      }
      if (principal === undefined) return failure(new UnauthorizedError());
      service.vouch(req, principal);
      return next(req, info);
    }
    if (token === undefined) return next(req, info);
    const connection = connectionOf(info);
    let principal = service.authenticate(token, connection) ??
      service.dashboard.authenticate(token);
    if (principal === undefined) {
      // Minted a moment ago on another node? Its NOTIFY may not have landed yet. Or a dashboard
      // browser session opened on another node (kept in the store).
      await Promise.all([fleet.reloadAgents(), service.dashboard.load(token)]);
      principal = service.authenticate(token, connection) ?? service.dashboard.authenticate(token);
      if (principal === undefined) return next(req, info);
    }
    const url = new URL(req.url);
    if (req.method === "GET" && url.pathname === "/v1/sessions") {
      return listFleet(req, info, principal, fleet, next);
    }
    if (req.method === "GET" && url.pathname === "/v1/events") {
      return fleetEvents(req, info, principal, fleet, next);
    }
    if (req.method === "GET" && url.pathname === "/v1/approvals") {
      const agent = principal.role === "operator" ? undefined : principal.name;
      // Checked by the app as ever (a revoked agent, a sandboxed peer), then the fleet's list.
      const own = await next(req, info);
      if (own.status !== 200) return own;
      await own.body?.cancel();
      return Response.json({ approvals: await fleet.approvals.pending(agent) });
    }
    const decided = /^\/v1\/approvals\/([^/]+)$/.exec(url.pathname);
    if (req.method === "POST" && decided && principal.role === "operator") {
      let id: string;
      try {
        id = decodeURIComponent(decided[1]);
      } catch {
        return next(req, info); // Not an id any approval has: the app answers.
      }
      const place = await fleet.approvals.place(id);
      if (place === undefined || place.node === fleet.node) return next(req, info);
      const node = await fleet.peer(place.node);
      if (node === undefined) return next(req, info);
      if (node.lostAt !== null) return failure(new NodeLostError(node.id, node.lostAt));
      try {
        const body = parseInput(DecisionBody, await readJson(req, MAX_BODY, "body exceeds 1 MiB"));
        return Response.json(
          await fleet.approvals.decideOn(node.id, id, body.decision, body.unsandboxed),
        );
      } catch (err) {
        if (err instanceof ApiError) return failure(err);
        throw err;
      }
    }
    const id = await sessionOf(req, url);
    if (id === undefined) return next(req, info);
    const owner = await fleet.ownerOf(id.id);
    const forwardable = id.req;
    if (owner === undefined) return next(forwardable, info);
    if (owner.lostAt !== null) {
      return failure(new NodeLostError(owner.id, owner.lostAt));
    }
    return forward(forwardable, url, owner, principal, fleet);
  };
}

/**
 * The session a call is for, with the request to pass on (its body read, when it was a
 * `write_stdin`); undefined for a call about no one session.
 */
async function sessionOf(
  req: Request,
  url: URL,
): Promise<{ id: number; req: Request } | undefined> {
  const path = /^\/v1\/sessions\/(\d{1,10})(\/|$)/.exec(url.pathname);
  if (path) return { id: Number(path[1]), req };
  if (req.method !== "POST" || url.pathname !== "/v1/write_stdin") return undefined;
  const body = await req.arrayBuffer();
  const again = new Request(req, { body });
  let id: unknown;
  try {
    id = JSON.parse(new TextDecoder().decode(body))?.session_id;
  } catch {
    return { id: -1, req: again };
  }
  return Number.isSafeInteger(id) ? { id: id as number, req: again } : { id: -1, req: again };
}

/** Pass `req` to `node` as this node, for `principal`; the answer streams back as it comes. */
async function forward(
  req: Request,
  url: URL,
  node: FleetNode,
  principal: Principal,
  fleet: FleetMember,
): Promise<Response> {
  const headers = new Headers();
  for (const name of ["content-type", "accept", "idempotency-key", "last-event-id"]) {
    const value = req.headers.get(name);
    if (value !== null) headers.set(name, value);
  }
  headers.set("authorization", `Bearer ${fleet.credential}`);
  headers.set(AGENT_HEADER, principal.role === "operator" ? OPERATOR_OWNER : principal.name);
  let answer: Response;
  try {
    answer = await fetch(`${node.url}${url.pathname}${url.search}`, {
      method: req.method,
      headers,
      body: req.body,
      signal: req.signal,
    });
  } catch (err) {
    // Found lost meanwhile by another node (its notice may not have reached this one yet)?
    const now = await fleet.peer(node.id, true).catch(() => undefined);
    if (now?.lostAt) return failure(new NodeLostError(now.id, now.lostAt));
    return failure(new NodeUnreachableError(node.id, (err as Error).message));
  }
  const out = new Headers();
  for (const name of ["content-type", "cache-control", "x-request-id"]) {
    const value = answer.headers.get(name);
    if (value !== null) out.set(name, value);
  }
  return new Response(answer.body, { status: answer.status, headers: out });
}

/** `GET /v1/sessions` across the fleet: this node's and every live peer's, as the caller may see. */
async function listFleet(
  req: Request,
  info: Deno.ServeHandlerInfo | undefined,
  principal: Principal,
  fleet: FleetMember,
  next: Handler,
): Promise<Response> {
  const own = await next(req, info);
  if (own.status !== 200) return own;
  const { sessions } = await own.json() as { sessions: unknown[] };
  const url = new URL(req.url);
  const peers = await Promise.all(
    fleet.livePeers().map(async (node) => {
      try {
        const res = await forward(
          new Request(req.url, { headers: req.headers }),
          url,
          node,
          principal,
          fleet,
        );
        if (res.status !== 200) {
          await res.body?.cancel();
          return [];
        }
        return ((await res.json()) as { sessions: unknown[] }).sessions;
      } catch {
        return []; // A peer that cannot answer now: its lease tells whether it is lost.
      }
    }),
  );
  return Response.json({ sessions: [...sessions, ...peers.flat()] });
}

/**
 * `GET /v1/events` across the fleet: this node's stream, with the events of every live peer's
 * stream for the same caller merged in whole (each carries its `node`). It ends when this node's
 * stream does (the caller's credential ended); a peer's stream that ends is dropped.
 */
async function fleetEvents(
  req: Request,
  info: Deno.ServeHandlerInfo | undefined,
  principal: Principal,
  fleet: FleetMember,
  next: Handler,
): Promise<Response> {
  const own = await next(req, info);
  if (own.status !== 200 || !own.body) return own;
  const url = new URL(req.url);
  const gone = new AbortController();
  const ownEvents = own.body;
  const encoder = new TextEncoder();
  let done = false;
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      const end = () => {
        if (done) return;
        done = true;
        gone.abort();
        controller.close();
      };
      const relayEvents = async (stream: ReadableStream<Uint8Array>, comments: boolean) => {
        for await (const event of eventsOf(stream, gone.signal)) {
          if (done) break;
          // A peer's own comments (connected, keepalive) are this stream's business, not theirs.
          if (comments || !event.startsWith(":")) {
            controller.enqueue(encoder.encode(`${event}\n\n`));
          }
        }
      };
      relayEvents(ownEvents, true).catch(() => {}).finally(end);
      for (const node of fleet.livePeers()) {
        const peerReq = new Request(req.url, { headers: req.headers, signal: gone.signal });
        forward(peerReq, url, node, principal, fleet)
          .then((res) => res.status === 200 && res.body ? relayEvents(res.body, false) : undefined)
          .catch(() => {}); // A peer that cannot stream now: its lease tells whether it is lost.
      }
    },
    cancel() {
      // The caller went away: this node's stream (its subscription) and the peers' end.
      done = true;
      gone.abort();
    },
  });
  return new Response(body, { headers: own.headers });
}

/** The whole events (blocks ending in a blank line) of an SSE stream, without that line. */
async function* eventsOf(
  body: ReadableStream<Uint8Array>,
  signal: AbortSignal,
): AsyncGenerator<string> {
  let rest = "";
  for await (const text of body.pipeThrough(new TextDecoderStream(), { signal })) {
    const events = (rest + text).split("\n\n");
    rest = events.pop()!;
    yield* events;
  }
}

/** The WebSocket's way to other nodes' sessions (see src/ws/connection.ts). */
export function remoteSessions(fleet: FleetMember): RemoteSessions {
  /** The live node owning session `id`; 410 for a lost one. */
  const ownerOf = async (id: number) => {
    const node = await fleet.ownerOf(id);
    if (node === undefined) throw new Error(`session ${id} is this node's`);
    if (node.lostAt !== null) throw new NodeLostError(node.id, node.lostAt);
    return node;
  };
  /** `method path` on the node owning session `id`, for `who`; its JSON answer. */
  const call = async (who: Principal, id: number, method: string, path: string, body?: unknown) => {
    const node = await ownerOf(id);
    const url = new URL(`${node.url}${path}`);
    const req = new Request(url, {
      method,
      headers: { "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const res = await forward(req, url, node, who, fleet);
    const answer = await res.json();
    if (res.status !== 200) {
      const error = answer?.error ?? {};
      throw new RelayedError(String(error.code), String(error.message));
    }
    return answer;
  };
  return {
    elsewhere: async (id) => (await fleet.ownerOf(id)) !== undefined,
    call(who, method, id, params) {
      const { session_id: _, ...rest } = params as Record<string, unknown>;
      switch (method) {
        case "write_stdin":
          return call(who, id, "POST", "/v1/write_stdin", params);
        case "kill":
          return call(who, id, "DELETE", `/v1/sessions/${id}`);
        case "resize":
          return call(who, id, "POST", `/v1/sessions/${id}/resize`, rest);
        case "signal":
          return call(who, id, "POST", `/v1/sessions/${id}/signal`, rest);
      }
      throw new Error(`${method}: not a session method`);
    },
    async subscribe(who, id, encoding, outbox, onEnd) {
      // From the output's end now, as a local subscription starts from its session's offset.
      const now = await call(who, id, "GET", `/v1/sessions/${id}/output?encoding=base64`) as {
        end: number;
      };
      const node = await ownerOf(id);
      const url = new URL(`${node.url}/v1/sessions/${id}/stream`);
      if (encoding === "base64") url.searchParams.set("encoding", "base64");
      const stopped = new AbortController();
      const req = new Request(url, {
        headers: { "last-event-id": String(now.end) },
        signal: stopped.signal,
      });
      const res = await forward(req, url, node, who, fleet);
      if (res.status !== 200 || !res.body) {
        const error = (await res.json().catch(() => ({})))?.error ?? {};
        throw new RelayedError(String(error.code), String(error.message));
      }
      // Its events become the notifications a local subscription sends; the stream is read only
      // as fast as the socket drains (that node's stream then waits: nothing is dropped here).
      // Its first read waits on the network, so the answer goes out before any notification.
      relay(res.body, id, outbox, stopped.signal).finally(onEnd);
      return { offset: now.end, stop: () => stopped.abort() };
    },
  };
}

/** Turn output-stream events (SSE) of session `id` into WebSocket notifications. */
async function relay(
  body: ReadableStream<Uint8Array>,
  id: number,
  outbox: Outbox,
  stopped: AbortSignal,
): Promise<void> {
  let event = "message";
  let eventId: number | undefined;
  const encoder = new TextEncoder();
  try {
    for await (const line of linesOf(body)) {
      if (line.startsWith("event: ")) event = line.slice(7);
      else if (line.startsWith("id: ")) eventId = Number(line.slice(4));
      else if (line.startsWith("data: ")) {
        const data = JSON.parse(line.slice(6));
        if (event === "output" && eventId !== undefined) {
          const bytes = data.base64 !== undefined
            ? atob(data.base64).length
            : encoder.encode(data.text).length;
          outbox.send(
            notificationFrame("output", { session_id: id, offset: eventId - bytes, ...data }),
          );
        } else if (event === "gap" && eventId !== undefined) {
          outbox.send(notificationFrame("gap", {
            session_id: id,
            offset: eventId - data.bytes,
            bytes: data.bytes,
          }));
        } else if (event === "exit") {
          outbox.send(notificationFrame("exit", { session_id: id, exit_code: data.exit_code }));
        }
        event = "message";
        eventId = undefined;
        while (outbox.bufferedAmount > QUEUE_BOUND && !stopped.aborted) {
          await new Promise<void>((resolve) => {
            const done = () => {
              stop();
              stopped.removeEventListener("abort", done);
              resolve();
            };
            const stop = outbox.onDrain(done);
            stopped.addEventListener("abort", done, { once: true });
          });
        }
      }
    }
  } catch {
    // Stopped (unsubscribed, the socket closed) or that node went away: the subscription ends.
  }
}

/** The lines of a UTF-8 stream (an SSE stream's lines end with `\n`). */
async function* linesOf(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  let rest = "";
  for await (const text of body.pipeThrough(new TextDecoderStream())) {
    const lines = (rest + text).split("\n");
    rest = lines.pop()!;
    yield* lines;
  }
}
