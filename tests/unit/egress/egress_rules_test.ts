/**
 * The egress rules without a network: host patterns, deny over allow, read-only methods, the
 * addresses never dialled, CIDR parsing, the hosts file, and widening by hosts.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  canonicalHost,
  judgeAddress,
  judgeHost,
  matches,
  parseCidr,
  patternProblem,
  patternWithin,
} from "../../../src/egress/rules.ts";
import { parseHosts } from "../../../src/egress/resolver.ts";
import { loadProfiles, withEgressDefaults } from "../../../src/sandbox/policy/profiles.ts";
import { canonical, describe, isEmpty, widen } from "../../../src/sandbox/policy/widening.ts";
import { widening } from "../../../src/service/supervisor.ts";

const PROFILE_DIR = new URL("../../../sandbox-profiles", import.meta.url).pathname;

Deno.test("host patterns: exact names, and *.domain with its apex", () => {
  assert.equal(matches("example.org", "example.org"), true);
  assert.equal(matches("example.org", "www.example.org"), false);
  assert.equal(matches("*.example.org", "example.org"), true);
  assert.equal(matches("*.example.org", "a.b.example.org"), true);
  assert.equal(matches("*.example.org", "badexample.org"), false);
  assert.equal(matches("*.example.org", "example.org.evil.com"), false);
  assert.equal(canonicalHost("WWW.Example.ORG."), "www.example.org");
  assert.equal(canonicalHost("[::1]"), "::1");
  assert.equal(canonicalHost("a b"), undefined);
  assert.equal(patternProblem("*.example.org"), undefined);
  assert.match(patternProblem("*.*.org")!, /not a host pattern/);
  assert.match(patternProblem("Example.org")!, /not a host pattern/);
  assert.equal(patternWithin("api.example.org", ["*.example.org"]), true);
  assert.equal(patternWithin("*.api.example.org", ["*.example.org"]), true);
  assert.equal(patternWithin("*.example.org", ["api.example.org"]), false);
  assert.equal(patternWithin("example.com", ["*.example.org"]), false);
});

Deno.test("deny wins, an empty allow list allows nothing, read-only limits methods", () => {
  const rules = { allow: ["*.example.org"], deny: ["secret.example.org"], methods: "all" as const };
  assert.deepEqual(judgeHost(rules, "api.example.org", "POST"), {
    allowed: true,
    rule: "allow:*.example.org",
  });
  assert.deepEqual(judgeHost(rules, "secret.example.org", "GET"), {
    allowed: false,
    rule: "deny:secret.example.org",
  });
  assert.deepEqual(judgeHost(rules, "example.com", "GET"), { allowed: false, rule: "not-allowed" });
  assert.deepEqual(judgeHost({ ...rules, allow: [] }, "api.example.org", "GET"), {
    allowed: false,
    rule: "not-allowed",
  });
  const ro = { ...rules, methods: "read-only" as const };
  for (const method of ["GET", "HEAD", "OPTIONS"]) {
    assert.equal(judgeHost(ro, "api.example.org", method).allowed, true, method);
  }
  assert.deepEqual(judgeHost(ro, "api.example.org", "POST"), {
    allowed: false,
    rule: "read-only:POST",
  });
  assert.deepEqual(judgeHost(ro, "api.example.org", "CONNECT"), {
    allowed: false,
    rule: "read-only:CONNECT",
  });
});

Deno.test("loopback, private, link-local, metadata and multicast addresses are never dialled", () => {
  const refused = {
    "127.0.0.1": "127.0.0.0/8",
    "10.1.2.3": "10.0.0.0/8",
    "172.31.0.1": "172.16.0.0/12",
    "192.168.1.1": "192.168.0.0/16",
    "169.254.169.254": "169.254.0.0/16",
    "100.100.100.200": "100.64.0.0/10",
    "0.0.0.0": "0.0.0.0/8",
    "224.0.0.1": "224.0.0.0/4",
    "::1": "::1/128",
    "::": "::/128",
    "fd00:ec2::254": "fc00::/7",
    "fe80::1": "fe80::/10",
    "ff02::1": "ff00::/8",
    // IPv4-mapped: judged as the IPv4 address.
    "::ffff:127.0.0.1": "127.0.0.0/8",
    "::ffff:a9fe:a9fe": "169.254.0.0/16",
    "64:ff9b::a9fe:a9fe": "64:ff9b::/96",
    // IPv4-compatible and 6to4: they embed IPv4 too.
    "::127.0.0.1": "::/96",
    "::a9fe:a9fe": "::/96",
    "2002:7f00:1::1": "2002::/16",
  };
  for (const [address, range] of Object.entries(refused)) {
    assert.deepEqual(
      judgeAddress(address, []),
      { allowed: false, rule: `address:${range}` },
      address,
    );
  }
  for (const address of ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c", "8.8.8.8"]) {
    assert.deepEqual(judgeAddress(address, []), { allowed: true, rule: "address:public" }, address);
  }
  const exempt = [parseCidr("127.0.0.1/32"), parseCidr("fd00::/8")];
  assert.deepEqual(judgeAddress("127.0.0.1", exempt), {
    allowed: true,
    rule: "allow-private:127.0.0.1/32",
  });
  assert.equal(judgeAddress("127.0.0.2", exempt).allowed, false);
  assert.equal(judgeAddress("fd00::1", exempt).allowed, true);
  assert.equal(judgeAddress("not-an-address", []).allowed, false);
});

Deno.test("CIDRs parse strictly", () => {
  assert.deepEqual(parseCidr("10.1.2.3/8"), {
    text: "10.1.2.3/8",
    v6: false,
    base: 0x0a000000n,
    bits: 8,
  });
  assert.equal(parseCidr("::1").bits, 128);
  for (const bad of ["10.0.0.0/33", "10.0.0/8", "1.2.3.4/8/1", "::g/64", "01.2.3.4", "x"]) {
    assert.throws(() => parseCidr(bad), /not an address range/, bad);
  }
});

Deno.test("the hosts file: /etc/hosts form, comments, several names, canonical", () => {
  const hosts = parseHosts(
    "# comment\n127.0.0.1 a.test B.test.  # trailing\n\n::1 a.test\nbogus c.test\n10.0.0.1\n",
  );
  assert.deepEqual([...hosts], [["a.test", ["127.0.0.1", "::1"]], ["b.test", ["127.0.0.1"]]]);
});

Deno.test("widening by hosts: added to an egress profile's allow list, shown, proposed", () => {
  const profiles = withEgressDefaults(loadProfiles(PROFILE_DIR), {
    allow: ["a.test"],
    deny: ["b.test"],
  });
  const lookup = (name: string) => profiles.get(name)!;
  const base = lookup("workspace-write-egress");
  const widened = widen(base, { hosts: ["c.test"] }, lookup, "full-access");
  assert.deepEqual(widened.egress, {
    allow: ["a.test", "c.test"],
    deny: ["b.test"],
    methods: "all",
  });
  assert.equal(widened.network, "loopback");
  // Ports on any host leave the proxy behind: the network is then "all", without egress rules.
  const ported = widen(base, { tcp_ports: [443] }, lookup, "full-access");
  assert.equal(ported.egress, undefined);
  assert.equal(ported.network, "all");
  assert.deepEqual(canonical({ hosts: ["z.test", "c.test", "z.test"] }), {
    hosts: ["c.test", "z.test"],
  });
  assert.equal(isEmpty({ hosts: ["c.test"] }), false);
  assert.equal(
    describe("workspace-write-egress", { hosts: ["c.test"] }),
    "sandboxed under workspace-write-egress, plus HTTP(S) through the egress proxy to c.test " +
      "(for this command only)",
  );
  const at = { command: "curl http://c.test:8080/", workdir: "/tmp", egress: true };
  const refused = (rule: string) => ({
    kind: "network" as const,
    host: "c.test",
    port: 8080,
    rule,
    evidence: "egress proxy refused c.test:8080",
  });
  assert.deepEqual(widening(refused("not-allowed"), at), { hosts: ["c.test"] });
  // No host approval lifts a deny rule or a private address: nothing narrower than no sandbox.
  assert.deepEqual(widening(refused("deny:c.test"), at), { unsandboxed: true });
  assert.deepEqual(widening(refused("address:10.0.0.0/8"), at), { unsandboxed: true });
});
