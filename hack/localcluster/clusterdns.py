"""Cluster DNS for the local cluster, as on any cluster: CoreDNS in kube-system behind the
`kube-dns` Service (10.96.0.10), the kubelet's `clusterDNS`, names forwarded to the host's
resolver. Without it no pod resolves a name: a solution's `pip install` fails although PyPI is
reachable, and a `public` task that probes a host gets a resolver error.

CoreDNS runs as a pod (a Deployment labelled `k8s-app: kube-dns`), not as a host process like
the registry: the operator's NetworkPolicies allow DNS to exactly those pods, so a `no-network`
phase cannot resolve while a `public` or allowlist phase can — the rules hold here as they do
on a real cluster. The binary comes from the Go module proxy (./coredns, cached by version in
~/.cache/shipyard) and goes into a small image imported into containerd, like the builder's.

`up` adds it to a running cluster: the manifests are applied idempotently; the kubelet reads
`clusterDNS` only when it starts, so a kubelet that runs without it is restarted once (its pods
go on running; pods created before keep the host's resolver).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from imagebuilds import _go_build
from images import Image, _busybox_rootfs, ensure_imported
from layout import Layout
from webstandins import ADDRESS, HOSTS

COREDNS_VERSION = "v1.14.7"  # keep in step with coredns/go.mod
DNS_SERVICE_IP = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
IMAGE_COREDNS = f"localhost/shipyard/coredns:{COREDNS_VERSION}"
NAMESPACE = "kube-system"

COREFILE = f"""\
.:53 {{
    errors
    ready :8181
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    hosts {{
        {" ".join([ADDRESS, *HOSTS])}
        fallthrough
    }}
    forward . /etc/resolv.conf
    cache 30
    loop
    reload
}}
"""


def coredns_dir(layout: Layout) -> Path:
    return layout.cache / f"coredns-{COREDNS_VERSION}"


def ensure_binary(layout: Layout) -> None:
    """CoreDNS once per version (a few minutes cold on 2 cores; nothing when warm)."""
    if not (coredns_dir(layout) / "coredns").exists():
        _go_build("coredns", coredns_dir(layout), ["github.com/coredns/coredns"], "-s -w")


def _coredns_rootfs(layout: Layout, root: Path) -> None:
    _busybox_rootfs(layout, root)
    shutil.copy2(coredns_dir(layout) / "coredns", root / "coredns")


COREDNS_IMAGE = Image(IMAGE_COREDNS, f"coredns-{COREDNS_VERSION}.tar", _coredns_rootfs,
                      ("/coredns",))


def manifests() -> list[dict]:
    labels = {"k8s-app": "kube-dns"}
    meta = {"namespace": NAMESPACE, "labels": {**labels, "app.kubernetes.io/part-of":
                                                "shipyard-localcluster"}}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns", **meta}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "system:coredns"},
         "rules": [
             {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
              "verbs": ["list", "watch"]},
             {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
              "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "system:coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "system:coredns"},
         "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": NAMESPACE}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "coredns", **meta},
         "data": {"Corefile": COREFILE}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "coredns", **meta},
         "spec": {
             "replicas": 1, "selector": {"matchLabels": labels},
             "template": {"metadata": {"labels": labels}, "spec": {
                 "serviceAccountName": "coredns",
                 "priorityClassName": "system-cluster-critical",
                 # The host's resolver, to forward to (ClusterFirst would point at itself).
                 "dnsPolicy": "Default",
                 "containers": [{
                     "name": "coredns", "image": IMAGE_COREDNS, "imagePullPolicy": "Never",
                     "command": ["/coredns", "-conf", "/etc/coredns/Corefile"],
                     "ports": [{"containerPort": 53, "protocol": "UDP", "name": "dns"},
                               {"containerPort": 53, "protocol": "TCP", "name": "dns-tcp"}],
                     "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181},
                                        "periodSeconds": 2},
                     "resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                                   "limits": {"memory": "128Mi"}},
                     "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns"}],
                 }],
                 "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
             }}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kube-dns", **meta},
         "spec": {"clusterIP": DNS_SERVICE_IP, "selector": labels,
                  "ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
                            {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}},
    ]


def kubelet_settings() -> str:
    """The kubelet configuration's DNS lines."""
    return f"clusterDNS: [{DNS_SERVICE_IP}]\nclusterDomain: {CLUSTER_DOMAIN}\n"


def apply(layout: Layout, kubectl: str) -> None:
    """The image in containerd and the objects in the cluster (idempotent)."""
    ensure_binary(layout)
    ensure_imported(layout, COREDNS_IMAGE)
    body = json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests()})
    result = subprocess.run(
        [kubectl, "--kubeconfig", str(layout.kubeconfig), "apply", "--server-side",
         "--force-conflicts", "--field-manager=shipyard-localcluster", "-f", "-"],
        input=body, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"applying the cluster DNS failed: {result.stderr.strip()[-2000:]}")


def kubelet_has_cluster_dns(configz: dict) -> bool:
    """Whether the running kubelet (its /configz answer) has a cluster DNS."""
    return bool((configz.get("kubeletconfig") or {}).get("clusterDNS"))
