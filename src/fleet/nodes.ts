/**
 * The node registry in the fleet's store: each node's id (`UEXEC_NODE_ID`), the URL the others
 * reach it at (`UEXEC_NODE_URL`), its ordinal (which makes its session ids unique in the fleet:
 * a session id's ordinal is `floor(id / SESSION_ID_SPAN)`), its heartbeat and the digest of its
 * node-to-node credential (a fresh token per start, kept in memory only).
 *
 * A heartbeat is a lease: each node renews its own every third of `UEXEC_NODE_LEASE_MS` and
 * announces it (`NOTIFY uexec_nodes`); every node keeps one timer per peer, re-armed by that
 * peer's announcements, so a silent peer is looked at once, when its lease runs out, not
 * polled. The first node to see a lease run out marks the peer lost (one `UPDATE ... WHERE
 * lost_at IS NULL` decides who), ends its pending approvals, marks its running history rows
 * killed (`end_reason` `node_lost`) and announces it; every node then
 * tells its own event streams (`node_lost`).
 *
 * It must never hand out, log or store a node's credential in clear.
 *
 * @module
 */

import { digestBytes, matchToken, newToken, tokenDigest } from "../service/tokens.ts";
import type { Logger } from "../log.ts";
import type { FleetStore } from "./store.ts";

/** The span of session ids each node's ordinal owns (Codex's integer ids stay integers). */
export const SESSION_ID_SPAN = 100_000;

/** The channel heartbeats and losses are announced on (`beat:<id>`, `lost:<id>`, `up:<id>`). */
const NODES_CHANNEL = "uexec_nodes";

/** A node as the others see it. */
export interface FleetNode {
  id: string;
  ordinal: number;
  url: string;
  /** Set once its lease ran out. */
  lostAt: string | null;
}

/** The session's node is lost (410 `node_lost`). */
export class NodeLostError extends Error {
  readonly status = 410;
  readonly code = "node_lost";
  constructor(readonly node: string, lostAt: string) {
    super(`node ${node}, which held this session, was lost at ${lostAt}; its sessions are gone`);
  }
}

/** The session's node cannot be reached though its lease still holds (503 `node_unreachable`). */
export class NodeUnreachableError extends Error {
  readonly status = 503;
  readonly code = "node_unreachable";
  constructor(readonly node: string, why: string) {
    super(`node ${node}, which holds this session, cannot be reached now (${why}); try again`);
  }
}

/** This node's settings. */
export interface NodeOptions {
  id: string;
  url: string;
  leaseMs: number;
  log: Logger;
  /** Told when a node is found lost (by this node or another). */
  onLost(node: string): void;
}

/** The registry of the fleet's nodes, from this node's side. */
export class NodeRegistry {
  readonly id: string;
  readonly ordinal: number;
  /** This node's credential toward its peers (never shown anywhere). */
  readonly credential: string;
  readonly #store: FleetStore;
  readonly #opts: NodeOptions;
  readonly #peers = new Map<string, FleetNode & { digest: Uint8Array }>();
  readonly #leases = new Map<string, ReturnType<typeof setTimeout>>();
  #beat: ReturnType<typeof setInterval> | undefined;
  #refreshing: Promise<void> | undefined;
  /** Peers found lost whose loss was told (`onLost`). */
  readonly #told = new Set<string>();
  /** The first load is done (losses seen in it are old news). */
  #loaded = false;

  private constructor(store: FleetStore, opts: NodeOptions, ordinal: number, credential: string) {
    this.#store = store;
    this.#opts = opts;
    this.id = opts.id;
    this.ordinal = ordinal;
    this.credential = credential;
  }

