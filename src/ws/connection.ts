/**
 * One WebSocket connection of the front door: it reads JSON-RPC requests, runs each as an
 * operation of the core for the connection's caller and answers it as soon as it completes, so
 * many requests are in flight at once and a long poll holds up nothing else. It also keeps the
 * connection's output subscriptions and ends them when the socket closes.
 *
 * Methods: `exec_command` and `write_stdin` (the HTTP bodies, the HTTP results; `write_stdin`
 * may take `yield_time_ms: 0`), `kill`, `resize`, `signal`, `subscribe`, `unsubscribe`.
 *
 * The caller is authenticated again for every request, so a revoked token stops working on an
 * open connection too (the socket is then closed). It must never run an operation without the
 * principal, and never let one connection hold more than its bounded number of requests.
 *
 * @module
 */

import type { z } from "zod";
import type { Principal } from "../service/principal.ts";
import { ExecBody, parseInput, WriteBody } from "../service/schemas.ts";
import type { Service } from "../service/service.ts";
import { ApiError, InvalidRequestError } from "../errors.ts";
import { ResizeParams, SessionParams, SignalParams, SubscribeParams } from "./params.ts";
import {
  errorFrame,
  idOf,
  internalError,
  parseRequest,
  ProtocolError,
  resultFrame,
  RPC,
  rpcError,
  type RpcId,
} from "./json_rpc.ts";
import { type FrameSocket, OPEN } from "./socket.ts";
import { type Outbox, subscribe } from "./subscription.ts";

/** Requests one connection may have in flight; more are refused (`too_many_requests`). */
export const MAX_IN_FLIGHT = 1024;
/**
 * The largest request message, in bytes (as the HTTP body limit, 1 MiB): the socket refuses a
 * longer one from its frame header, with close 1009 (see socket.ts).
 */
export const MAX_MESSAGE = 1024 * 1024;

/** More requests in flight on one connection than it may have (429). */
class TooManyRequestsError extends ApiError {
  readonly code = "too_many_requests";
  constructor() {
    super(`at most ${MAX_IN_FLIGHT} requests may be in flight on one connection`);
  }
}

/**
 * Sessions of other fleet nodes (src/http/forward.ts): the session methods of a session another
 * node owns are run there, for the same caller.
 */
export interface RemoteSessions {
  /** Whether session `id` is another node's (a lost node's too: its calls answer 410). */
  elsewhere(id: number): Promise<boolean>;
  /** Run `method` (`write_stdin`, `kill`, `resize`, `signal`) on the owning node. */
  call(who: Principal, method: string, id: number, params: unknown): Promise<unknown>;
  /**
   * Push session `id`'s output to `outbox` from now on, as a local subscription does; resolves
   * with the offset it starts at and the function that stops it.
   */
  subscribe(
    who: Principal,
    id: number,
    encoding: "text" | "base64",
    outbox: Outbox,
    onEnd: () => void,
  ): Promise<{ offset: number; stop: () => void }>;
}

/**
 * Serve `socket` for the caller that `authenticate` names (it throws the HTTP layer's error
 * when the credential no longer works, which closes the socket); `remote`: a fleet node's way to
 * other nodes' sessions.
 */
