// deploy/k8s renders with `kubectl kustomize` (issue 33) into what docs/fleet.md describes: one
// uexec pod per host with the stated capabilities and no more, the store and operator token from
// Secrets shared by every node, and an ingress-nginx Ingress hashing on the Authorization header
// like deploy/nginx/uexec.conf.

import assert from "node:assert/strict";
import { parseAllDocuments } from "yaml";

const ROOT = new URL("../../..", import.meta.url).pathname;

async function kubectl(): Promise<string | undefined> {
  try {
    const out = await new Deno.Command("kubectl", { args: ["version", "--client"] }).output();
    return out.success ? "kubectl" : undefined;
  } catch {
    return undefined;
  }
}

const found = await kubectl();

// deno-lint-ignore no-explicit-any
type Doc = Record<string, any>;

/** The rendered documents (kubectl prints YAML; `-o json` is not a kustomize flag). */
async function render(): Promise<Doc[]> {
  const out = await new Deno.Command("kubectl", {
    args: ["kustomize", `${ROOT}deploy/k8s`],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  const yaml = new TextDecoder().decode(out.stdout);
  // kubectl's JSON output needs a cluster's API discovery; npm's yaml parses the render here.
  return parseAllDocuments(yaml).map((d) => d.toJSON() as Doc);
}

Deno.test({
  name: "deploy/k8s renders: one pod per host, minimal stated capabilities, hashing ingress",
  ignore: found === undefined,
  async fn() {
    const docs = await render();
    const kinds = docs.map((d) => `${d.kind}/${d.metadata.name}`).sort();
    assert.deepEqual(kinds, [
      "Ingress/uexec",
      "Namespace/uexec",
      "Secret/uexec-operator",
      "Secret/uexec-store",
      "Service/uexec",
      "Service/uexec-nodes",
      "Service/uexec-postgres",
      "StatefulSet/uexec",
    ]);
    for (const doc of docs.filter((d) => d.kind !== "Namespace")) {
      assert.equal(doc.metadata.namespace, "uexec", `${doc.kind}/${doc.metadata.name}`);
    }
    const set = docs.find((d) => d.kind === "StatefulSet")!;
    const pod = set.spec.template.spec;
    assert.equal(set.spec.serviceName, "uexec-nodes");
    const anti = pod.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution;
    assert.equal(anti[0].topologyKey, "kubernetes.io/hostname");
    assert.equal(pod.hostNetwork, undefined);
    assert.equal(pod.hostPID, undefined);
    assert.equal(pod.automountServiceAccountToken, false);
    const [container] = pod.containers;
    const security = container.securityContext;
    assert.equal(security.privileged, false);
    assert.deepEqual(security.capabilities.drop, ["ALL"]);
    assert.deepEqual([...security.capabilities.add].sort(), [
      "CHOWN",
      "DAC_OVERRIDE",
      "FOWNER",
      "KILL",
      "NET_ADMIN",
      "SETGID",
      "SETUID",
      "SYS_ADMIN",
      "SYS_RESOURCE",
    ]);
    assert.equal(security.seccompProfile.type, "RuntimeDefault");
    const env = new Map<string, Doc>(container.env.map((e: Doc) => [e.name, e]));
    assert.equal(env.get("UEXEC_NODE_ID")!.value, "$(POD_NAME)");
    assert.equal(
      env.get("UEXEC_NODE_URL")!.value,
      "http://$(POD_NAME).uexec-nodes.uexec.svc.cluster.local:8787",
    );
    // One operator token and one store for every node, from Secrets, never inline.
    assert.deepEqual(env.get("UEXEC_OPERATOR_TOKEN")!.valueFrom.secretKeyRef, {
      name: "uexec-operator",
      key: "token",
    });
    assert.deepEqual(env.get("UEXEC_STORE")!.valueFrom.secretKeyRef, {
      name: "uexec-store",
      key: "url",
    });
    assert.equal(env.get("UEXEC_CONTAINMENT")!.value, "cgroup");
    const probe = container.readinessProbe.httpGet;
    assert.equal(probe.path, "/healthz");
    assert.deepEqual(probe.httpHeaders, [{ name: "Host", value: "localhost" }]);
    // The headless Service names each pod for forwarding.
    const nodes = docs.find((d) => d.kind === "Service" && d.metadata.name === "uexec-nodes")!;
    assert.equal(nodes.spec.clusterIP, "None");
    // The ingress hashes on the credential, like the shipped nginx configuration.
    const ingress = docs.find((d) => d.kind === "Ingress")!;
    const notes = ingress.metadata.annotations;
    assert.equal(notes["nginx.ingress.kubernetes.io/upstream-hash-by"], "$http_authorization");
    assert.equal(notes["nginx.ingress.kubernetes.io/proxy-buffering"], "off");
    assert.equal(notes["nginx.ingress.kubernetes.io/proxy-next-upstream"], "error timeout");
    const conf = await Deno.readTextFile(`${ROOT}deploy/nginx/uexec.conf`);
    assert.match(conf, /^\s*hash \$http_authorization consistent;$/m);
    assert.equal(ingress.spec.rules[0].http.paths[0].backend.service.name, "uexec");
  },
});

if (found === undefined) {
  console.warn("fleet_k8s_test: kubectl is not installed; the render of deploy/k8s is not checked");
}
