"""The chart's own buildkitd on a real cluster (issue 22, class 4): `helm install` with
builds.backend=buildkit installs buildkitd (privileged, mutual TLS, its NetworkPolicy); the
chart's operator builds a Task's image through it, pushing to an in-cluster registry; a client
without the build Jobs' certificate is refused; the NetworkPolicy keeps RUN steps (which share
buildkitd's pod network) off the node, the apiserver, cluster DNS and the metadata address.

On the local cluster buildkitd and the registry otherwise run as host processes, and
moby/buildkit cannot be pulled, so hack/localcluster/chart_images.py puts the same buildkitd and
registry binaries into images (`localhost/shipyard/buildkitd`, `localhost/shipyard/registry`).
The host's registry listens on 127.0.0.1 only, out of a pod's reach: a registry Deployment in
the operator's namespace takes the builds' pushes (opened to buildkitd by extraEgress, as the
chart documents for an in-cluster mirror) and serves the stand-in base copied from the host's.
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT
from tests.e2e.test_build_network import build_task, host_addresses
from tests.e2e.test_install import _create_namespace, _helm, _json, _operator_image, _run

RELEASE = "shipyard"
BUILDCTL = Path.home() / ".cache" / "shipyard" / "buildkit-v0.34.2" / "buildctl"
HOST_REGISTRY = "127.0.0.1:5055"

pytestmark = pytest.mark.usefixtures("local_only")


@pytest.fixture(scope="module")
def local_only(cluster) -> None:
    if not cluster.local:
        pytest.skip("the chart's buildkitd and registry images are built here and imported "
                    "into the local cluster's node; another cluster has no such import")


@dataclass
class BuildInstall:
    operator_ns: str
    watched_ns: str
    registry: str  # ClusterIP:5000 of the in-cluster registry
    buildkitd: str  # ClusterIP of the chart's buildkitd Service


REGISTRY_MANIFESTS = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: registry}
spec:
  selector: {matchLabels: {app: registry}}
  template:
    metadata: {labels: {app: registry}}
    spec:
      containers:
      - name: registry
        image: %(image)s
        imagePullPolicy: Never
        ports: [{containerPort: 5000}]
        readinessProbe: {httpGet: {path: /v2/, port: 5000}, periodSeconds: 1}
        resources: {requests: {cpu: 50m, memory: 64Mi}}
---
apiVersion: v1
kind: Service
metadata: {name: registry}
spec:
  selector: {app: registry}
  ports: [{port: 5000, targetPort: 5000}]
"""


def _chart_images() -> tuple[str, str]:
    out = _run([sys.executable, str(ROOT / "hack" / "localcluster" / "chart_images.py"),
                "import"], timeout=900).stdout.split()
    return out[-2], out[-1]


def _wait_http(url: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def _service_ip(cluster, namespace: str, name: str) -> str:
    return _json(cluster, "-n", namespace, "get", "service", name)["spec"]["clusterIP"]


def _wait_rollout(cluster, namespace: str, name: str, timeout: int = 180) -> None:
    cluster.kubectl_run("-n", namespace, "rollout", "status", f"deployment/{name}",
                        f"--timeout={timeout}s")


@pytest.fixture(scope="module")
def install(cluster) -> Iterator[BuildInstall]:
    image = _operator_image(cluster)
    buildkitd_image, registry_image = _chart_images()
    suffix = uuid.uuid4().hex[:6]
    op_ns, watched = f"shipyard-bk-op-{suffix}", f"shipyard-bk-{suffix}"
    for ns in (op_ns, watched):
        _create_namespace(cluster, ns)
    cluster.kubectl_run("apply", "-f", str(ROOT / "charts" / "shipyard" / "crds"))
    try:
        subprocess.run([str(cluster.kubectl), "-n", op_ns, "apply", "-f", "-"],
                       input=REGISTRY_MANIFESTS % {"image": registry_image}, text=True,
                       check=True, capture_output=True,
                       env=dict(os.environ, KUBECONFIG=cluster.kubeconfig))
        _wait_rollout(cluster, op_ns, "registry")
        registry = f"{_service_ip(cluster, op_ns, 'registry')}:5000"
        _wait_http(f"http://{registry}/v2/")  # kube-proxy has its endpoint
        # The stand-in base, from the host's registry into the cluster's.
        _run(["skopeo", "copy", "--quiet", "--src-tls-verify=false", "--dest-tls-verify=false",
              f"docker://{HOST_REGISTRY}/library/debian:bookworm",
              f"docker://{registry}/library/debian:bookworm"], timeout=300)
        node_nets = sorted({".".join(a.split(".")[:3]) + ".0/24" for a in host_addresses()
                            if not a.startswith(("10.", "127."))})
        policy = {
            # The chart's defaults plus this node's own subnet (a platform team lists its
            # node range the same way).
            "exceptCIDRs": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
                            "169.254.0.0/16", "fc00::/7", "fe80::/10", *node_nets],
            "extraEgress": [{"to": [{"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": op_ns}},
                "podSelector": {"matchLabels": {"app": "registry"}}}],
                "ports": [{"port": 5000, "protocol": "TCP"}]}],
        }
        _helm(cluster, "install", RELEASE, str(ROOT / "charts" / "shipyard"),
              "--namespace", op_ns,
              "--set", f"image.repository={image.rsplit(':', 1)[0]}",
              "--set", f"image.tag={image.rsplit(':', 1)[1]}",
              "--set", "image.pullPolicy=Never",
              "--set", "rbac.clusterWide=false",
              "--set", f"watchNamespaces={{{watched}}}",
              "--set", "builds.backend=buildkit",
              "--set", f"builds.registry={registry}/shipyard",
              "--set", "builds.registryInsecure=true",
              "--set", "builds.builderImage=localhost/shipyard/buildctl:v0.34.2",
              "--set", f"builds.buildkitd.image={buildkitd_image}",
              "--set-json", f'builds.mirrors={{"docker.io": "{registry}"}}',
              "--set-json", f'builds.insecureRegistries=["{registry}"]',
              "--set-json", 'builds.buildkitd.resources={"requests": {"cpu": "100m", '
                            '"memory": "256Mi"}, "limits": {"memory": "4Gi"}}',
              "--set-json", f"builds.buildkitd.networkPolicy={json.dumps(policy)}",
              "--wait", "--timeout", "300s", timeout=400)
        yield BuildInstall(op_ns, watched, registry,
                           _service_ip(cluster, op_ns, f"{RELEASE}-buildkitd"))
    finally:
        subprocess.run(["bash", str(ROOT / "hack" / "helm.sh"), "uninstall", RELEASE,
                        "--namespace", op_ns, "--wait"],
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                       env=dict(os.environ, KUBECONFIG=cluster.kubeconfig))
        for ns in (watched, op_ns):
            cluster.kubectl_run("delete", "namespace", ns, "--wait=false", check=False)


