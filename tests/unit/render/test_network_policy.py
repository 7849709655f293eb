"""Network policy objects of a trial, FQDN backend choice and refusals (issue 6).

Golden files under `golden/` hold the objects rendered for one trial using every kind of
policy, once per FQDN backend. After an intended change, regenerate them with

    SHIPYARD_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/render/test_network_policy.py

and review the diff.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from shipyard.api.conventions import LABEL_NETWORK
from shipyard.plan.network import (
    CILIUM_RESOURCE,
    DEFAULT_BLOCKED_CIDRS,
    DEFAULT_DNS_CIDRS,
    GKE_FQDN_RESOURCE,
    NetworkSettingError,
    NetworkSettings,
    UnenforceablePolicy,
    check_enforceable,
    choose_fqdn_backend,
    cidr_of,
    hostname_entries,
    ip_entries,
    policy_key,
    settings_from_env,
)
from shipyard.render.network_policy import (
    build_allow_policy,
    build_cilium_fqdn_policy,
    build_deny_all,
    build_gke_fqdn_policy,
    build_namespace_baseline,
    build_network_objects,
    network_labels,
)
from shipyard.taskformat import NetworkPolicy
from tests.golden import assert_golden

GOLDEN = Path(__file__).parent / "golden"
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
PUBLIC = NetworkPolicy("public")
NO_NETWORK = NetworkPolicy("no-network")
MIXED = NetworkPolicy(
    "allowlist",
    ("example.com", "*.github.com", "10.0.0.0/8", "192.0.2.1", "2001:db8::1", "2001:db8::/32"),
)
IPS_ONLY = NetworkPolicy("allowlist", ("192.0.2.1", "198.51.100.0/24"))
EMPTY_ALLOWLIST = NetworkPolicy("allowlist", ())


def trial(name: str = "net-trial") -> dict[str, Any]:
    return {
        "apiVersion": "shipyard.dev/v1alpha1",
        "kind": "Trial",
        "metadata": {"name": name, "namespace": "ns",
                     "uid": "6c0ffee0-0000-4000-8000-000000000006"},
        "spec": {"taskRef": {"name": "net-task"}},
    }


def check_golden(name: str, objects: list[dict[str, Any]]) -> None:
    path = GOLDEN / name
    text = (
        "# Rendered by tests/unit/render/test_network_policy.py; regenerate with\n"
        "# SHIPYARD_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/render/test_network_policy.py\n"
        + yaml.safe_dump_all(objects, sort_keys=False)
    )
    assert_golden(path, text)


# ---------------------------------------------------------------- golden files


@pytest.mark.parametrize("backend", ["gke", "cilium"])
def test_golden_objects_for_every_kind_of_policy(backend: str) -> None:
    settings = NetworkSettings(fqdn_backend=backend)  # type: ignore[arg-type]
    objects = build_network_objects(
        trial(), [NO_NETWORK, PUBLIC, MIXED, IPS_ONLY, EMPTY_ALLOWLIST, PUBLIC], settings)
    check_golden(f"trial-network-{backend}.yaml", objects)


def test_golden_objects_on_an_ipv4_only_cluster_without_fqdn_backend() -> None:
    settings = NetworkSettings(fqdn_backend="none", ip_families=frozenset({"IPv4"}))
    objects = build_network_objects(trial(), [PUBLIC, IPS_ONLY], settings)
    check_golden("trial-network-ipv4-only.yaml", objects)


# ---------------------------------------------------------------- semantics


def test_deny_all_selects_every_pod_of_the_trial_both_ways() -> None:
    deny = build_deny_all(trial())
    assert deny["spec"] == {"podSelector": {"matchLabels": {"shipyard.dev/trial": "net-trial"}},
                            "policyTypes": ["Ingress", "Egress"]}
    owner = deny["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Trial", "net-trial", True)


def test_the_namespace_baseline_is_what_a_public_trial_would_own() -> None:
    """A trial public throughout owns no policy: the namespace's deny-all for every trial pod
    and its `public` policy do the same, for all of them at once."""
    settings = NetworkSettings(fqdn_backend="none")
    deny, public = build_namespace_baseline("ns", settings)
    assert deny["spec"] == {"podSelector": {"matchExpressions": [
        {"key": "shipyard.dev/trial", "operator": "Exists"}]},
        "policyTypes": ["Ingress", "Egress"]}
    own = build_allow_policy(trial(), PUBLIC, settings)
    assert own is not None
    assert public["spec"]["egress"] == own["spec"]["egress"]
    assert public["spec"]["podSelector"] == {"matchLabels": {LABEL_NETWORK: "public"}}
    for obj in (deny, public):
        assert obj["metadata"]["namespace"] == "ns" and "ownerReferences" not in obj["metadata"]


def test_no_network_has_no_allow_object_so_dns_is_denied_too() -> None:
    assert build_allow_policy(trial(), NO_NETWORK, NetworkSettings()) is None
    objects = build_network_objects(trial(), [NO_NETWORK], NetworkSettings())
    assert [o["metadata"]["name"] for o in objects] == ["net-trial-net-deny"]


def test_public_allows_everything_but_the_metadata_ranges() -> None:
    allow = build_allow_policy(trial(), PUBLIC, NetworkSettings())
    assert allow is not None
    rules = allow["spec"]["egress"]
    peers = rules[0]["to"]
    assert {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.0.0/16"]}} in peers
    assert {"ipBlock": {"cidr": "::/0", "except": ["fd00:ec2::254/128"]}} in peers
    assert {"namespaceSelector": {}} in peers  # NetworkSettings() is the opt-out
    assert "ports" not in rules[0]
    # DNS still works where the resolver lives in the blocked link-local range (NodeLocal
    # DNSCache, GKE Cloud DNS), on port 53 only.
    assert rules[1]["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    assert {"ipBlock": {"cidr": "169.254.169.254/32"}} in rules[1]["to"]


def test_allowlist_allows_dns_to_the_cluster_dns_and_its_ips_as_ip_blocks() -> None:
    allow = build_allow_policy(trial(), IPS_ONLY, NetworkSettings())
    assert allow is not None
    dns, ips = allow["spec"]["egress"]
    assert dns["to"][0] == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
    }
    assert ips == {"to": [{"ipBlock": {"cidr": "192.0.2.1/32"}},
                          {"ipBlock": {"cidr": "198.51.100.0/24"}}],
                   "ports": [{"protocol": "TCP"}]}  # Harbor rejects all non-TCP
    assert allow["spec"]["podSelector"]["matchLabels"] == network_labels(trial(), IPS_ONLY)
    assert allow["spec"]["policyTypes"] == ["Egress"]


def test_empty_allowlist_is_dns_only() -> None:
    allow = build_allow_policy(trial(), EMPTY_ALLOWLIST, NetworkSettings())
    assert allow is not None and len(allow["spec"]["egress"]) == 1


def test_ipv6_rules_are_left_out_on_an_ipv4_only_cluster() -> None:
    settings = NetworkSettings(ip_families=frozenset({"IPv4"}))
    public = build_allow_policy(trial(), PUBLIC, settings)
    assert public is not None
    assert all("::" not in str(peer) for peer in public["spec"]["egress"][0]["to"])
    mixed = build_allow_policy(trial(), NetworkPolicy("allowlist", ("2001:db8::1",)), settings)
    assert mixed is not None and len(mixed["spec"]["egress"]) == 1


def test_gke_fqdn_policy_uses_name_and_pattern() -> None:
    fqdn = build_gke_fqdn_policy(trial(), MIXED)
    assert fqdn is not None
    assert fqdn["apiVersion"] == "networking.gke.io/v1alpha1"
    assert fqdn["kind"] == "FQDNNetworkPolicy"
    assert fqdn["spec"]["egress"] == [{"matches": [{"name": "example.com"},
                                                   {"pattern": "*.github.com"}]}]
    assert fqdn["spec"]["podSelector"]["matchLabels"][LABEL_NETWORK] == policy_key(MIXED)
    assert build_gke_fqdn_policy(trial(), IPS_ONLY) is None


def test_cilium_policy_uses_to_fqdns_with_a_dns_proxy_rule() -> None:
    fqdn = build_cilium_fqdn_policy(trial(), MIXED)
    assert fqdn is not None
    assert (fqdn["apiVersion"], fqdn["kind"]) == ("cilium.io/v2", "CiliumNetworkPolicy")
    dns, names = fqdn["spec"]["egress"]
    assert dns["toPorts"][0]["rules"] == {"dns": [{"matchPattern": "*"}]}
    assert names == {"toFQDNs": [{"matchName": "example.com"},
                                 {"matchPattern": "*.github.com"}]}
    assert fqdn["spec"]["endpointSelector"]["matchLabels"] == network_labels(trial(), MIXED)


def test_objects_are_deduplicated_per_policy() -> None:
    reordered = NetworkPolicy("allowlist", IPS_ONLY.allowed_hosts[::-1])
    objects = build_network_objects(trial(), [PUBLIC, PUBLIC, IPS_ONLY, reordered],
                                    NetworkSettings())
    assert len(objects) == 3
    names = [o["metadata"]["name"] for o in objects]
    assert len(set(names)) == 3


def test_hostnames_without_backend_are_never_dropped_silently() -> None:
    with pytest.raises(ValueError, match="the plan must refuse it"):
        build_network_objects(trial(), [MIXED], NetworkSettings(fqdn_backend="none"))


def test_names_and_label_values_are_valid_for_long_trial_names() -> None:
    long = trial("a" * 63)
    for obj in build_network_objects(long, [PUBLIC, MIXED], NetworkSettings(fqdn_backend="gke")):
        assert len(obj["metadata"]["name"]) <= 63
    for policy in (PUBLIC, NO_NETWORK, MIXED, EMPTY_ALLOWLIST):
        assert LABEL_VALUE.match(policy_key(policy)) and len(policy_key(policy)) <= 63


# ---------------------------------------------------------------- keys, entries


def test_policy_keys() -> None:
    assert policy_key(PUBLIC) == "public"
    assert policy_key(NO_NETWORK) == "no-network"
    assert policy_key(IPS_ONLY).startswith("allowlist-")
    reordered = NetworkPolicy("allowlist", ("198.51.100.0/24", "192.0.2.1", "192.0.2.1"))
    assert policy_key(reordered) == policy_key(IPS_ONLY)
    assert policy_key(MIXED) != policy_key(IPS_ONLY)


def test_entries_split_into_hostnames_and_ips() -> None:
    assert hostname_entries(MIXED) == ["example.com", "*.github.com"]
    assert ip_entries(MIXED) == ["10.0.0.0/8", "192.0.2.1", "2001:db8::1", "2001:db8::/32"]
    assert [cidr_of(e) for e in ip_entries(MIXED)] == [
        "10.0.0.0/8", "192.0.2.1/32", "2001:db8::1/128", "2001:db8::/32"]


# ---------------------------------------------------------------- backend choice, refusals


@pytest.mark.parametrize(("setting", "discovered", "expected"), [
    (None, set(), "none"),
    ("auto", {GKE_FQDN_RESOURCE, CILIUM_RESOURCE}, "gke"),
    ("auto", {CILIUM_RESOURCE}, "cilium"),
    ("AUTO", {"networking.gke.io/v1/networks"}, "none"),
    ("gke", set(), "gke"),
    ("cilium", set(), "cilium"),
    ("none", {GKE_FQDN_RESOURCE}, "none"),
])
def test_fqdn_backend_choice(setting: str | None, discovered: set[str], expected: str) -> None:
    assert choose_fqdn_backend(setting, discovered) == expected


def test_unknown_backend_setting_is_an_error() -> None:
    with pytest.raises(NetworkSettingError, match="SHIPYARD_FQDN_BACKEND='calico'"):
        choose_fqdn_backend("calico", set())


def test_hostname_allowlist_without_backend_is_refused_naming_the_entries() -> None:
    phases = {"environment baseline": PUBLIC, "agent phase": MIXED,
              "verifier phase": NetworkPolicy("allowlist", ("pypi.org", "192.0.2.1"))}
    with pytest.raises(UnenforceablePolicy) as caught:
        check_enforceable(phases, "none")
    assert caught.value.entries == ["example.com", "*.github.com", "pypi.org"]
    message = caught.value.message
    assert "agent phase: example.com, *.github.com" in message
    assert "verifier phase: pypi.org" in message
    assert "192.0.2.1" not in message
    check_enforceable(phases, "gke")
    check_enforceable(phases, "cilium")
    check_enforceable({"agent phase": IPS_ONLY, "x": NO_NETWORK}, "none")


def test_settings_from_env() -> None:
    default = settings_from_env({})
    assert default == NetworkSettings("none", DEFAULT_BLOCKED_CIDRS, DEFAULT_DNS_CIDRS,
                                      frozenset({"IPv4", "IPv6"}), block_cluster=True)
    s = settings_from_env(
        {"SHIPYARD_FQDN_BACKEND": "auto", "SHIPYARD_BLOCKED_EGRESS_CIDRS": "",
         "SHIPYARD_DNS_EGRESS_CIDRS": "10.0.0.10/32, fd00::a/128"},
        discovered={CILIUM_RESOURCE}, node_families={"IPv4"})
    assert s == NetworkSettings("cilium", (), ("10.0.0.10/32", "fd00::a/128"),
                                frozenset({"IPv4"}), block_cluster=True, never_cidrs=())
    assert settings_from_env({"SHIPYARD_IP_FAMILIES": "ipv6"}).ip_families == {"IPv6"}
    with pytest.raises(NetworkSettingError, match="SHIPYARD_IP_FAMILIES"):
        settings_from_env({"SHIPYARD_IP_FAMILIES": "ipx"})
    with pytest.raises(NetworkSettingError, match="not a CIDR"):
        settings_from_env({"SHIPYARD_BLOCKED_EGRESS_CIDRS": "10.0.0.1/8"})


def test_public_kept_out_of_the_cluster_reaches_pods_of_its_own_namespace_only() -> None:
    settings = NetworkSettings(blocked_cidrs=("169.254.0.0/16", "10.88.0.0/16", "10.96.0.0/12",
                                              "192.0.2.2/32"), ip_families=frozenset({"IPv4"}),
                               block_cluster=True)
    allow = build_allow_policy(trial(), PUBLIC, settings)
    assert allow is not None
    peers = allow["spec"]["egress"][0]["to"]
    assert peers == [
        {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.0.0/16", "10.88.0.0/16",
                                                     "10.96.0.0/12", "192.0.2.2/32"]}},
        {"podSelector": {}},  # the trial's namespace; no namespaceSelector: no other one
    ]


def test_an_allowlist_cannot_open_the_metadata_servers_or_the_apiserver() -> None:
    from shipyard.plan.network import UnenforceablePolicy, check_never_reached

    settings = settings_from_env({}, apiserver={"10.96.0.1", "10.88.0.1"})
    never = settings.never_cidrs
    for entry in ("169.254.169.254", "10.96.0.1", "169.254.0.0/24"):
        with pytest.raises(UnenforceablePolicy) as e:
            check_never_reached({"agent phase": NetworkPolicy("allowlist", (entry,))}, never)
        assert e.value.entries == [entry] and "agent phase" in e.value.message
    # A range that only contains them is kept, less them.
    wide = NetworkPolicy("allowlist", ("0.0.0.0/0", "10.88.0.7"))
    check_never_reached({"agent phase": wide}, never)
    allow = build_allow_policy(trial(), wide, settings)
    assert allow is not None
    blocks = [p["ipBlock"] for p in allow["spec"]["egress"][-1]["to"]]
    assert blocks[0] == {"cidr": "0.0.0.0/0",
                         "except": ["169.254.0.0/16", "10.88.0.1/32", "10.96.0.1/32"]}
    assert blocks[1] == {"cidr": "10.88.0.7/32"}  # a pod (a model server) may be named
