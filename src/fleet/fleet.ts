/**
 * This node's membership of a fleet (`UEXEC_STORE` set): the store opened and migrated, the
 * fleet's tokens claimed, the agents loaded, the node registered. What the HTTP front door
 * needs to forward a call to the node that owns its session is {@link FleetMember}. Without
 * `UEXEC_STORE` nothing here runs.
 *
 * @module
 */

import type { Config } from "../config.ts";
import type { Logger } from "../log.ts";
import { type AgentBackend, DEFAULT_AGENT, type StoredAgent } from "../service/agents.ts";
import type { StateDir } from "../service/state_dir.ts";
import { newToken, tokenDigest } from "../service/bearer_tokens.ts";
import { AGENTS_CHANNEL, claimFleetTokens, loadAgents, storeAgents } from "./agents.ts";
import { type FleetNode, NodeRegistry } from "./nodes.ts";
import { FleetStore } from "./store.ts";
import type { FleetApprovals } from "./approvals.ts";

/** What the rest of the server uses of the fleet. */
export interface FleetMember {
  /** This node's id. */
  readonly node: string;
  /** This node's credential toward its peers (a request header only; never in an answer). */
  readonly credential: string;
  /** The live peer whose credential `token` is, or undefined. */
  peerOf(token: string): Promise<string | undefined>;
  /** The node owning session `id`; undefined when it is this node's (or no node's). */
  ownerOf(id: number): Promise<FleetNode | undefined>;
  /** The peers whose lease holds. */
  livePeers(): FleetNode[];
  /** The peer `id` (lost or not), or undefined; `fresh`: as the store says now. */
  peer(id: string, fresh?: boolean): Promise<FleetNode | undefined>;
  /** The fleet's approvals in the store. */
  readonly approvals: FleetApprovals;
  /** Reload the agents from the store (a token this node does not know yet). */
  reloadAgents(): Promise<void>;
  /** The URL the peers reach this node at, once it listens (unless `UEXEC_NODE_URL` said). */
  listening(url: string): Promise<void>;
}

/** An opened fleet membership, before the service is built on it. */
export interface Fleet {
  store: FleetStore;
  /** The agent registry's backend on the store. */
  agents: AgentBackend;
  /** Register this node; `onLost` is told of every node found lost. */
  join(onLost: (node: string) => void): Promise<NodeRegistry>;
  /**
   * Follow the agents in the store: `adopt` is given them after every change (and on a miss).
   * Returns the member the front door uses.
   */
  member(
    nodes: NodeRegistry,
    approvals: FleetApprovals,
    adopt: (agents: StoredAgent[]) => Promise<void>,
  ): Promise<FleetMember>;
  close(nodes?: NodeRegistry): Promise<void>;
}

/** Open the store named by `config.store` and take this node's tokens to it. */
export async function openFleet(config: Config, state: StateDir, log: Logger): Promise<Fleet> {
  const settings = config.store!;
  const store = await FleetStore.open({ url: settings.url, retryMs: settings.retryMs, log });
  const operatorToken = config.operatorToken ?? state.read("operator.token")?.trim() ??
    writeToken(state, "operator.token");
  const agentToken = config.agentToken ?? newToken();
  const defaultAgent: StoredAgent = {
    name: DEFAULT_AGENT,
    max_profile: null,
    max_widening: null,
    max_sessions: null,
    max_memory_bytes: null,
    max_egress: null,
    created_at: new Date().toISOString(),
    token_sha256: tokenDigest(agentToken),
  };
  const created = await claimFleetTokens(
    store,
    operatorToken,
    defaultAgent,
    config.agentToken !== undefined,
  ).catch(async (err) => {
    await store.close();
    throw err;
  });
  // The default agent's token is shown (in this node's state directory) only where it was made.
  if (created && config.agentToken === undefined) state.write("agent.token", `${agentToken}\n`);
  const loaded = await loadAgents(store);
  return {
    store,
    agents: storeAgents(store, loaded),
    join(onLost) {
      return NodeRegistry.join(store, {
        id: config.node.id,
        url: config.node.url ?? "",
        leaseMs: config.node.leaseMs,
        log,
        onLost,
      });
    },
    async member(nodes, approvals, adopt) {
      let reloading: Promise<void> | undefined;
      const reloadAgents = () => {
        reloading ??= loadAgents(store).then(adopt).finally(() => reloading = undefined);
        return reloading;
      };
      await store.listen(AGENTS_CHANNEL, () => {
        reloadAgents().catch((err) =>
          log.warn("fleet_agents_reload_failed", { error: (err as Error).message })
        );
      });
      return {
        node: nodes.id,
        credential: nodes.credential,
        peerOf: (token) => nodes.peerOf(token),
        ownerOf: (id) => nodes.ownerOf(id),
        livePeers: () => nodes.livePeers(),
        peer: (id, fresh) => nodes.peer(id, fresh),
        approvals,
        reloadAgents,
        listening: (url) => config.node.url ? Promise.resolve() : nodes.setUrl(url),
      };
    },
    async close(nodes) {
      await nodes?.leave();
      await store.close();
    },
  };
}

function writeToken(state: StateDir, file: string): string {
  const token = newToken();
  state.write(file, `${token}\n`);
  return token;
}
