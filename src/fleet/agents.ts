/**
 * The agent registry's backend in the fleet's store: agents and their token digests in
 * `uexec_agents`, the fleet's operator token digest in `uexec_operator`. A change is committed
 * with a `NOTIFY uexec_agents`, on which every node reloads the table; a node that meets a token
 * it does not know also reloads once before refusing it (an agent minted a moment ago on another
 * node works at once). Only digests are stored; it must never store or log a token.
 *
 * @module
 */

import {
  type AgentBackend,
  AgentExistsError,
  DEFAULT_AGENT,
  parseRegistry,
  type StoredAgent,
} from "../service/agents.ts";
import { tokenDigest } from "../service/bearer_tokens.ts";
import type postgres from "postgres";
import type { FleetStore } from "./store.ts";

/** The channel a change of the agents is announced on. */
export const AGENTS_CHANNEL = "uexec_agents";

/** A node's tokens differ from the fleet's (it must not start: one operator, one registry). */
export class FleetTokenError extends Error {}

/** Every agent in the store, validated as `agents.json` is. */
export async function loadAgents(store: FleetStore): Promise<StoredAgent[]> {
  const rows = await store.retry(
    "load agents",
    () => store.sql`SELECT record, token_sha256 FROM uexec_agents ORDER BY name`,
  );
  const agents = rows.map((row) => ({ ...row.record, token_sha256: row.token_sha256 }));
  return parseRegistry(JSON.stringify({ agents }), "the fleet's store (uexec_agents)");
}

/**
 * At a node's start: the fleet's operator token is the first node's; a node configured with
 * another one is refused. The default agent is created in the store by the first node (with
 * `agentToken`, or a token the caller generated and keeps), and a node given another
 * `UEXEC_AGENT_TOKEN` than the fleet's is refused. True when this node created the default agent.
 */
export async function claimFleetTokens(
  store: FleetStore,
  operatorToken: string,
  defaultAgent: StoredAgent,
  explicitAgentToken: boolean,
): Promise<boolean> {
  const operator = tokenDigest(operatorToken);
  return await store.retry("claim tokens", () =>
    store.sql.begin(async (tx) => {
      await tx`INSERT INTO uexec_operator (token_sha256) VALUES (${operator})
               ON CONFLICT DO NOTHING`;
      const [row] = await tx`SELECT token_sha256 FROM uexec_operator`;
      if (row.token_sha256 !== operator) {
        throw new FleetTokenError(
          "UEXEC_OPERATOR_TOKEN: this node's operator token is not the fleet's (the first node's);" +
            " give every node the same UEXEC_OPERATOR_TOKEN",
        );
      }
      const { token_sha256, ...record } = defaultAgent;
      const [stored] =
        await tx`SELECT token_sha256 FROM uexec_agents WHERE name = ${DEFAULT_AGENT}`;
      if (stored && explicitAgentToken && stored.token_sha256 !== token_sha256) {
        throw new FleetTokenError(
          "UEXEC_AGENT_TOKEN: this node's default agent token is not the fleet's; give every " +
            "node the same UEXEC_AGENT_TOKEN, or none",
        );
      }
      const inserted = await tx`INSERT INTO uexec_agents (name, token_sha256, record)
               VALUES (${DEFAULT_AGENT}, ${token_sha256}, ${tx.json(record as postgres.JSONValue)})
               ON CONFLICT DO NOTHING RETURNING name`;
      if (inserted.length > 0) await tx`SELECT pg_notify(${AGENTS_CHANNEL}, '')`;
      return inserted.length > 0;
    }));
}

/** The registry's backend on the store; `loaded` is what it held at start. */
export function storeAgents(store: FleetStore, loaded: StoredAgent[]): AgentBackend {
  return {
    load: () => loaded,
    saveAll: () => {},
    async insert(agent) {
      const { token_sha256, ...record } = agent;
      const rows = await store.retry("mint an agent", () =>
        store.sql.begin(async (tx) => {
          const added = await tx`INSERT INTO uexec_agents (name, token_sha256, record)
                 VALUES (${agent.name}, ${token_sha256}, ${tx.json(record as postgres.JSONValue)})
                 ON CONFLICT (name) DO NOTHING RETURNING name`;
          if (added.length > 0) await tx`SELECT pg_notify(${AGENTS_CHANNEL}, ${agent.name})`;
          return added;
        }));
      if (rows.length === 0) {
        throw new AgentExistsError(`an agent named ${JSON.stringify(agent.name)} exists already`);
      }
    },
    async remove(name) {
      await store.retry("revoke an agent", () =>
        store.sql.begin(async (tx) => {
          await tx`DELETE FROM uexec_agents WHERE name = ${name}`;
          await tx`SELECT pg_notify(${AGENTS_CHANNEL}, ${name})`;
        }));
    },
  };
}
