/**
 * The credential registry: the operator's token and the agents' (name, token digest, limits),
 * persisted in the state directory so agents survive a restart. It turns a presented bearer
 * token into a {@link Principal}; revoking an agent makes its token fail at once.
 *
 * Agents' tokens are stored only as digests; the operator's and the default agent's tokens are
 * also written to `operator.token` and `agent.token` (0600) when the server generated them, so
 * the human can read them. It must never log a token or hand one out twice.
 *
 * @module
 */

import { ApiError } from "../errors.ts";
import {
  type Agent,
  type AgentWidening,
  OPERATOR,
  OPERATOR_OWNER,
  type Principal,
} from "./principal.ts";
import type { StateDir } from "./state_dir.ts";
import { digestBytes, matchToken, newToken, sameToken, tokenDigest } from "./bearer_tokens.ts";

/** The agent created at first start. */
export const DEFAULT_AGENT = "default";

const REGISTRY_FILE = "agents.json";
const OPERATOR_FILE = "operator.token";
const AGENT_FILE = "agent.token";
const NAME = /^[a-z0-9][a-z0-9_.-]{0,63}$/;

/** An agent as the operator sees it (never its token). */
export interface AgentInfo {
  name: string;
  max_profile: string | null;
  /** What it may ask for beyond max_profile in a narrow escalation. */
  max_widening: AgentWidening | null;
  max_sessions: number | null;
  /** The memory of each of its sessions, in bytes (null: the server's per-session default). */
  max_memory_bytes: number | null;
  /** Host patterns it may ever reach through the egress proxy, or ask for; null: no cap. */
  max_egress: string[] | null;
  created_at: string;
}

/** An agent as stored: its public record and its token's digest. */
export interface StoredAgent extends AgentInfo {
  token_sha256: string;
}
type Stored = StoredAgent;

/**
 * Where the registry is kept: the state directory's `agents.json` (the default, one host), or
 * the fleet's shared store (src/fleet/agents.ts). A change is written there before it takes
 * effect here, so an agent minted on one node is known to the store before its token is shown.
 */
export interface AgentBackend {
  /** Every stored agent, or undefined when none was ever stored. */
  load(): StoredAgent[] | undefined;
  /** The whole registry as it is at start (the state directory writes it; a store need not). */
  saveAll(agents: StoredAgent[]): void;
  /** Add `agent` (`all` includes it); {@link AgentExistsError} when its name is taken. */
  insert(agent: StoredAgent, all: StoredAgent[]): void | Promise<void>;
  /** Remove the agent `name` (`all` is what remains). */
  remove(name: string, all: StoredAgent[]): void | Promise<void>;
}

/** The registry in the state directory's `agents.json` (one host; the default). */
export function stateDirAgents(state: StateDir): AgentBackend {
  const save = (agents: StoredAgent[]) =>
    state.write(REGISTRY_FILE, `${JSON.stringify({ agents }, null, 2)}\n`);
  return {
    load() {
      const saved = state.read(REGISTRY_FILE);
      return saved === undefined ? undefined : parseRegistry(saved, state.file(REGISTRY_FILE));
    },
    saveAll: save,
    insert: (_agent, all) => save(all),
    remove: (_name, all) => save(all),
  };
}

/** What a new agent is created with. */
export interface NewAgent {
  name: string;
  maxProfile?: string;
  maxWidening?: AgentWidening;
  maxSessions?: number;
  maxMemoryBytes?: number;
  maxEgress?: string[];
}

/** An agent name already taken (409 `agent_exists`). */
export class AgentExistsError extends ApiError {
  readonly code = "agent_exists";
}

/** No agent by that name (404 `unknown_agent`). */
export class UnknownAgentError extends ApiError {
  readonly code = "unknown_agent";
}

/** An agent name that is not allowed (400 `invalid_request`). */
export class AgentNameError extends ApiError {
  readonly code = "invalid_request";
}

/** Where the tokens of this start came from, for the start-up line. */
export interface TokenSources {
  operator: string;
  agent: string;
}

/** Settings of the registry. */
export interface RegistryOptions {
  state: StateDir;
  /** Where the agents are kept; the state directory's `agents.json` when absent. */
  backend?: AgentBackend;
  /** `UEXEC_OPERATOR_TOKEN`: used instead of `operator.token`. */
  operatorToken?: string;
  /** `UEXEC_AGENT_TOKEN` (or its alias `UEXEC_TOKEN`): the default agent's token. */
  agentToken?: string;
  now?: () => Date;
}

