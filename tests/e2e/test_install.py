"""Installing Shipyard like a user does (issue 7): the operator image built locally, `helm install`
of charts/shipyard, the operator pod Ready, `kubectl apply -f examples/hello-world/` rewarded,
least-privilege RBAC, no service-account token in trial pods, and `helm uninstall` leaving no
operator objects behind.

The chart is installed in namespaced mode: its operator serves only this module's namespace,
`shipyard-it-<hex>`, which the session's checkout operator (the `operator` fixture, serving `t-*`
namespaces only) never touches: two operators never drive the same Trials. On a cluster other
than the local one, set SHIPYARD_OPERATOR_IMAGE=REPO:TAG (an image the cluster can pull) and
SHIPYARD_TASK_IMAGE.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.e2e.conftest import ROOT, TEST_IMAGE

HELM = ["bash", str(ROOT / "hack" / "helm.sh")]
HELLO = ROOT / "examples" / "hello-world"
RELEASE = "shipyard"


@dataclass
class Install:
    operator_ns: str
    watched_ns: str
    image: str
    install_seconds: float
    service_account: str = RELEASE  # the chart's full name for release "shipyard"


def _run(args: list[str], timeout: float = 300, **kwargs) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                            stdin=subprocess.DEVNULL, **kwargs)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {result.returncode}:\n"
                             f"{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
    return result


def _operator_image(cluster) -> str:
    image = os.environ.get("SHIPYARD_OPERATOR_IMAGE")
    if image:
        return image
    if not cluster.local:
        pytest.skip("set SHIPYARD_OPERATOR_IMAGE to install the chart on this cluster")
    began = time.monotonic()
    image = _run([sys.executable, str(ROOT / "hack" / "localcluster" / "operator_image.py"),
                  "import"], timeout=900).stdout.strip().splitlines()[-1]
    print(f"operator image {image} built/imported in {time.monotonic() - began:.1f}s")
    return image


def _helm(cluster, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return _run([*HELM, *args], timeout=timeout,
                env=dict(os.environ, KUBECONFIG=cluster.kubeconfig))


def _create_namespace(cluster, name: str) -> None:
    cluster.kubectl_run("create", "namespace", name)
    deadline = time.monotonic() + 60
    while cluster.kubectl_run("-n", name, "get", "serviceaccount", "default",
                              check=False).returncode != 0:
        assert time.monotonic() < deadline, f"no default ServiceAccount in {name}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def install(cluster) -> Iterator[Install]:
    image = _operator_image(cluster)
    suffix = uuid.uuid4().hex[:6]
    # Not t-*: the checkout operator of the e2e fixtures serves t-* namespaces.
    op_ns, watched = f"shipyard-it-op-{suffix}", f"shipyard-it-{suffix}"
    for ns in (op_ns, watched):
        _create_namespace(cluster, ns)
    cluster.kubectl_run("apply", "-f", str(ROOT / "charts" / "shipyard" / "crds"))
    try:
        began = time.monotonic()
        _helm(cluster, "install", RELEASE, str(ROOT / "charts" / "shipyard"),
              "--namespace", op_ns,
              "--set", f"image.repository={image.rsplit(':', 1)[0]}",
              "--set", f"image.tag={image.rsplit(':', 1)[1]}",
              "--set", f"image.pullPolicy={'Never' if cluster.local else 'IfNotPresent'}",
              "--set", "rbac.clusterWide=false",
              "--set", f"watchNamespaces={{{watched}}}",
              "--wait", "--timeout", "180s")
        took = time.monotonic() - began
        print(f"helm install to operator Ready: {took:.1f}s")
        yield Install(op_ns, watched, image, took)
    finally:
        # Already done by the last test unless it failed first; "not found" is fine here.
        subprocess.run([*HELM, "uninstall", RELEASE, "--namespace", op_ns, "--wait"],
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                       env=dict(os.environ, KUBECONFIG=cluster.kubeconfig))
        for ns in (watched, op_ns):
            cluster.kubectl_run("delete", "namespace", ns, "--wait=false", check=False)


def _json(cluster, *args: str) -> dict:
    return json.loads(cluster.kubectl_run(*args, "-o", "json").stdout)


def _operator_pods(cluster, install: Install) -> list[dict]:
    return _json(cluster, "-n", install.operator_ns, "get", "pods",
                 "-l", f"app.kubernetes.io/instance={RELEASE}")["items"]


def _wait_trial(cluster, namespace: str, name: str, timeout: float = 180) -> dict:
    deadline = time.monotonic() + timeout
    trial: dict = {}
    while time.monotonic() < deadline:
        trial = _json(cluster, "-n", namespace, "get", "trial", name)
        if trial.get("status", {}).get("phase") in ("Completed", "Failed"):
            return trial
        time.sleep(0.5)
    raise AssertionError(f"trial {name} did not finish: {trial.get('status')}")


def test_operator_pod_is_ready_non_root_with_probes(cluster, install):
    pods = _operator_pods(cluster, install)
    assert len(pods) == 1
    pod = pods[0]
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    container = pod["spec"]["containers"][0]
    assert container["image"] == install.image
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["requests"]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["args"][-2:] == ["--namespace", install.watched_ns]
    labels = pod["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "shipyard"
    assert labels["app.kubernetes.io/managed-by"] == "Helm"
    # It reaches the apiserver through the `kubernetes` Service (in-cluster configuration).
    logs = cluster.kubectl_run("-n", install.operator_ns, "logs", pod["metadata"]["name"]).stdout
    assert "login_via_client" in logs and "Traceback" not in logs
    service_ip = _json(cluster, "-n", "default", "get", "service", "kubernetes")["spec"][
        "clusterIP"]
    seen = cluster.kubectl_run(
        "-n", install.operator_ns, "exec", pod["metadata"]["name"], "--", "python3", "-c",
        "import os; print(os.environ['KUBERNETES_SERVICE_HOST'], os.getuid())").stdout.split()
    assert seen == [service_ip, "10001"]
    assert install.install_seconds < 180


def _first_trial_pod(cluster, namespace: str, trial: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = _json(cluster, "-n", namespace, "get", "pods", "-l",
                     f"shipyard.dev/trial={trial}")["items"]
        if pods:
            return pods[0]
        time.sleep(0.2)
    raise AssertionError(f"no pod of trial {trial} seen")


def test_hello_world_example_gets_its_rewards(cluster, install):
    ns = install.watched_ns
    cluster.kubectl_run("-n", ns, "apply", "-f", str(HELLO))
    # The chart's default runner: the static Go runner the operator's image carries, mounted
    # read-only from the immutable ConfigMaps the operator made in the namespace (no init
    # container, no runner.sh ConfigMap volume).
    pod = _first_trial_pod(cluster, ns, "hello-world-oracle")
    assert not [c for c in pod["spec"].get("initContainers", []) if c["name"] == "runner"]
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "runner")
    names = [s["configMap"]["name"] for s in volume["projected"]["sources"]]
    assert len(names) >= 3 and all(n.startswith("shipyard-runner-go-") for n in names), volume
    for name in names:
        assert _json(cluster, "-n", ns, "get", "configmap", name)["immutable"] is True
    cluster.kubectl_run("-n", ns, "wait", "--for=condition=Complete", "trial/hello-world-oracle",
                        "trial/hello-world-nop", "--timeout=180s", timeout=200)
    assert _wait_trial(cluster, ns, "hello-world-oracle")["status"]["reward"] == 1.0
    assert _wait_trial(cluster, ns, "hello-world-nop")["status"]["reward"] == 0.0
    task = _json(cluster, "-n", ns, "get", "task", "hello-world")
    ready = next(c for c in task["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"


def test_service_account_is_least_privilege(cluster, install):
    sa = f"system:serviceaccount:{install.operator_ns}:{install.service_account}"

    def can(verb: str, resource: str, namespace: str | None) -> bool:
        scope = ["-n", namespace] if namespace else ["--all-namespaces"]
        result = cluster.kubectl_run("auth", "can-i", verb, resource, "--as", sa, *scope,
                                     check=False)
        return result.stdout.strip() == "yes"

    ns = install.watched_ns
    # Secrets: never, neither outside the watched namespace nor in it.
    for namespace in ("default", "kube-system", install.operator_ns, ns, None):
        for verb in ("get", "list", "watch"):
            assert not can(verb, "secrets", namespace), (verb, namespace)
    # What it needs, only where it serves.
    for verb, resource in (("create", "pods"), ("create", "pods/exec"), ("patch", "trials"),
                           ("patch", "trials/status"), ("create", "configmaps"),
                           ("delete", "configmaps"), ("watch", "configmaps"),
                           ("watch", "networkpolicies.networking.k8s.io"),
                           ("create", "networkpolicies.networking.k8s.io")):
        assert can(verb, resource, ns), (verb, resource)
        assert not can(verb, resource, "default"), (verb, resource, "default")
    assert not can("list", "trials", None)
    assert not can("delete", "namespaces", None)
    # Leader election: its own Lease, in its own namespace only.
    lease = "leases.coordination.k8s.io/shipyard-operator"
    assert can("update", lease, install.operator_ns)
    assert not can("update", "leases.coordination.k8s.io/another", install.operator_ns)
    assert not can("update", lease, ns)


def test_a_second_replica_waits_ready_as_a_standby(cluster, install):
    """Two operator pods: one holds the Lease, the other waits (Ready: it answers the probes)
    and runs no kopf; scaled back to one, the remaining pod leads."""
    deployment = f"deployment/{RELEASE}"
    cluster.kubectl_run("-n", install.operator_ns, "scale", deployment, "--replicas=2")
    try:
        cluster.kubectl_run("-n", install.operator_ns, "rollout", "status", deployment,
                            "--timeout=180s", timeout=200)
        pods = {p["metadata"]["name"] for p in _operator_pods(cluster, install)}
        assert len(pods) == 2, pods
        holder = _json(cluster, "-n", install.operator_ns, "get", "lease",
                       "shipyard-operator")["spec"]["holderIdentity"]
        leader = next(p for p in pods if holder.startswith(f"{p}_"))
        (standby,) = pods - {leader}
        logs = cluster.kubectl_run("-n", install.operator_ns, "logs", standby).stdout
        assert f"is held by {holder}" in logs and "kopf" not in logs, logs
    finally:
        cluster.kubectl_run("-n", install.operator_ns, "scale", deployment, "--replicas=1")


def _kept_trial(cluster, ns: str, name: str, task: str) -> dict:
    manifest = {
        "apiVersion": "shipyard.dev/v1alpha1", "kind": "Trial",
        "metadata": {"name": name},
        "spec": {"taskRef": {"name": task}, "agent": {"name": "oracle"}, "keepPods": True},
    }
    if not cluster.local:
        manifest["spec"]["environment"] = {"image": os.environ.get("SHIPYARD_TASK_IMAGE",
                                                                   TEST_IMAGE)}
    cluster.kubectl_run("-n", ns, "apply", "-f", "-", input=json.dumps(manifest))
    return _wait_trial(cluster, ns, name)


def test_trial_pods_mount_no_service_account_token(cluster, install):
    """The environment pod and a separate verifier's pod alike."""
    ns = install.watched_ns
    cluster.kubectl_run("-n", ns, "apply", "-f",
                        str(ROOT / "examples" / "separate-verifier" / "task.yaml"))
    assert _kept_trial(cluster, ns, "hello-world-kept", "hello-world")["status"]["reward"] == 1
    assert _kept_trial(cluster, ns, "separate-kept", "separate-verifier")["status"]["reward"] == 1
    pods = []
    for trial in ("hello-world-kept", "separate-kept"):
        pods += _json(cluster, "-n", ns, "get", "pods", "-l",
                      f"shipyard.dev/trial={trial}")["items"]
    components = sorted(p["metadata"]["labels"]["app.kubernetes.io/component"] for p in pods)
    assert components == ["environment", "environment", "verifier"]
    for pod in pods:
        assert pod["spec"]["automountServiceAccountToken"] is False
        for volume in pod["spec"].get("volumes", []):
            sources = (volume.get("projected") or {}).get("sources", [])
            assert not any("serviceAccountToken" in s for s in sources), volume
        for container in pod["spec"]["containers"]:
            mounts = [m["mountPath"] for m in container.get("volumeMounts", [])]
            assert not any(m.startswith("/var/run/secrets/kubernetes.io") for m in mounts)
        if pod["status"].get("phase") == "Running":
            probe = cluster.kubectl_run(
                "-n", ns, "exec", pod["metadata"]["name"], "-c", "main", "--",
                "ls", "/var/run/secrets/kubernetes.io/serviceaccount", check=False)
            assert probe.returncode != 0


