"""Pure builders for the network policy objects a trial owns (see `shipyard.plan.network`).

* `<trial>-net-deny`: a NetworkPolicy selecting every pod of the trial, denying all ingress
  and egress. It is what holds under `no-network` (DNS included).
* `<trial>-net-<key>`: per distinct policy the trial uses, a NetworkPolicy selecting the trial's
  pods whose `shipyard.dev/network` label is `<key>`:
  - `public`: egress anywhere except the blocked ranges (the metadata servers, and by default
    every address of the cluster itself: the apiserver's, the nodes', the pod and Service
    CIDRs), to the pods of the trial's own namespace, plus DNS;
  - `allowlist-…`: DNS to the cluster DNS, plus TCP to the IP and CIDR entries as `ipBlock`s
    (Harbor's egress control rejects every other protocol under a restricted mode).
* `<trial>-fqdn-<key>`: for an allowlist with hostname or `*.` wildcard entries, a GKE
  `FQDNNetworkPolicy` or a Cilium `CiliumNetworkPolicy` with `toFQDNs`, selecting the same pods.

Allow rules add up across objects (NetworkPolicy semantics), so switching a pod's label between
keys switches its egress; the deny-all stays in force throughout.

A trial that is `public` in every phase needs nothing of its own: the namespace's baseline
(`build_namespace_baseline`, created once per namespace) denies all traffic to and from every
trial pod and lets pods labelled `public` out, as `<trial>-net-public` would.
"""

from __future__ import annotations

from typing import Any

from shipyard.api.conventions import (
    BASELINE_DENY_POLICY,
    BASELINE_PUBLIC_POLICY,
    LABEL_COMPONENT,
    LABEL_NETWORK,
    LABEL_TRIAL,
    MANAGED_BY,
    Component,
    allow_policy_name,
    deny_all_policy_name,
    fqdn_policy_name,
    trial_selector,
)
from shipyard.plan.network import (
    ModelPeer,
    NetworkSettings,
    cidr_of,
    hostname_entries,
    ip_entries,
    never_excepts,
    policy_key,
)
from shipyard.render.pod import owner_reference, trial_labels
from shipyard.taskformat import NetworkPolicy

GKE_FQDN_API_VERSION = "networking.gke.io/v1alpha1"
CILIUM_API_VERSION = "cilium.io/v2"
CLUSTER_DNS_PODS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}
DNS_PORTS = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
ANYWHERE = {"IPv4": "0.0.0.0/0", "IPv6": "::/0"}


def network_labels(trial: dict[str, Any], policy: NetworkPolicy,
                   key: str | None = None) -> dict[str, str]:
    """The pod labels that put a trial pod under `policy` (or under its variant `key`; the
    pod's own labels carry the same trial selector: `shipyard.api.conventions.trial_selector`)."""
    return {**trial_selector(trial["metadata"]["name"]), LABEL_NETWORK: key or policy_key(policy)}


def deny_all_name(trial: dict[str, Any]) -> str:
    return deny_all_policy_name(trial["metadata"]["name"])


def allow_name(trial: dict[str, Any], policy: NetworkPolicy, key: str | None = None) -> str:
    return allow_policy_name(trial["metadata"]["name"], key or policy_key(policy))


def fqdn_name(trial: dict[str, Any], policy: NetworkPolicy, key: str | None = None) -> str:
    return fqdn_policy_name(trial["metadata"]["name"], key or policy_key(policy))


def _metadata(trial: dict[str, Any], name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": trial["metadata"]["namespace"],
        "labels": trial_labels(trial, Component.NETWORK_POLICY),
        "ownerReferences": [owner_reference(trial)],
    }


def build_namespace_baseline(namespace: str, settings: NetworkSettings) -> list[dict[str, Any]]:
    """The namespace's two shared policies: deny-all for every trial pod, and the `public`
    policy for trial pods labelled public (no owner: they serve every trial of the namespace)."""
    def meta(name: str) -> dict[str, Any]:
        return {"name": name, "namespace": namespace,
                "labels": {**MANAGED_BY, LABEL_COMPONENT: Component.NETWORK_BASELINE}}

    public = NetworkPolicy("public")
    return [
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": meta(BASELINE_DENY_POLICY),
         "spec": {"podSelector": {"matchExpressions": [{"key": LABEL_TRIAL,
                                                        "operator": "Exists"}]},
                  "policyTypes": ["Ingress", "Egress"]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": meta(BASELINE_PUBLIC_POLICY),
         "spec": {"podSelector": {"matchLabels": {LABEL_NETWORK: policy_key(public)}},
                  "policyTypes": ["Egress"], "egress": _allow_egress(public, settings)}},
    ]