/** Operator and agent credentials. */
export class AgentRegistry {
  readonly #state: StateDir;
  readonly #backend: AgentBackend;
  readonly #now: () => Date;
  readonly #agents = new Map<string, Stored>();
  /** The record each agent principal was issued for (see `current`). */
  readonly #issued = new WeakMap<Principal, Stored>();
  readonly #operatorDigest: Uint8Array;
  /** Digest (bytes) -> principal, rebuilt on every change. */
  #byDigest: [Uint8Array, Principal][] = [];
  /**
   * What each connection last authenticated as, with the table it was matched in: a later
   * request on it with the same token skips the digest while no agent was added or revoked.
   */
  #remembered = new WeakMap<
    object,
    { token: string; principal: Principal; table: [Uint8Array, Principal][] }
  >();
  /** Where the operator's and default agent's tokens are, for the start-up line. */
  readonly sources: TokenSources;

  constructor(opts: RegistryOptions) {
    this.#state = opts.state;
    this.#backend = opts.backend ?? stateDirAgents(opts.state);
    this.#now = opts.now ?? (() => new Date());
    const operator = opts.operatorToken ?? this.#tokenFile(OPERATOR_FILE);
    this.#operatorDigest = digestBytes(tokenDigest(operator));
    const saved = this.#backend.load();
    if (saved === undefined) {
      const token = opts.agentToken ?? this.#tokenFile(AGENT_FILE);
      this.#agents.set(DEFAULT_AGENT, this.#record({ name: DEFAULT_AGENT }, token));
    } else {
      for (const agent of saved) this.#agents.set(agent.name, agent);
      if (opts.agentToken !== undefined) {
        const current = this.#agents.get(DEFAULT_AGENT);
        this.#agents.set(DEFAULT_AGENT, {
          ...(current ?? this.#record({ name: DEFAULT_AGENT }, opts.agentToken)),
          token_sha256: tokenDigest(opts.agentToken),
        });
      }
    }
    this.sources = {
      operator: opts.operatorToken ? "UEXEC_OPERATOR_TOKEN" : this.#state.file(OPERATOR_FILE),
      agent: opts.agentToken
        ? "UEXEC_AGENT_TOKEN"
        : this.#agents.has(DEFAULT_AGENT)
        ? this.#state.file(AGENT_FILE)
        : "(the default agent was revoked)",
    };
    this.#backend.saveAll([...this.#agents.values()]);
    this.#rebuild();
  }

  /**
   * Take the registry as the shared store now holds it (another node minted or revoked an
   * agent); returns the names no longer there, whose principals stop being current now.
   */
  replace(agents: StoredAgent[]): string[] {
    const next = new Map(agents.map((agent) => [agent.name, agent]));
    const gone: string[] = [];
    for (const [name, record] of this.#agents) {
      const now = next.get(name);
      if (now === undefined || now.token_sha256 !== record.token_sha256) gone.push(name);
      // The same record keeps its identity, so principals issued for it stay current.
      else next.set(name, record);
    }
    this.#agents.clear();
    for (const [name, record] of next) this.#agents.set(name, record);
    this.#rebuild();
    return gone;
  }

  /**
   * The principal a bearer token stands for, or undefined. `connection` (any object that lives
   * as long as the client's connection) lets a connection that presents the token it presented
   * last skip the digest (compared in constant time, and only until the registry changes).
   */
  authenticate(token: string, connection?: object): Principal | undefined {
    const seen = connection && this.#remembered.get(connection);
    if (seen && seen.table === this.#byDigest && sameToken(seen.token, token)) {
      return seen.principal;
    }
    const principal = matchToken(token, this.#byDigest);
    if (connection && principal) {
      this.#remembered.set(connection, { token, principal, table: this.#byDigest });
    }
    return principal;
  }

  /** The principal of the agent `name`, or undefined if there is none. */
  principal(name: string): Agent | undefined {
    const record = this.#agents.get(name);
    return record && this.#principalOf(record);
  }

  /**
   * Whether `principal` still stands for a registered credential: always for the operator; for
   * an agent, while the very agent it was issued for is registered. A revoked agent's principal
   * stays revoked when another agent is minted under the same name later: that is another party.
   */
  current(principal: Principal): boolean {
    if (principal.role === "operator") return true;
    const record = this.#issued.get(principal);
    return record !== undefined && this.#agents.get(principal.name) === record;
  }

  /** When the agent `principal` was issued for was minted (ms since the epoch). */
  mintedMs(principal: Agent): number {
    const record = this.#issued.get(principal);
    if (!record) throw new Error(`${principal.name}: not a principal this registry issued`);
    return Date.parse(record.created_at);
  }

  /** Every agent, by name. */
  list(): AgentInfo[] {
    return [...this.#agents.values()].map(info).sort((a, b) => a.name.localeCompare(b.name));
  }

  /** Create an agent; its token is returned here once and stored only as a digest. */
  async create(spec: NewAgent): Promise<{ agent: AgentInfo; token: string }> {
    if (!NAME.test(spec.name) || spec.name === OPERATOR_OWNER) {
      throw new AgentNameError(
        `name: must match ${NAME} and not be "${OPERATOR_OWNER}", got ${JSON.stringify(spec.name)}`,
      );
    }
    if (this.#agents.has(spec.name)) {
      throw new AgentExistsError(`an agent named ${JSON.stringify(spec.name)} exists already`);
    }
    const token = newToken();
    const record = this.#record(spec, token);
    await this.#backend.insert(record, [...this.#agents.values(), record]);
    this.#agents.set(spec.name, record);
    this.#rebuild();
    return { agent: info(record), token };
  }

  /** Revoke an agent: its token stops working now. */
  async revoke(name: string): Promise<AgentInfo> {
    const record = this.#agents.get(name);
    if (!record) throw new UnknownAgentError(`no agent named ${JSON.stringify(name)}`);
    const rest = [...this.#agents.values()].filter((agent) => agent !== record);
    await this.#backend.remove(name, rest);
    this.#agents.delete(name);
    if (name === DEFAULT_AGENT) this.#state.remove(AGENT_FILE);
    this.#rebuild();
    return info(record);
  }

  #record(spec: NewAgent, token: string): Stored {
    return {
      name: spec.name,
      max_profile: spec.maxProfile ?? null,
      max_widening: spec.maxWidening ?? null,
      max_sessions: spec.maxSessions ?? null,
      max_memory_bytes: spec.maxMemoryBytes ?? null,
      max_egress: spec.maxEgress ?? null,
      created_at: this.#now().toISOString(),
      token_sha256: tokenDigest(token),
    };
  }

  /** The token in `name`, generated and written (0600) when the file does not exist. */
  #tokenFile(name: string): string {
    const existing = this.#state.read(name)?.trim();
    if (existing) return existing;
    const token = newToken();
    this.#state.write(name, `${token}\n`);
    return token;
  }

  /** The digest table `authenticate` matches against, from the agents now registered. */
  #rebuild(): void {
    const agents = [...this.#agents.values()];
    this.#byDigest = [
      [this.#operatorDigest, OPERATOR],
      ...agents.map((a): [Uint8Array, Principal] => [
        digestBytes(a.token_sha256),
        this.#principalOf(a),
      ]),
    ];
  }

  /** The principal of agent `record`, remembered as issued for that record. */
  #principalOf(record: Stored): Agent {
    const principal: Agent = Object.freeze({
      role: "agent",
      name: record.name,
      ...(record.max_profile === null ? {} : { maxProfile: record.max_profile }),
      ...(record.max_widening ? { maxWidening: record.max_widening } : {}),
      ...(record.max_sessions === null ? {} : { maxSessions: record.max_sessions }),
      ...(record.max_memory_bytes === null ? {} : { maxMemoryBytes: record.max_memory_bytes }),
      ...(record.max_egress === null ? {} : { maxEgress: record.max_egress }),
    });
    this.#issued.set(principal, record);
    return principal;
  }
}