def _buildkitd_pod(cluster, install: BuildInstall) -> dict:
    (pod,) = _json(cluster, "-n", install.operator_ns, "get", "pods", "-l",
                   "app.kubernetes.io/component=buildkitd")["items"]
    return pod


def test_the_charts_buildkitd_runs_privileged_with_mutual_tls(cluster, install):
    pod = _buildkitd_pod(cluster, install)
    ready = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert ready["Ready"] == "True", pod["status"]
    (container,) = pod["spec"]["containers"]
    assert container["securityContext"]["privileged"] is True
    assert "--tlscacert" in container["args"] and "--tlscert" in container["args"]
    assert pod["spec"]["automountServiceAccountToken"] is False
    policies = _json(cluster, "-n", install.operator_ns, "get", "networkpolicy")["items"]
    assert [p["metadata"]["name"] for p in policies] == [f"{RELEASE}-buildkitd"]


def _client_secret(cluster, install: BuildInstall, tmp_path: Path) -> Path:
    secret = _json(cluster, "-n", install.operator_ns, "get", "secret",
                   f"{RELEASE}-buildkitd-client")
    for key, value in secret["data"].items():
        (tmp_path / key).write_bytes(base64.b64decode(value))
        (tmp_path / key).chmod(0o600)
    return tmp_path


def _buildctl(install: BuildInstall, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BUILDCTL), "--addr", f"tcp://{install.buildkitd}:1234", *flags,
                           "debug", "workers"], capture_output=True, text=True, timeout=60)


def test_a_client_without_the_build_jobs_certificate_is_refused(cluster, install, tmp_path):
    # A plain gRPC client: refused.
    plain = _buildctl(install)
    assert plain.returncode != 0, plain.stdout
    # TLS with the right CA but no client certificate: refused too.
    tls = _client_secret(cluster, install, tmp_path)
    name = f"--tlsservername={RELEASE}-buildkitd"
    no_cert = _buildctl(install, "--tlscacert", str(tls / "ca.crt"), name)
    assert no_cert.returncode != 0, no_cert.stdout
    # The build Jobs' certificate (the chart's client Secret): served, so the refusals above
    # are buildkitd's, not an unreachable Service.
    ok = _buildctl(install, "--tlscacert", str(tls / "ca.crt"), "--tlscert",
                   str(tls / "tls.crt"), "--tlskey", str(tls / "tls.key"), name)
    assert ok.returncode == 0, ok.stderr[-2000:]


def _targets(cluster) -> list[str]:
    node = next(a for a in host_addresses() if not a.startswith(("10.", "127.")))
    kubernetes = _json(cluster, "-n", "default", "get", "service", "kubernetes")["spec"]
    registry = _json(cluster, "-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns")
    # Cluster DNS is allowed (port 53 of the kube-dns pods): the build resolves names with it.
    others = [f"{p['status']['podIP']}:8080" for p in registry["items"]
              if p["status"].get("podIP")]
    return [f"{node}:6443", f"{node}:10250", f"{kubernetes['clusterIP']}:443",
            "169.254.169.254:80", *others]