def build_deny_all(trial: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(trial, deny_all_name(trial)),
        "spec": {
            "podSelector": {"matchLabels": trial_selector(trial["metadata"]["name"])},
            "policyTypes": ["Ingress", "Egress"],
        },
    }


def _dns_rule(settings: NetworkSettings) -> dict[str, Any]:
    peers: list[dict[str, Any]] = [CLUSTER_DNS_PODS]
    peers += [{"ipBlock": {"cidr": c}} for c in settings.dns_cidrs if settings.keeps(c)]
    return {"to": peers, "ports": DNS_PORTS}


def _public_rule(settings: NetworkSettings) -> dict[str, Any]:
    peers: list[dict[str, Any]] = []
    for family, anywhere in ANYWHERE.items():
        if family not in settings.ip_families:
            continue
        block: dict[str, Any] = {"cidr": anywhere}
        excepted = [c for c in settings.blocked_cidrs if (":" in c) == (family == "IPv6")]
        if excepted:
            block["except"] = excepted
        peers.append({"ipBlock": block})
    if settings.block_cluster:
        # The cluster's ranges are excepted above; pods of the trial's own namespace (a model
        # server, a test fixture) stay reachable by selector. Trial pods take no ingress.
        peers.append({"podSelector": {}})
    else:
        peers.append({"namespaceSelector": {}})  # every pod, wherever the CNI treats pod IPs
    return {"to": peers}


def model_rule(trial: dict[str, Any], peer: ModelPeer) -> dict[str, Any]:
    """Egress to in-cluster model server pods, by selector (works after kube-proxy's DNAT of
    their Service address, which `ipBlock`s would not match)."""
    namespace = peer.namespace or trial["metadata"]["namespace"]
    rule: dict[str, Any] = {"to": [{
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "podSelector": {"matchLabels": dict(peer.pod_selector)},
    }]}
    rule["ports"] = [{"protocol": "TCP", **({"port": peer.port} if peer.port else {})}]
    return rule


def build_allow_policy(
    trial: dict[str, Any], policy: NetworkPolicy, settings: NetworkSettings,
    key: str | None = None, model: ModelPeer | None = None,
) -> dict[str, Any] | None:
    """The NetworkPolicy that lets pods under `policy` out; None for `no-network`. With
    `model`, the variant `key` of the policy that also reaches the model server pods."""
    if model is not None and key is not None:
        egress = [model_rule(trial, model)]
        if policy.mode != "no-network":
            egress = _allow_egress(policy, settings) + egress
        return _allow_object(trial, policy, key, egress)
    if policy.mode == "no-network":
        return None
    return _allow_object(trial, policy, None, _allow_egress(policy, settings))


def _allow_egress(policy: NetworkPolicy, settings: NetworkSettings) -> list[dict[str, Any]]:
    egress = [_dns_rule(settings)]
    if policy.mode == "public":
        egress.insert(0, _public_rule(settings))
    else:
        blocks = [cidr_of(e) for e in ip_entries(policy)]
        blocks = [c for c in blocks if settings.keeps(c)]
        if blocks:  # TCP only: Harbor's egress control rejects all non-TCP (UDP, QUIC)
            egress.append({"to": [_ip_block(c, settings) for c in blocks],
                           "ports": [{"protocol": "TCP"}]})
    return egress


def _ip_block(cidr: str, settings: NetworkSettings) -> dict[str, Any]:
    """An allowlist's range, less the never-reached ranges inside it (the plan refuses an entry
    that lies wholly inside one: `check_never_reached`)."""
    block: dict[str, Any] = {"cidr": cidr}
    excepted = [c for c in never_excepts(cidr, settings.never_cidrs) if settings.keeps(c)]
    if excepted:
        block["except"] = excepted
    return {"ipBlock": block}


