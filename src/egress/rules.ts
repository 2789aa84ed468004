/**
 * Egress rules: which host names a sandboxed command may reach through uexec's proxy, with
 * which methods, and which resolved addresses are never dialled. Host patterns are exact names
 * (`example.org`) or a wildcard over a domain and its apex (`*.example.org`); deny wins over
 * allow, and an empty allow list allows nothing. Addresses in loopback, private, link-local,
 * shared, multicast, reserved and cloud-metadata ranges are refused even behind an allowed name,
 * unless one of the operator's `UEXEC_EGRESS_ALLOW_PRIVATE` ranges holds them.
 *
 * Pure: this module must never resolve a name, open a socket or read a file.
 *
 * @module
 */

/** What a profile (or the server's defaults) lets a command reach. */
export interface EgressRules {
  /** Host patterns that may be reached. */
  allow: string[];
  /** Host patterns that may never be reached (they win over `allow`). */
  deny: string[];
  /** `read-only`: GET, HEAD and OPTIONS over plain HTTP only; no tunnels. */
  methods: "all" | "read-only";
  /** The agent's `max_egress`: a host none of these match is refused whatever `allow` says. */
  cap?: string[];
}

/** Why a connection was let through or refused: the rule, as shown in the 403. */
export interface Verdict {
  allowed: boolean;
  /** `allow:<pattern>`, `deny:<pattern>`, `not-allowed`, `method:<M>`, `address:<range>`... */
  rule: string;
}

const LABEL = /^(?!-)[a-z0-9_-]{1,63}(?<!-)$/;

/** The canonical form of a host name: lower case, no trailing dot. Undefined if not a name. */
export function canonicalHost(host: string): string | undefined {
  let h = host.trim().toLowerCase().replace(/\.$/, "");
  if (h.startsWith("[") && h.endsWith("]")) h = h.slice(1, -1);
  if (parseAddress(h) !== undefined) return h;
  if (h.length === 0 || h.length > 253) return undefined;
  return h.split(".").every((label) => LABEL.test(label)) ? h : undefined;
}

/** Why `pattern` is not a usable host pattern, or undefined when it is. */
export function patternProblem(pattern: string): string | undefined {
  const name = pattern.startsWith("*.") ? pattern.slice(2) : pattern;
  if (canonicalHost(name) !== name) {
    return `"${pattern}" is not a host pattern (example.org or *.example.org, lower case)`;
  }
  return undefined;
}

/** Whether `host` (canonical) matches `pattern`: exactly, or as `*.domain` or its apex. */
export function matches(pattern: string, host: string): boolean {
  if (!pattern.startsWith("*.")) return host === pattern;
  const domain = pattern.slice(2);
  return host === domain || host.endsWith(`.${domain}`);
}

/** Whether every host `pattern` matches is matched by one of `caps` too. */
export function patternWithin(pattern: string, caps: string[]): boolean {
  return caps.some((cap) =>
    cap === pattern || (cap.startsWith("*.") && matches(cap, pattern.replace(/^\*\./, "")))
  );
}

const READ_ONLY_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);

/**
 * The verdict for a request for `host` with `method` (`CONNECT` for a tunnel). Deny wins, then
 * the agent's cap, then allow, then the method; nothing allowed is a refusal.
 */
export function judgeHost(rules: EgressRules, host: string, method: string): Verdict {
  const denied = rules.deny.find((p) => matches(p, host));
  if (denied) return { allowed: false, rule: `deny:${denied}` };
  if (rules.cap && !rules.cap.some((p) => matches(p, host))) {
    return { allowed: false, rule: "max-egress" };
  }
  const allowed = rules.allow.find((p) => matches(p, host));
  if (!allowed) return { allowed: false, rule: "not-allowed" };
  if (rules.methods === "read-only" && !READ_ONLY_METHODS.has(method)) {
    return { allowed: false, rule: `read-only:${method}` };
  }
  return { allowed: true, rule: `allow:${allowed}` };
}

/** An IP address as a number, with its family. */
interface Address {
  v6: boolean;
  value: bigint;
}

function parseV4(s: string): bigint | undefined {
  const parts = s.split(".");
  if (parts.length !== 4) return undefined;
  let value = 0n;
  for (const part of parts) {
    if (!/^(0|[1-9][0-9]{0,2})$/.test(part) || Number(part) > 255) return undefined;
    value = (value << 8n) | BigInt(part);
  }
  return value;
}