def _wait_task_images(cluster, namespace: str, name: str, timeout: float = 400) -> dict:
    deadline = time.monotonic() + timeout
    cond: dict = {}
    while time.monotonic() < deadline:
        task = _json(cluster, "-n", namespace, "get", "task", name)
        cond = next((c for c in task.get("status", {}).get("conditions") or []
                     if c["type"] == "ImagesReady"), {})
        if cond and (cond["status"] == "True" or cond["reason"] not in
                     ("Building", "Pending", "RegistryUnavailable")):
            return cond
        time.sleep(1)
    raise AssertionError(f"task {name}: images not decided after {timeout}s: {cond}")


def _apply(cluster, namespace: str, body: dict) -> None:
    subprocess.run([str(cluster.kubectl), "-n", namespace, "apply", "-f", "-"],
                   input=json.dumps(body), text=True, check=True, capture_output=True,
                   env=dict(os.environ, KUBECONFIG=cluster.kubeconfig))


def test_the_charts_operator_builds_a_task_through_it_and_run_steps_stay_off_the_cluster(
        cluster, install):
    nonce = uuid.uuid4().hex
    targets = _targets(cluster)
    dockerfile = ("FROM debian:bookworm\nCOPY probe.py /probe.py\n"
                  f"RUN echo {nonce} && python3 /probe.py chart {' '.join(targets)}\n"
                  f"RUN echo {nonce} > /built.txt\n")
    files = build_task(dockerfile)
    _apply(cluster, install.watched_ns, {
        "apiVersion": "shipyard.dev/v1alpha1", "kind": "Task", "metadata": {"name": "charted"},
        "spec": {"source": {"inline": {"files": files}}}})
    cond = _wait_task_images(cluster, install.watched_ns, "charted")
    jobs = _json(cluster, "-n", install.watched_ns, "get", "jobs",
                 "-l", "shipyard.dev/image-build")["items"]
    (job,) = jobs
    log = cluster.kubectl_run("-n", install.watched_ns, "logs", f"job/{job['metadata']['name']}",
                              "-c", "buildctl", check=False).stdout
    reached = [line for line in log.splitlines() if "REACHED" in line]
    assert cond["status"] == "True", (reached, log[-1500:], cond)
    # Built by the chart's buildkitd, pushed to the registry the chart was given.
    args = " ".join(job["spec"]["template"]["spec"]["containers"][0].get("args", []) +
                    job["spec"]["template"]["spec"]["containers"][0].get("command", []))
    assert f"{RELEASE}-buildkitd.{install.operator_ns}.svc" in json.dumps(job["spec"]), args
    refs = re.findall(rf"{re.escape(install.registry)}/shipyard/[^\s\",]+", json.dumps(job))
    assert refs, json.dumps(job["spec"])[:2000]
    repo, tag = refs[0].split("/", 1)[1].rsplit(":", 1)
    with urllib.request.urlopen(urllib.request.Request(
            f"http://{install.registry}/v2/{repo}/manifests/{tag}", method="HEAD",
            headers={"Accept": "application/vnd.oci.image.index.v1+json, "
                               "application/vnd.oci.image.manifest.v1+json, "
                               "application/vnd.docker.distribution.manifest.v2+json"}),
            timeout=10) as resp:
        assert resp.status == 200
    # Its RUN steps share buildkitd's pod network, which the NetworkPolicy keeps off the node,
    # the apiserver, cluster DNS and the metadata address.
    for target in targets:
        assert f"chart BLOCKED {target}" in log, (target, log[-3000:])
    assert "REACHED" not in log


def test_a_pod_that_is_not_a_build_job_cannot_reach_buildkitd(cluster, install):
    """Ingress: only build Jobs' pods (by label) reach buildkitd; mTLS checks the rest."""
    name = f"intruder-{uuid.uuid4().hex[:6]}"
    cluster.kubectl_run(
        "-n", install.watched_ns, "run", name, "--restart=Never",
        "--image=localhost/shipyard/buildctl:v0.34.2", "--image-pull-policy=Never",
        "--command", "--", "sh", "-c",
        f"nc -w 5 {install.buildkitd} 1234 </dev/null && echo CONNECTED || echo REFUSED")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        phase = _json(cluster, "-n", install.watched_ns, "get", "pod", name)["status"]["phase"]
        if phase in ("Succeeded", "Failed"):
            break
        time.sleep(1)
    out = cluster.kubectl_run("-n", install.watched_ns, "logs", name).stdout
    assert "REFUSED" in out and "CONNECTED" not in out, out
    # The same from the node reaches it (the Service answers): the refusal above is the policy.
    with socket.create_connection((install.buildkitd, 1234), timeout=5):
        pass
