"""Shared fixtures for the tests that need a real Kubernetes cluster.

Which cluster:

* ``SHIPYARD_TEST_KUBECONFIG=PATH``: that cluster (it must be reachable);
* ``SHIPYARD_USE_EXISTING_CLUSTER=1``: the cluster of ``KUBECONFIG`` (or ``~/.kube/config``),
  for example kind on a laptop or GKE (it must be reachable);
* otherwise the project's own local cluster: ``python3 hack/localcluster/localcluster.py up``
  (idempotent: a healthy running cluster is reused in well under a second; needs root).

Tests under ``tests/integration`` and ``tests/e2e`` are marked ``cluster`` automatically, so
``pytest -m "not cluster"`` runs only the tests that need no cluster. Tests marked ``optin``
(long or network-heavy) are skipped unless ``SHIPYARD_RUN_OPTIN=1`` or ``-m optin``.

Fixtures: ``cluster`` (session: ``.kubeconfig``, ``.kubectl``, ``.local``, ``.kubectl_run()``),
``api_client``, ``core_v1``, ``custom_objects`` (session) and ``namespace`` (a fresh namespace
per test, deleted afterwards without waiting).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
LOCALCLUSTER = ROOT / "hack" / "localcluster" / "localcluster.py"
LOCAL_KUBECONFIG = (
    Path(os.environ.get("SHIPYARD_LOCALCLUSTER_DIR", "/var/lib/shipyard-localcluster"))
    / "kubeconfig"
)
# buildkitd's TCP address takes only the build Jobs' certificate (hack/localcluster/pki.py).
BUILDKIT_TLS_DIR = (
    Path(os.environ.get("SHIPYARD_LOCALCLUSTER_DIR", "/var/lib/shipyard-localcluster"))
    / "pki" / "buildkit" / "client-secret"
)
CLUSTER_DIRS = ("integration", "e2e")


def buildkit_client() -> list[str]:
    """buildctl's global flags for the local cluster's buildkitd (mutual TLS)."""
    return ["--addr", "tcp://127.0.0.1:1234", "--tlscacert", str(BUILDKIT_TLS_DIR / "ca.crt"),
            "--tlscert", str(BUILDKIT_TLS_DIR / "tls.crt"),
            "--tlskey", str(BUILDKIT_TLS_DIR / "tls.key")]
TEST_NAMESPACE_LABEL = "shipyard.dev/test-namespace"
# Test namespaces are `<prefix>-<hex>`; the checkout operator serves `<prefix>-*`. Two test runs on
# one cluster at once (e.g. two worktrees) keep apart with different prefixes.
TEST_NAMESPACE_PREFIX = os.environ.get("SHIPYARD_TEST_NS_PREFIX", "t")


# ---------------------------------------------------------------- marking


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test under tests/integration or tests/e2e needs the cluster: mark it so. Tests
    marked `optin` (long or network-heavy: the chaos and 200-trial kill runs) are skipped unless
    asked for."""
    cluster_roots = [TESTS / d for d in CLUSTER_DIRS]
    optin = os.environ.get("SHIPYARD_RUN_OPTIN") == "1" or "optin" in (
        config.getoption("-m") or "").replace("not optin", "")
    for item in items:
        path = Path(str(item.path)).resolve()
        if any(path.is_relative_to(root) for root in cluster_roots):
            item.add_marker(pytest.mark.cluster)
        if not optin and item.get_closest_marker("optin"):
            item.add_marker(pytest.mark.skip(
                reason="opt-in test (long or network-heavy): run it with SHIPYARD_RUN_OPTIN=1 "
                       "or -m optin"))


# ---------------------------------------------------------------- the cluster


