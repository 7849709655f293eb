"""The local cluster's DNS, registry mirrors and stand-ins (hack/localcluster; issue 23)."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "hack" / "localcluster"))

import clusterdns  # noqa: E402
import components  # noqa: E402
import imagebuilds  # noqa: E402
import mirrors  # noqa: E402


def test_mirrors_preserve_paths_for_containerd_as_for_builds():
    hub = tomllib.loads(mirrors.hosts_toml("docker.io", imagebuilds.MIRRORS["docker.io"]))
    assert hub["server"] == "https://registry-1.docker.io"
    assert list(hub["host"]) == ["http://127.0.0.1:5055/v2"]
    assert "override_path" not in hub["host"]["http://127.0.0.1:5055/v2"]
    ghcr = tomllib.loads(mirrors.hosts_toml("ghcr.io", imagebuilds.MIRRORS["ghcr.io"]))
    host = ghcr["host"]["http://127.0.0.1:5055/v2/ghcr.io"]
    assert host["override_path"] is True and host["capabilities"] == ["pull", "resolve"]
    assert ghcr["server"] == "https://ghcr.io"


def test_the_cluster_dns_is_kube_dns_pods_behind_its_service():
    objs = {o["kind"]: o for o in clusterdns.manifests()}
    service, deployment = objs["Service"], objs["Deployment"]
    assert service["metadata"]["name"] == "kube-dns"
    assert service["spec"]["clusterIP"] == clusterdns.DNS_SERVICE_IP
    # The operator's NetworkPolicies allow DNS to exactly these pods.
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["labels"] == {"k8s-app": "kube-dns"}
    assert deployment["metadata"]["namespace"] == "kube-system"
    assert pod["spec"]["dnsPolicy"] == "Default"  # forwards to the host's resolver
    assert "forward . /etc/resolv.conf" in objs["ConfigMap"]["data"]["Corefile"]
    assert f"clusterDNS: [{clusterdns.DNS_SERVICE_IP}]" in clusterdns.kubelet_settings()


def test_a_kubelet_without_the_cluster_dns_is_told_apart():
    assert not clusterdns.kubelet_has_cluster_dns({"kubeletconfig": {"clusterDNS": []}})
    assert not clusterdns.kubelet_has_cluster_dns({"kubeletconfig": {"clusterDNS": None}})
    assert not clusterdns.kubelet_has_cluster_dns({"kubeletconfig": {}})
    assert clusterdns.kubelet_has_cluster_dns(
        {"kubeletconfig": {"clusterDNS": [clusterdns.DNS_SERVICE_IP]}})


def test_a_kubelet_without_the_pod_pids_limit_is_restarted_once_by_up():
    dns = {"clusterDNS": [clusterdns.DNS_SERVICE_IP]}
    limit = components.POD_PIDS_LIMIT
    assert components.kubelet_lacks({"kubeletconfig": {**dns, "podPidsLimit": limit}}) == []
    assert components.kubelet_lacks({"kubeletconfig": {**dns, "podPidsLimit": -1}}) == [
        f"podPidsLimit {limit}"]
    assert components.kubelet_lacks({"kubeletconfig": {"podPidsLimit": -1}}) == [
        "the cluster DNS", f"podPidsLimit {limit}"]
    # the configuration a cold `up` writes carries it
    assert f"podPidsLimit: {limit}\n" in components._kubelet_config(components.Layout.default())


def test_every_stand_in_is_labelled_and_the_common_bases_have_one():
    tags = set()
    for name, (dockerfile, names) in imagebuilds.STAND_INS.items():
        assert f'LABEL {imagebuilds.STAND_IN_LABEL}="' in dockerfile, name
        assert "stand-in" in dockerfile.split(imagebuilds.STAND_IN_LABEL, 1)[1], name
        tags.update(names)
    for base in ("library/ubuntu:24.04", "library/ubuntu:22.04", "library/golang:1.25-bookworm",
                 "library/node:20", "library/alpine:3.22", "library/python:3.12-slim",
                 "ghcr.io/laude-institute/t-bench/ubuntu-24-04:latest",
                 "ghcr.io/astral-sh/uv:latest"):
        assert base in tags, base