def test_helm_uninstall_leaves_no_operator_objects(cluster, install):
    """Last in this module: uninstall, then nothing of the release remains (the CRDs, and the
    Tasks and Trials users made, stay by design: Helm never deletes crds/)."""
    # Running trials keep the operator's finalizer; this module's trials are all finished.
    trials = _json(cluster, "-n", install.watched_ns, "get", "trials")["items"]
    assert all(t["status"]["phase"] in ("Completed", "Failed") for t in trials)
    assert all(not t["metadata"].get("finalizers") for t in trials)
    _helm(cluster, "uninstall", RELEASE, "--namespace", install.operator_ns, "--wait")
    deadline = time.monotonic() + 60
    while _operator_pods(cluster, install):
        assert time.monotonic() < deadline, "the operator pod is still there"
        time.sleep(0.5)
    selector = f"app.kubernetes.io/instance={RELEASE}"
    for ns in (install.operator_ns, install.watched_ns):
        left = _json(cluster, "-n", ns, "get",
                     "deployments,replicasets,pods,serviceaccounts,roles,rolebindings,"
                     "configmaps,secrets,services", "-l", selector)["items"]
        assert left == [], [f"{o['kind']}/{o['metadata']['name']}" for o in left]
        helm_secrets = _json(cluster, "-n", ns, "get", "secrets", "-l", "owner=helm")["items"]
        assert helm_secrets == []
    cluster_wide = _json(cluster, "get", "clusterroles,clusterrolebindings", "-l", selector)
    mine = [o["metadata"]["name"] for o in cluster_wide["items"]
            if o["metadata"]["name"].startswith(install.operator_ns)]
    assert mine == []
    # The watched namespace can be deleted: no finalizer waits for an operator that is gone.
    cluster.kubectl_run("delete", "namespace", install.watched_ns, "--timeout=90s", timeout=100)
