"""The local cluster's build network and buildkitd's mutual TLS (hack/localcluster; issue 22)."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "hack" / "localcluster"))

import buildnet  # noqa: E402
import imagebuilds  # noqa: E402
import operator_defaults  # noqa: E402
import webstandins  # noqa: E402
from layout import POD_CIDR, SERVICE_CIDR, Layout  # noqa: E402


def test_build_steps_are_dropped_towards_the_host_and_the_clusters_ranges():
    accept, *drops = buildnet.rules()
    # First, the stand-in for astral.sh on the host (webstandins.py), on 443 only.
    assert accept[:8] == ["-d", f"{webstandins.ADDRESS}/32", "-p", "tcp", "-m", "tcp",
                          "--dport", "443"] and accept[-2:] == ["-j", "ACCEPT"]
    assert all(r[-2:] == ["-j", "DROP"] for r in drops)
    assert drops[0][:4] == ["-m", "addrtype", "--dst-type", "LOCAL"]  # etcd, apiserver, ...
    targets = {r[1] for r in drops[1:]}
    # ... and another build's container (routed or, through br_netfilter, bridged).
    assert targets == {POD_CIDR, SERVICE_CIDR, "169.254.0.0/16", buildnet.BUILD_CIDR}
    assert buildnet.BUILD_CIDR not in (POD_CIDR, SERVICE_CIDR)
    # As `iptables -S` prints them, so that `apply` changes nothing on an up-to-date chain.
    assert all(" " not in arg for r in [accept, *drops] for arg in r)


def test_builds_name_the_stand_in_through_the_operators_extra_hosts():
    hosts = operator_defaults.DEFAULTS["SHIPYARD_BUILD_ADD_HOSTS"]
    assert hosts == f"astral.sh={webstandins.ADDRESS}"


def test_buildkitd_runs_steps_on_the_build_bridge_and_takes_only_tls_clients(tmp_path):
    layout = Layout(cache=tmp_path / "cache", state=tmp_path / "state", run=tmp_path / "run")
    (tmp_path / "state").mkdir()
    config = buildnet.cni_config(layout)
    (plugin,) = config["plugins"]
    assert plugin["bridge"] == buildnet.BUILD_BRIDGE and plugin["ipMasq"] is True
    assert plugin["ipam"]["ranges"] == [[{"subnet": buildnet.BUILD_CIDR}]]
    # Not where the kubelet's CNI reads its configuration.
    assert layout.cni_conf not in buildnet.cni_config_path(layout).parents
    text = imagebuilds._buildkitd_config_text(layout)
    toml = tomllib.loads(text)
    assert toml["worker"]["oci"]["networkMode"] == "cni"
    assert toml["worker"]["oci"]["cniConfigPath"] == str(buildnet.cni_config_path(layout))
    assert set(toml["grpc"]["tls"]) == {"cert", "key", "ca"}
    assert "tcp://127.0.0.1:1234" in toml["grpc"]["address"]
    args = imagebuilds.tcp_client_args(layout)
    assert args[:2] == ["--addr", imagebuilds.BUILDKIT_ADDR] and "--tlskey" in args


def test_buildkitds_own_fetches_reach_the_registry_and_resolvers_but_nothing_else_internal():
    ruleset = buildnet.nft_ruleset("unified/shipyard-buildkitd", ["10.255.255.53", "fd00::53"])
    egress = ruleset.split("chain buildkitd-egress {", 1)[1].split("}\n", 1)[0]
    lines = [line.strip() for line in egress.splitlines() if line.strip()]
    # Only buildkitd's cgroup, before DNAT (a Service IP is seen as written).
    assert 'socket cgroupv2 level 1 "unified/shipyard-buildkitd" jump buildkitd-egress' in ruleset
    assert "hook output priority mangle" in ruleset
    # Allowed first: replies, the registry (exactly its address and port), DNS to the resolvers.
    assert lines[0] == "ct state established,related return"
    assert lines[1] == "ip daddr 127.0.0.1 tcp dport 5055 return"
    assert "10.255.255.53" in lines[2] and "th dport 53 return" in lines[2]
    assert "fd00::53" in lines[3] and "th dport 53 return" in lines[3]
    # Then refused at once: the host's every address, the cluster's ranges, the builds' bridge,
    # link-local (metadata) and loopback, IPv6 too.
    refused = [line for line in lines if line.endswith("reject with icmpx host-unreachable")]
    assert refused[0].startswith("fib daddr type local")
    for cidr in (POD_CIDR, SERVICE_CIDR, buildnet.BUILD_CIDR, "169.254.0.0/16", "127.0.0.0/8",
                 "::1/128", "fe80::/10"):
        assert any(cidr in line for line in refused), cidr
    assert len(lines) == 4 + len(refused)
    # Atomic replacement (idempotent on a running cluster), and bridge-internal traffic dropped.
    assert ruleset.startswith(f"table inet {buildnet.NFT_TABLE}\ndelete table inet ")
    assert f"ip saddr {buildnet.BUILD_CIDR} ip daddr {buildnet.BUILD_CIDR} drop" in ruleset


def test_resolvers_are_read_from_resolv_conf():
    text = "# c\nnameserver 10.255.255.53\nnameserver fe80::1%eth0\nsearch x\nnameserver bad\n"
    assert buildnet.resolvers(text) == ["10.255.255.53", "fe80::1"]