@dataclass(frozen=True)
class Cluster:
    kubeconfig: str  # path of the kubeconfig file
    kubectl: str  # path of a kubectl binary that matches the server as well as we can
    local: bool  # True for the project's own local cluster (hack/localcluster)

    def kubectl_run(
        self, *args: str, check: bool = True, timeout: float = 120, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster; raises with its stderr when `check` and it fails."""
        result = subprocess.run(
            [self.kubectl, "--kubeconfig", self.kubeconfig, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
            )
        return result


def _reachable(kubeconfig: str) -> str | None:
    """None when the cluster answers; otherwise why not."""
    from kubernetes import client, config

    try:
        api = config.new_client_from_config(config_file=kubeconfig)
    except Exception as e:  # a missing or malformed kubeconfig
        return f"cannot load kubeconfig {kubeconfig}: {e}"
    try:
        client.VersionApi(api).get_code(_request_timeout=10)
    except Exception as e:
        return f"cluster of {kubeconfig} does not answer: {e}"
    finally:
        api.close()
    return None


def _local_kubectl() -> str | None:
    """The kubectl built with the local cluster (`localcluster.py env` prints its folder)."""
    try:
        out = subprocess.run(
            [sys.executable, str(LOCALCLUSTER), "env"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
            stdin=subprocess.DEVNULL,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    for line in out.splitlines():
        if line.startswith("export PATH="):
            folder = line.removeprefix("export PATH=").split(":", 1)[0]
            candidate = Path(folder) / "kubectl"
            if os.access(candidate, os.X_OK):
                return str(candidate)
    return None


def _start_local_cluster() -> None:
    if os.geteuid() != 0:
        pytest.fail(
            "the local cluster needs root. Run the tests as root, point them at an existing "
            "cluster (SHIPYARD_TEST_KUBECONFIG=..., or KUBECONFIG=... with "
            "SHIPYARD_USE_EXISTING_CLUSTER=1), or deselect cluster tests with -m 'not cluster'",
            pytrace=False,
        )
    began = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(LOCALCLUSTER), "up"],
        capture_output=True,
        text=True,
        timeout=1800,
        stdin=subprocess.DEVNULL,
    )
    if result.returncode != 0:
        pytest.fail(
            f"`localcluster.py up` exited {result.returncode} after "
            f"{time.monotonic() - began:.0f}s:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}",
            pytrace=False,
        )


def _choose_cluster() -> Cluster:
    explicit = os.environ.get("SHIPYARD_TEST_KUBECONFIG")
    if not explicit and os.environ.get("SHIPYARD_USE_EXISTING_CLUSTER") == "1":
        explicit = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or str(
            Path.home() / ".kube" / "config"
        )
    if explicit:
        problem = _reachable(explicit)
        if problem:
            pytest.fail(f"the configured test cluster is not usable: {problem}", pytrace=False)
        kubectl = shutil.which("kubectl") or _local_kubectl() or "kubectl"
        return Cluster(kubeconfig=explicit, kubectl=kubectl, local=False)

    _start_local_cluster()
    problem = _reachable(str(LOCAL_KUBECONFIG))
    if problem:
        pytest.fail(f"the local cluster is up but not usable: {problem}", pytrace=False)
    kubectl = _local_kubectl() or shutil.which("kubectl") or "kubectl"
    return Cluster(kubeconfig=str(LOCAL_KUBECONFIG), kubectl=kubectl, local=True)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """A reachable cluster; KUBECONFIG points at it for the whole session."""
    chosen = _choose_cluster()
    before = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = chosen.kubeconfig
    # Code under test that uses the kubernetes client's default configuration finds it too.
    from kubernetes import config

    config.load_kube_config(config_file=chosen.kubeconfig)
    try:
        yield chosen
    finally:
        if before is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = before


@pytest.fixture(scope="session")
def api_client(cluster: Cluster):
    from kubernetes import config

    api = config.new_client_from_config(config_file=cluster.kubeconfig)
    try:
        yield api
    finally:
        api.close()


@pytest.fixture(scope="session")
def core_v1(api_client):
    from kubernetes import client

    return client.CoreV1Api(api_client)


@pytest.fixture(scope="session")
def custom_objects(api_client):
    from kubernetes import client

    return client.CustomObjectsApi(api_client)


@pytest.fixture
def namespace(core_v1) -> Iterator[str]:
    """A fresh namespace `t-<8 hex>` with its `default` ServiceAccount; deleted afterwards."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    name = f"{TEST_NAMESPACE_PREFIX}-{uuid.uuid4().hex[:8]}"
    core_v1.create_namespace(
        client.V1Namespace(
            metadata=client.V1ObjectMeta(name=name, labels={TEST_NAMESPACE_LABEL: "true"})
        )
    )
    try:
        # The controller-manager creates the ServiceAccount; pods cannot be created before it.
        deadline = time.monotonic() + 60
        while True:
            try:
                core_v1.read_namespaced_service_account("default", name)
                break
            except ApiException as e:
                if e.status != 404 or time.monotonic() > deadline:
                    raise
            time.sleep(0.1)
        yield name
    finally:
        try:
            core_v1.delete_namespace(name, propagation_policy="Background")
        except ApiException as e:
            if e.status != 404:
                raise