def _allow_object(trial: dict[str, Any], policy: NetworkPolicy, key: str | None,
                  egress: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(trial, allow_name(trial, policy, key)),
        "spec": {
            "podSelector": {"matchLabels": network_labels(trial, policy, key)},
            "policyTypes": ["Egress"],
            "egress": egress,
        },
    }


def build_gke_fqdn_policy(trial: dict[str, Any], policy: NetworkPolicy,
                          key: str | None = None) -> dict[str, Any] | None:
    """GKE Dataplane V2's `FQDNNetworkPolicy` for the hostname entries (None when there are
    none). A `*.` wildcard becomes a `pattern`; GKE matches it one label deep."""
    hosts = hostname_entries(policy)
    if not hosts:
        return None
    matches = [{"pattern": h} if h.startswith("*.") else {"name": h} for h in hosts]
    return {
        "apiVersion": GKE_FQDN_API_VERSION,
        "kind": "FQDNNetworkPolicy",
        "metadata": _metadata(trial, fqdn_name(trial, policy, key)),
        "spec": {
            "podSelector": {"matchLabels": network_labels(trial, policy, key)},
            "egress": [{"matches": matches}],
        },
    }


def build_cilium_fqdn_policy(
    trial: dict[str, Any], policy: NetworkPolicy, key: str | None = None
) -> dict[str, Any] | None:
    """A `CiliumNetworkPolicy` with `toFQDNs` for the hostname entries (None when there are
    none). Cilium learns the addresses from DNS answers, so DNS to the cluster DNS goes through
    its DNS proxy (the `rules.dns` part); every name may still be resolved, as under Harbor."""
    hosts = hostname_entries(policy)
    if not hosts:
        return None
    fqdns = [{"matchPattern": h} if h.startswith("*.") else {"matchName": h} for h in hosts]
    return {
        "apiVersion": CILIUM_API_VERSION,
        "kind": "CiliumNetworkPolicy",
        "metadata": _metadata(trial, fqdn_name(trial, policy, key)),
        "spec": {
            "endpointSelector": {"matchLabels": network_labels(trial, policy, key)},
            "egress": [
                {
                    "toEndpoints": [
                        {
                            "matchLabels": {
                                "k8s:io.kubernetes.pod.namespace": "kube-system",
                                "k8s:k8s-app": "kube-dns",
                            }
                        }
                    ],
                    "toPorts": [
                        {
                            "ports": [{"port": "53", "protocol": "ANY"}],
                            "rules": {"dns": [{"matchPattern": "*"}]},
                        }
                    ],
                },
                {"toFQDNs": fqdns},
            ],
        },
    }


def build_network_objects(
    trial: dict[str, Any], policies: list[NetworkPolicy], settings: NetworkSettings,
    model_policies: dict[str, NetworkPolicy] | None = None, model: ModelPeer | None = None,
) -> list[dict[str, Any]]:
    """Every network object of a trial using `policies`: deny-all first, then per distinct
    policy its allow NetworkPolicy and, for hostnames, the backend's FQDN object.

    Hostname entries with no backend must have been refused by the plan
    (`shipyard.plan.network.check_enforceable`); they are never silently dropped here.
    """
    objects = [build_deny_all(trial)]
    seen: set[str] = set()
    keyed: list[tuple[NetworkPolicy, str | None]] = [(p, None) for p in policies]
    if model is not None:
        keyed += [(p, k) for k, p in (model_policies or {}).items()]
    for policy, variant in keyed:
        key = variant or policy_key(policy)
        if key in seen:
            continue
        seen.add(key)
        allow = build_allow_policy(trial, policy, settings, variant,
                                   model if variant else None)
        if allow is not None:
            objects.append(allow)
        if policy.mode != "allowlist" or not hostname_entries(policy):
            continue
        if settings.fqdn_backend == "gke":
            fqdn = build_gke_fqdn_policy(trial, policy, variant)
        elif settings.fqdn_backend == "cilium":
            fqdn = build_cilium_fqdn_policy(trial, policy, variant)
        else:
            raise ValueError(
                f"allowlist {key} has hostname entries and there is no FQDN backend: "
                "the plan must refuse it"
            )
        if fqdn is not None:
            objects.append(fqdn)
    return objects