  /** Register this node (a restarted node keeps its ordinal), then follow its peers. */
  static async join(store: FleetStore, opts: NodeOptions): Promise<NodeRegistry> {
    const credential = newToken();
    const digest = tokenDigest(credential);
    const [row] = await store.retry(
      "register the node",
      () =>
        store.sql`INSERT INTO uexec_nodes (id, url, credential_sha256)
                VALUES (${opts.id}, ${opts.url}, ${digest})
                ON CONFLICT (id) DO UPDATE SET url = excluded.url,
                  credential_sha256 = excluded.credential_sha256, started_at = now(),
                  heartbeat_at = now(), lost_at = NULL
                RETURNING ordinal`,
    );
    if (row.ordinal * SESSION_ID_SPAN >= 2 ** 31) {
      throw new Error(`node ordinal ${row.ordinal}: the fleet has outgrown its session id span`);
    }
    const nodes = new NodeRegistry(store, opts, row.ordinal, credential);
    await store.listen(NODES_CHANNEL, (payload) => nodes.#announced(payload));
    await nodes.refresh();
    await store.sql`SELECT pg_notify(${NODES_CHANNEL}, ${`up:${opts.id}`})`;
    nodes.#beat = setInterval(() => nodes.#heartbeat(), Math.max(1, opts.leaseMs / 3));
    return nodes;
  }

  /** Where the peers reach this node (its listening address, known once it listens). */
  async setUrl(url: string): Promise<void> {
    await this.#store.retry("set the node's url", () =>
      this.#store.sql.begin(async (tx) => {
        await tx`UPDATE uexec_nodes SET url = ${url} WHERE id = ${this.id}`;
        await tx`SELECT pg_notify(${NODES_CHANNEL}, ${`up:${this.id}`})`;
      }));
  }

  /** The lowest session id this node hands out (its ordinal's span). */
  get idBase(): number {
    return this.ordinal * SESSION_ID_SPAN;
  }

  /** The node that owns session `id`; undefined for this node's own or an unknown ordinal. */
  async ownerOf(id: number): Promise<FleetNode | undefined> {
    const ordinal = Math.floor(id / SESSION_ID_SPAN);
    if (ordinal === this.ordinal) return undefined;
    const find = () => [...this.#peers.values()].find((node) => node.ordinal === ordinal);
    if (!find()) await this.refresh();
    const node = find();
    return node && { id: node.id, ordinal: node.ordinal, url: node.url, lostAt: node.lostAt };
  }

  /**
   * The peer `id`, lost or not (the registry reloaded first when it is not known, or when
   * `fresh`: what the store says now).
   */
  async peer(id: string, fresh = false): Promise<FleetNode | undefined> {
    if (fresh || !this.#peers.has(id)) await this.refresh(fresh);
    const node = this.#peers.get(id);
    return node && { id: node.id, ordinal: node.ordinal, url: node.url, lostAt: node.lostAt };
  }

  /** The peers whose lease holds (not this node). */
  livePeers(): FleetNode[] {
    return [...this.#peers.values()]
      .filter((node) => node.lostAt === null)
      .map(({ id, ordinal, url, lostAt }) => ({ id, ordinal, url, lostAt }));
  }

  /**
   * The live peer whose credential `token` is, or undefined (compared in constant time; an
   * unknown token reloads the registry once, as a node that just started is not known yet).
   */
  async peerOf(token: string): Promise<string | undefined> {
    const match = () =>
      matchToken(
        token,
        [...this.#peers.values()].filter((n) => n.lostAt === null).map((n) => [n.digest, n.id]),
      );
    const found = match();
    if (found !== undefined) return found;
    await this.refresh();
    return match();
  }

  /**
   * Reload the registry from the store (one reload at a time; callers share it). `fresh`: one
   * that starts after this call, not one already under way.
   */
  refresh(fresh = false): Promise<void> {
    if (fresh && this.#refreshing) return this.#refreshing.then(() => this.refresh());
    this.#refreshing ??= this.#load().finally(() => this.#refreshing = undefined);
    return this.#refreshing;
  }

  async #load(): Promise<void> {
    const rows = await this.#store.retry(
      "load the nodes",
      () =>
        this.#store.sql`SELECT id, ordinal, url, credential_sha256, lost_at,
                  greatest(0, extract(epoch FROM (heartbeat_at - now())) * 1000
                    + ${this.#opts.leaseMs}) AS lease_left_ms
                FROM uexec_nodes WHERE id <> ${this.id}`,
    );
    this.#peers.clear();
    for (const row of rows) {
      const lostAt = row.lost_at === null ? null : new Date(row.lost_at).toISOString();
      this.#peers.set(row.id, {
        id: row.id,
        ordinal: row.ordinal,
        url: row.url,
        lostAt,
        digest: digestBytes(row.credential_sha256),
      });
      if (lostAt === null) {
        this.#arm(row.id, Number(row.lease_left_ms));
        this.#told.delete(row.id);
      } else {
        this.#disarm(row.id);
        // Told once per loss (nodes lost before this one started are not news).
        if (!this.#told.has(row.id) && this.#loaded) this.#opts.onLost(row.id);
        this.#told.add(row.id);
      }
    }
    this.#loaded = true;
  }

  /** A peer's announcement: a heartbeat re-arms its lease; a start or a loss reloads. */
  #announced(payload: string): void {
    const [kind, id] = [
      payload.slice(0, payload.indexOf(":")),
      payload.slice(payload.indexOf(":") + 1),
    ];
    if (id === this.id) return;
    if (kind === "beat" && this.#peers.get(id)?.lostAt === null) this.#arm(id, this.#opts.leaseMs);
    else this.refresh(true).catch(() => {});
  }

  /** Look at peer `id` once its lease may have run out. */
  #arm(id: string, ms: number): void {
    this.#disarm(id);
    // Its own clock is not ours: a little slack past the lease before it is looked at.
    const timer = setTimeout(() => this.#expire(id), ms + 100);
    Deno.unrefTimer(timer);
    this.#leases.set(id, timer);
  }

  #disarm(id: string): void {
    clearTimeout(this.#leases.get(id));
    this.#leases.delete(id);
  }

  /** Peer `id`'s lease may have run out: mark it lost unless it beat meanwhile or another did. */
  async #expire(id: string): Promise<void> {
    this.#leases.delete(id);
    const lease = `${this.#opts.leaseMs} milliseconds`;
    let marked;
    try {
      marked = await this.#store.sql.begin(async (tx) => {
        const rows = await tx`UPDATE uexec_nodes SET lost_at = now()
                 WHERE id = ${id} AND lost_at IS NULL
                   AND heartbeat_at < now() - ${lease}::interval
                 RETURNING id`;
        if (rows.length === 0) return false;
        await tx`UPDATE uexec_approvals SET status = 'node_lost',
                   record = record || jsonb_build_object('status', 'node_lost')
                 WHERE node = ${id} AND status = 'pending'`;
        await tx`UPDATE uexec_history SET status = 'killed',
                   row = row || jsonb_build_object('status', 'killed', 'end_reason', 'node_lost',
                     'ended_ms', (extract(epoch FROM now()) * 1000)::bigint)
                 WHERE node = ${id} AND status = 'running'`;
        await tx`SELECT pg_notify(${NODES_CHANNEL}, ${`lost:${id}`})`;
        return true;
      });
    } catch (err) {
      // The store is away: look again after another lease (its own heartbeat cannot land either).
      this.#opts.log.warn("node_lease_check_failed", { node: id, error: (err as Error).message });
      this.#arm(id, this.#opts.leaseMs);
      return;
    }
    if (marked) this.#opts.log.warn("node_lost", { node: id });
    // Whoever marked it, this node tells its streams once it reads the mark.
    await this.refresh(true).catch(() => {});
  }

  /** Renew this node's lease and announce it (a store that is away: the next beat tries again). */
  async #heartbeat(): Promise<void> {
    try {
      await this.#store.sql.begin(async (tx) => {
        const [row] = await tx`UPDATE uexec_nodes SET heartbeat_at = now(),
                   lost_at = NULL
                 WHERE id = ${this.id} RETURNING id`;
        if (!row) throw new Error(`node ${this.id} is gone from the store`);
        await tx`SELECT pg_notify(${NODES_CHANNEL}, ${`beat:${this.id}`})`;
      });
    } catch (err) {
      this.#opts.log.warn("node_heartbeat_failed", { error: (err as Error).message });
    }
  }

  /** Stop heartbeating and watching; the node's lease runs out on its own (or is ended here). */
  async leave(): Promise<void> {
    clearInterval(this.#beat);
    for (const id of [...this.#leases.keys()]) this.#disarm(id);
    try {
      await this.#store.sql`UPDATE uexec_nodes SET lost_at = now() WHERE id = ${this.id}`;
      await this.#store.sql`SELECT pg_notify(${NODES_CHANNEL}, ${`lost:${this.id}`})`;
    } catch {
      // The store is away: the lease runs out by itself.
    }
  }
}
