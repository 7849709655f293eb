"""The local cluster's build network and buildkitd's mutual TLS (hack/localcluster; issue 22)."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "hack" / "localcluster"))

import buildnet  # noqa: E402
import imagebuilds  # noqa: E402
from layout import POD_CIDR, SERVICE_CIDR, Layout  # noqa: E402


def test_build_steps_are_dropped_towards_the_host_and_the_clusters_ranges():
    drops = buildnet.rules()
    assert all(r[-2:] == ["-j", "DROP"] for r in drops)
    assert drops[0][:4] == ["-m", "addrtype", "--dst-type", "LOCAL"]  # etcd, apiserver, ...
    targets = {r[1] for r in drops[1:]}
    assert targets == {POD_CIDR, SERVICE_CIDR, "169.254.0.0/16"}
    assert buildnet.BUILD_CIDR not in (POD_CIDR, SERVICE_CIDR)
    # As `iptables -S` prints them, so that `apply` changes nothing on an up-to-date chain.
    assert all(" " not in arg for r in drops for arg in r)


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