function parseV6(s: string): bigint | undefined {
  if (!/^[0-9a-f:.]+$/i.test(s) || s.split("::").length > 2) return undefined;
  let tail = s;
  let v4: bigint | undefined;
  const lastColon = s.lastIndexOf(":");
  if (s.includes(".")) {
    v4 = parseV4(s.slice(lastColon + 1));
    if (v4 === undefined) return undefined;
    tail = `${s.slice(0, lastColon + 1)}0:0`;
  }
  const [head, rest] = tail.includes("::") ? tail.split("::") : [tail, undefined];
  const groups = (g: string) => g === "" ? [] : g.split(":");
  const left = groups(head);
  const right = rest === undefined ? [] : groups(rest);
  const missing = 8 - left.length - right.length;
  if (rest === undefined ? missing !== 0 : missing < 1) return undefined;
  const all = [...left, ...Array(rest === undefined ? 0 : missing).fill("0"), ...right];
  let value = 0n;
  for (const g of all) {
    if (!/^[0-9a-f]{1,4}$/i.test(g)) return undefined;
    value = (value << 16n) | BigInt(parseInt(g, 16));
  }
  return v4 === undefined ? value : (value & ~0xffffffffn) | v4;
}

/** An IPv4 or IPv6 literal, parsed; undefined when `s` is neither. */
export function parseAddress(s: string): Address | undefined {
  const v4 = parseV4(s);
  if (v4 !== undefined) return { v6: false, value: v4 };
  const v6 = s.includes(":") ? parseV6(s) : undefined;
  return v6 === undefined ? undefined : { v6: true, value: v6 };
}

/** A range of addresses. */
export interface Cidr {
  text: string;
  v6: boolean;
  base: bigint;
  bits: number;
}

/** Parses `a.b.c.d/n` or `x::y/n` (a bare address is a /32 or /128); throws when invalid. */
export function parseCidr(text: string): Cidr {
  const [addr, len, extra] = text.trim().split("/");
  const parsed = parseAddress(addr);
  const max = parsed?.v6 ? 128 : 32;
  const bits = len === undefined ? max : Number(len);
  if (!parsed || extra !== undefined || !Number.isInteger(bits) || bits < 0 || bits > max) {
    throw new Error(`"${text}" is not an address range (CIDR)`);
  }
  const shift = BigInt(max - bits);
  return { text: text.trim(), v6: parsed.v6, base: (parsed.value >> shift) << shift, bits };
}

function inCidr(addr: Address, cidr: Cidr): boolean {
  if (addr.v6 !== cidr.v6) return false;
  const shift = BigInt((cidr.v6 ? 128 : 32) - cidr.bits);
  return (addr.value >> shift) === (cidr.base >> shift);
}

/**
 * Ranges never dialled unless allowed explicitly: this host, private networks, link-local
 * (where cloud metadata lives: 169.254.169.254, fd00:ec2::254), shared and benchmark ranges,
 * multicast and reserved space, and the IPv6 forms that embed or translate IPv4.
 */
const FORBIDDEN = [
  "0.0.0.0/8",
  "10.0.0.0/8",
  "100.64.0.0/10",
  "127.0.0.0/8",
  "169.254.0.0/16",
  "172.16.0.0/12",
  "192.0.0.0/24",
  "192.0.2.0/24",
  "192.168.0.0/16",
  "198.18.0.0/15",
  "198.51.100.0/24",
  "203.0.113.0/24",
  "224.0.0.0/4",
  "240.0.0.0/4",
  "::/128",
  "::1/128",
  // IPv4-compatible (deprecated): ::127.0.0.1 embeds loopback.
  "::/96",
  "::ffff:0:0/96",
  "64:ff9b::/96",
  "64:ff9b:1::/48",
  "100::/64",
  "2001:db8::/32",
  // 6to4: 2002:7f00:1:: embeds 127.0.0.1 (a host with a 6to4 tunnel sends it there).
  "2002::/16",
  "fc00::/7",
  "fe80::/10",
  "ff00::/8",
].map(parseCidr);

/**
 * Whether the proxy may dial `address`: refused (with the range that refuses it) when it lies
 * in a forbidden range that no `allowPrivate` range holds. An IPv4-mapped IPv6 address is
 * judged as the IPv4 address it maps.
 */
export function judgeAddress(address: string, allowPrivate: Cidr[]): Verdict {
  let addr = parseAddress(address);
  if (!addr) return { allowed: false, rule: "address:unparsable" };
  if (addr.v6 && addr.value >> 32n === 0xffffn) {
    addr = { v6: false, value: addr.value & 0xffffffffn };
  }
  const exempt = allowPrivate.find((c) => inCidr(addr, c));
  if (exempt) return { allowed: true, rule: `allow-private:${exempt.text}` };
  const forbidden = FORBIDDEN.find((c) => inCidr(addr, c));
  if (forbidden) return { allowed: false, rule: `address:${forbidden.text}` };
  return { allowed: true, rule: "address:public" };
}
