"""The processes of the local cluster: their configuration files and command lines."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from clusterdns import kubelet_has_cluster_dns
from clusterdns import kubelet_settings as kubelet_dns_settings
from imagebuilds import buildkitd_argv, registry_argv
from imagebuilds import write_configs as write_build_configs
from kubeproxy import apiserver_network_flags, kube_proxy_argv, write_kube_proxy_config
from kuberouter import kube_router_argv
from layout import (
    APISERVER_PORT,
    BRIDGE,
    ETCD_CLIENT_PORT,
    ETCD_PEER_PORT,
    IMAGE_PAUSE,
    NODE_NAME,
    POD_CIDR,
    SERVICE_CIDR,
    Layout,
)
from mirrors import containerd_settings as containerd_mirror_settings
from mirrors import write_hosts as write_mirror_hosts
from pki import kubeconfig
from webstandins import argv as web_stand_ins_argv

APISERVER_URL = f"https://127.0.0.1:{APISERVER_PORT}"


@dataclass(frozen=True)
class Component:
    name: str
    argv: list[str]


def write_configs(layout: Layout) -> None:
    """Write every configuration file the components read; cheap, so done on each `up`."""
    pki = layout.pki
    for d in (layout.state, layout.run, layout.logs, layout.cni_conf, layout.kubelet_root):
        d.mkdir(parents=True, exist_ok=True)
    layout.kubeconfig.write_text(kubeconfig(pki, "admin", APISERVER_URL))
    for user in ("kubelet", "controller-manager", "scheduler", "kube-proxy"):
        (layout.state / f"{user}.kubeconfig").write_text(kubeconfig(pki, user, APISERVER_URL))
    (layout.state / "containerd.toml").write_text(_containerd_config(layout))
    (layout.state / "kubelet.yaml").write_text(_kubelet_config(layout))
    write_kube_proxy_config(layout)
    (layout.cni_conf / "10-shipyard.conflist").write_text(json.dumps(_cni_config(layout), indent=2))
    write_build_configs(layout)
    write_mirror_hosts(layout)


def _containerd_config(layout: Layout) -> str:
    return f"""version = 2
root = "{layout.state / 'containerd'}"
state = "{layout.run / 'containerd'}"
[grpc]
  address = "{layout.containerd_sock}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{IMAGE_PAUSE}"
  restrict_oom_score_adj = true
  enable_unprivileged_ports = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{layout.cni_conf}"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
{containerd_mirror_settings(layout)}"""


POD_PIDS_LIMIT = 2048
"""Processes and threads a pod may hold (the kubelet's `podPidsLimit`, Kubernetes' own bound;
docs/trust.md, "A fork bomb stays in its pod"): without it one agent's fork bomb takes every
PID of the node (32768 here) and with them the kubelet, the runtime and every other trial."""


def kubelet_lacks(configz: dict) -> list[str]:
    """What a running kubelet (its /configz answer) lacks of this configuration, for `up` to
    restart it once; an answer without `podPidsLimit` (none came) counts as having it."""
    missing = [] if kubelet_has_cluster_dns(configz) else ["the cluster DNS"]
    pids = (configz.get("kubeletconfig") or {}).get("podPidsLimit", POD_PIDS_LIMIT)
    if pids != POD_PIDS_LIMIT:
        missing.append(f"podPidsLimit {POD_PIDS_LIMIT}")
    return missing


def _kubelet_config(layout: Layout) -> str:
    pki = layout.pki
    return f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: 10250
readOnlyPort: 0
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {pki / 'ca.crt'}}}
authorization: {{mode: Webhook}}
tlsCertFile: {pki / 'kubelet-serving.crt'}
tlsPrivateKeyFile: {pki / 'kubelet-serving.key'}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
containerRuntimeEndpoint: unix://{layout.containerd_sock}
{kubelet_dns_settings()}imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {{memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}}
maxPods: 250
podPidsLimit: {POD_PIDS_LIMIT}
serializeImagePulls: false
syncFrequency: 10s
nodeStatusUpdateFrequency: 10s
"""


def _cni_config(layout: Layout) -> dict:
    return {
        "cniVersion": "0.4.0",
        "name": "shipyard",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(layout.state / "cni" / "ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def components(layout: Layout) -> list[Component]:
    """The processes in start order."""
    pki, state, b = layout.pki, layout.state, layout.binary
    return [
        Component("containerd", ["containerd", "--config", str(state / "containerd.toml")]),
        Component(
            "etcd",
            [
                "etcd",
                "--name=shipyard",
                f"--data-dir={state / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{ETCD_CLIENT_PORT}",
                f"--advertise-client-urls=http://127.0.0.1:{ETCD_CLIENT_PORT}",
                f"--listen-peer-urls=http://127.0.0.1:{ETCD_PEER_PORT}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{ETCD_PEER_PORT}",
                f"--initial-cluster=shipyard=http://127.0.0.1:{ETCD_PEER_PORT}",
                "--experimental-watch-progress-notify-interval=1s",
                "--quota-backend-bytes=4294967296",
            ],
        ),
        Component(
            "kube-apiserver",
            [
                str(b("kube-apiserver")),
                f"--etcd-servers=http://127.0.0.1:{ETCD_CLIENT_PORT}",
                *apiserver_network_flags(),
                f"--secure-port={APISERVER_PORT}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
                f"--kubelet-certificate-authority={pki / 'ca.crt'}",
                "--kubelet-preferred-address-types=Hostname,InternalIP",
                "--allow-privileged=true",
                "--enable-admission-plugins=NodeRestriction",
                "--profiling=false",
            ],
        ),
        Component(
            "kube-controller-manager",
            [
                str(b("kube-controller-manager")),
                f"--kubeconfig={state / 'controller-manager.kubeconfig'}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--use-service-account-credentials=true",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
            ],
        ),
        Component(
            "kube-scheduler",
            [
                str(b("kube-scheduler")),
                f"--kubeconfig={state / 'scheduler.kubeconfig'}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
            ],
        ),
        Component("kube-proxy", kube_proxy_argv(layout)),
        Component(
            "kubelet",
            [
                str(b("kubelet")),
                f"--config={state / 'kubelet.yaml'}",
                f"--kubeconfig={state / 'kubelet.kubeconfig'}",
                f"--hostname-override={NODE_NAME}",
                f"--root-dir={layout.kubelet_root}",
                f"--cert-dir={state / 'kubelet-pki'}",
            ],
        ),
        # Enforces NetworkPolicy; started once the node is Ready (it reads the Node object).
        Component("kube-router", kube_router_argv(layout)),
        # The image registry and BuildKit for ImageBuild Jobs (see imagebuilds.py).
        Component("registry", registry_argv(layout)),
        Component("buildkitd", buildkitd_argv(layout)),
        # astral.sh's installer, for pods only (see webstandins.py).
        Component("web-stand-ins", web_stand_ins_argv(layout.pki, layout.cache)),
    ]


def log_path(layout: Layout, name: str) -> Path:
    return layout.logs / f"{name}.log"
