"""What an operator run by hand (`shipyard operator` from a checkout) needs to know about the
local cluster: its image builder, registry, probe image and runner image. Published as the
ConfigMap `kube-public/shipyard-localcluster` (which the operator reads when it runs outside a
pod and the variable is not set) and printed by `localcluster.py env`.
"""

from __future__ import annotations

import json
import subprocess

from buildnet import BUILD_CIDR
from imagebuilds import BUILDKIT_ADDR, IMAGE_BUILDCTL, MIRRORS, REGISTRY, client_tls_dir
from layout import IMAGE_BUSYBOX, POD_CIDR, Layout
from runner_image import files_dir
from runner_image import reference as runner_reference
from webstandins import ADDRESS as WEB_STAND_IN
from webstandins import HOSTS as WEB_STAND_IN_HOSTS

NAMESPACE, NAME = "kube-public", "shipyard-localcluster"

DEFAULTS = {
    "SHIPYARD_BUILD_BACKEND": "buildkit",
    "SHIPYARD_BUILD_REGISTRY": f"{REGISTRY}/shipyard-local",
    "SHIPYARD_BUILD_REGISTRY_INSECURE": "1",
    "SHIPYARD_BUILDKIT_ADDR": BUILDKIT_ADDR,
    # buildkitd's CA and the build Jobs' client certificate (pki.ensure_buildkit_pki).
    "SHIPYARD_BUILDKIT_TLS_DIR": str(client_tls_dir(Layout.default())),
    "SHIPYARD_BUILDER_IMAGE": IMAGE_BUILDCTL,
    "SHIPYARD_BUILD_HOST_NETWORK": "1",
    # `RUN curl https://astral.sh/...` reaches the stand-in (webstandins.py, buildnet.rules).
    "SHIPYARD_BUILD_ADD_HOSTS": ",".join(f"{h}={WEB_STAND_IN}" for h in WEB_STAND_IN_HOSTS),
    "SHIPYARD_PROBE_IMAGE": IMAGE_BUSYBOX,
    # The static Go runner of this checkout (runner_image.py), imported by `up`.
    "SHIPYARD_RUNNER_IMAGE": runner_reference(),
    # The same runner and its loader, which trial pods get in ConfigMaps (built by `up`).
    "SHIPYARD_RUNNER_FILES": str(files_dir(Layout.default())),
    # What `public` trial pods must not reach beyond what the cluster's API tells (the node's
    # address and the Service CIDR): the pod CIDR (no node podCIDR here) and the build
    # network, whose gateway is one more host address the apiserver answers on.
    "SHIPYARD_CLUSTER_CIDRS": f"{POD_CIDR},{BUILD_CIDR}",
    # The nodes' registry mirrors (mirrors.py), where the operator reads a prebuilt image's
    # ENTRYPOINT, which the pod's fence runs after (docs/network-and-accelerators.md).
    "SHIPYARD_REGISTRY_MIRRORS": ",".join(f"{h}={m}" for h, m in MIRRORS.items()),
    "SHIPYARD_REGISTRY_INSECURE_HOSTS": REGISTRY,
}


def manifest() -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": NAME, "namespace": NAMESPACE,
                         "labels": {"app.kubernetes.io/part-of": "shipyard-localcluster"}},
            "data": DEFAULTS}


def apply(layout: Layout, kubectl: str) -> None:
    result = subprocess.run(
        [kubectl, "--kubeconfig", str(layout.kubeconfig), "apply", "--server-side",
         "--force-conflicts", "--field-manager=shipyard-localcluster", "-f", "-"],
        input=json.dumps(manifest()), capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"publishing the operator defaults failed: {result.stderr[-2000:]}")


def exports() -> list[str]:
    return [f"export {k}={v}" for k, v in DEFAULTS.items()]