function info(record: Stored): AgentInfo {
  const { token_sha256: _, ...rest } = record;
  return rest;
}

function isWidening(w: unknown): w is AgentWidening {
  if (w === null || typeof w !== "object" || Array.isArray(w)) return false;
  const { write, tcp_ports, ...rest } = w as Record<string, unknown>;
  return Object.keys(rest).length === 0 &&
    (write === undefined ||
      (Array.isArray(write) && write.every((p) => typeof p === "string" && p.startsWith("/")))) &&
    (tcp_ports === undefined ||
      (Array.isArray(tcp_ports) && tcp_ports.every((n) => Number.isInteger(n))));
}

/** The agents of an `agents.json` text (`file` names it in errors). */
export function parseRegistry(text: string, file: string): Stored[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new Error(`${file}: not valid JSON: ${(err as Error).message}`);
  }
  const agents = (parsed as { agents?: unknown })?.agents;
  if (!Array.isArray(agents)) throw new Error(`${file}: expected {"agents": [...]}`);
  return agents.map((a, i) => {
    const ok = a && typeof a.name === "string" && NAME.test(a.name) &&
      typeof a.token_sha256 === "string" && /^[0-9a-f]{64}$/.test(a.token_sha256) &&
      (a.max_profile === null || typeof a.max_profile === "string") &&
      (a.max_widening === undefined || a.max_widening === null || isWidening(a.max_widening)) &&
      (a.max_sessions === null || Number.isInteger(a.max_sessions)) &&
      (a.max_memory_bytes == null || Number.isSafeInteger(a.max_memory_bytes)) &&
      (a.max_egress === undefined || a.max_egress === null ||
        Array.isArray(a.max_egress) && a.max_egress.every((p: unknown) => typeof p === "string")) &&
      typeof a.created_at === "string";
    if (!ok) throw new Error(`${file}: agents[${i}] is malformed`);
    // Records written before max_widening, max_memory_bytes or max_egress existed lack them.
    return {
      ...a,
      max_widening: a.max_widening ?? null,
      max_memory_bytes: a.max_memory_bytes ?? null,
      max_egress: a.max_egress ?? null,
    } as Stored;
  });
}