export function serveSocket(
  socket: FrameSocket,
  service: Service,
  authenticate: () => Principal,
  remote?: RemoteSessions,
): void {
  const subscriptions = new Map<number, () => void>();
  let inFlight = 0;
  const send = (frame: string) => {
    if (socket.readyState === OPEN) socket.send(frame);
  };
  const fail = (id: RpcId, err: unknown) => {
    const known = rpcError(err);
    if (known) return send(errorFrame(id, known));
    const requestId = crypto.randomUUID();
    console.error(`uexec: websocket request ${requestId} failed:`, err);
    send(errorFrame(id, internalError(requestId)));
  };

  /** `local` here, or the method on the node that owns session `id` (a fleet). */
  const onOwner = (
    who: Principal,
    method: string,
    id: number,
    params: unknown,
    local: () => unknown,
  ) => {
    if (!remote) return local();
    return remote.elsewhere(id).then((away) =>
      away ? remote.call(who, method, id, params) : local()
    );
  };
  const methods: Record<string, (who: Principal, params: unknown) => unknown> = {
    exec_command: (who, params) => service.exec(who, parseInput(ExecBody, params)),
    write_stdin: (who, params) => {
      const body = parseInput(WriteBody, params);
      return onOwner(
        who,
        "write_stdin",
        body.session_id,
        params,
        () => service.writeStreaming(who, body),
      );
    },
    kill: (who, params) => {
      const id = parseInput(SessionParams, params).session_id;
      return onOwner(who, "kill", id, params, () => service.kill(who, id));
    },
    resize: (who, params) => {
      const { session_id, ...size } = parseInput(ResizeParams, params);
      return onOwner(who, "resize", session_id, params, () => {
        service.resize(who, session_id, size);
        return { ok: true };
      });
    },
    signal: (who, params) => {
      const { session_id, signal } = parseInput(SignalParams, params);
      return onOwner(who, "signal", session_id, params, () => {
        service.signal(who, session_id, signal);
        return { ok: true };
      });
    },
    subscribe: (who, params) => {
      const parsed = parseInput(SubscribeParams, params);
      if (!remote) return watch(who, parsed);
      return remote.elsewhere(parsed.session_id).then((away) =>
        away ? watchElsewhere(who, parsed) : watch(who, parsed)
      );
    },
    unsubscribe: (who, params) => {
      const { session_id } = parseInput(SessionParams, params);
      // A subscription is only ever made for a session the caller may see (here or elsewhere).
      if (!subscriptions.has(session_id)) service.session(who, session_id);
      subscriptions.get(session_id)?.();
      subscriptions.delete(session_id);
      return { ok: true };
    },
  };

  const outbox: Outbox = {
    send,
    get bufferedAmount() {
      return socket.bufferedAmount;
    },
    onDrain: (listener: () => void) => socket.onDrain(listener),
  };

  /** Subscribe to another node's session's output (through that node's output stream). */
  const watchElsewhere = async (who: Principal, params: z.output<typeof SubscribeParams>) => {
    const id = params.session_id;
    if (subscriptions.has(id)) {
      throw new InvalidRequestError(`session_id: already subscribed to session ${id}`);
    }
    const started = await remote!.subscribe(
      who,
      id,
      params.encoding,
      outbox,
      () => subscriptions.delete(id),
    );
    subscriptions.set(id, started.stop);
    return { session_id: id, offset: started.offset };
  };

  /** Subscribe to a session's output; notifications follow the answer, never precede it. */
  const watch = (who: Principal, params: z.output<typeof SubscribeParams>) => {
    const id = params.session_id;
    const session = service.session(who, id);
    if (subscriptions.has(id)) {
      throw new InvalidRequestError(`session_id: already subscribed to session ${id}`);
    }
    subscriptions.set(
      id,
      subscribe(session, outbox, params.encoding, () => subscriptions.delete(id)),
    );
    return { session_id: id, offset: session.offset };
  };

  const handle = (frame: string) => {
    let id: RpcId = null;
    try {
      const request = parseRequest(frame);
      id = request.id ?? null;
      const method = Object.hasOwn(methods, request.method) ? methods[request.method] : undefined;
      if (!method) {
        throw new ProtocolError(
          RPC.methodNotFound,
          "not_found",
          `no method ${JSON.stringify(request.method)}; use one of ${
            Object.keys(methods).join(", ")
          }`,
        );
      }
      if (inFlight >= MAX_IN_FLIGHT) throw new TooManyRequestsError();
      const result = method(authenticate(), request.params);
      if (!(result instanceof Promise)) {
        if (request.id !== undefined) send(resultFrame(request.id, result));
        return;
      }
      inFlight++;
      result.then(
        (value) => request.id !== undefined && send(resultFrame(request.id, value)),
        (err) => request.id !== undefined && fail(request.id, err),
      ).finally(() => inFlight--);
    } catch (err) {
      if (id === null && !(err instanceof ProtocolError)) id = idOf(frame);
      fail(id, err);
      if (err instanceof ApiError && err.status === 401) {
        socket.close(1008, "credential no longer valid");
      }
    }
  };

  socket.onmessage = (event) => {
    if (typeof event.data === "string") return handle(event.data);
    fail(
      null,
      new ProtocolError(RPC.invalidRequest, "invalid_request", "send requests as text frames"),
    );
  };
  socket.addCloseListener(() => {
    for (const unsubscribe of subscriptions.values()) unsubscribe();
    subscriptions.clear();
  });
}
