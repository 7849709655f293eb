"""End-to-end fixtures: the CRDs installed, the operator running from this checkout, and helpers
to create Tasks and Trials and wait for their outcome."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shipyard.plan.settings import LOCAL_PROBE_IMAGE
from tests.conftest import BUILDKIT_TLS_DIR, TEST_NAMESPACE_LABEL, TEST_NAMESPACE_PREFIX

ROOT = Path(__file__).resolve().parents[2]
GROUP, VERSION = "shipyard.dev", "v1alpha1"
# Helper pods (servers, stand-ins) run the node's own image, never pulled.
TEST_IMAGE = "localhost/shipyard/debian:bookworm"
# Tasks run the same Debian rootfs from the local registry (its docker.io mirror), as a user's
# prebuilt image would be: the operator reads its ENTRYPOINT there, so its pods take the default
# start (the fence in `main`), not the init container an unreadable image gets.
TASK_IMAGE = "debian:bookworm"


LEASE_NAMESPACE = "default"


def lease_env(name: str = f"shipyard-operator-{TEST_NAMESPACE_PREFIX}",
              identity: str = f"{TEST_NAMESPACE_PREFIX}-test-operator") -> dict[str, str]:
    """Leader election for a test operator: a Lease of this test run's own (another checkout's
    operator, with another prefix, is not blocked by it), and an identity kept across restarts,
    as a restarted container keeps its pod's name: a killed and restarted operator leads again
    at once instead of waiting for its old lease to expire."""
    return {"SHIPYARD_LEADER_LEASE_NAME": name, "SHIPYARD_LEADER_LEASE_NAMESPACE": LEASE_NAMESPACE,
            "SHIPYARD_LEADER_IDENTITY": identity}


class OperatorProcess:
    """`python -m shipyard operator` as a child process, killable and restartable."""

    def __init__(self, kubeconfig: str, log_path: Path,
                 extra_env: dict[str, str] | None = None,
                 namespaces: tuple[str, ...] = (f"{TEST_NAMESPACE_PREFIX}-*",),
                 liveness: str = "", metrics_port: int = 0) -> None:
        self.metrics_port = metrics_port  # 0: a free port (several operators on one machine)
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.extra_env = {**lease_env(), **(extra_env or {})}
        self.namespaces = namespaces
        self.liveness = liveness
        self.proc: subprocess.Popen[bytes] | None = None
        _OPERATORS.append(self)

    def start(self) -> None:
        # A missing Task is waited for 10 s (the default 60 s would only slow the tests down).
        env = dict(os.environ, KUBECONFIG=self.kubeconfig, PYTHONUNBUFFERED="1",
                   SHIPYARD_TASK_WAIT_SEC="10", **self.extra_env)
        served = [arg for ns in self.namespaces for arg in ("-n", ns)]
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            # Only the test namespaces (t-*): an operator installed by a test elsewhere is not
            # raced, and other namespaces of a shared cluster are left alone.
            [sys.executable, "-m", "shipyard", "operator", "--liveness", self.liveness,
             "--metrics-port", str(self.metrics_port), *served],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True,
        )
        time.sleep(2)
        assert self.proc.poll() is None, f"operator exited at once:\n{self.log()[-3000:]}"

    def kill(self) -> None:
        """SIGKILL: no chance to clean up, like a node failure or an OOM kill."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


_OPERATORS: list[OperatorProcess] = []


def own_operator(cluster, core_v1, log_path: Path, kind: str,
                 extra_env: dict[str, str] | None = None, metrics_port: int = 0
                 ) -> tuple[str, OperatorProcess]:
    """A test namespace of its own (`<prefix><kind>-<hex>`) and an operator serving only it
    (the local cluster's settings, a Lease of its own, `extra_env`), started once the
    namespace's default ServiceAccount exists. The caller stops it and deletes the namespace."""
    import uuid

    from kubernetes import client

    ns = f"{TEST_NAMESPACE_PREFIX}{kind}-{uuid.uuid4().hex[:6]}"
    core_v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=ns, labels={TEST_NAMESPACE_LABEL: "true"})))
    operator = OperatorProcess(
        cluster.kubeconfig, log_path,
        {**build_env(cluster.local), **lease_env(f"shipyard-operator-{ns}", f"{ns}-operator"),
         **(extra_env or {})}, namespaces=(ns,), metrics_port=metrics_port)
    try:
        deadline = time.monotonic() + 60
        while not core_v1.list_namespaced_service_account(ns).items:
            assert time.monotonic() < deadline, "no default ServiceAccount"
            time.sleep(0.5)
        operator.start()
    except BaseException:
        operator.stop()
        core_v1.delete_namespace(ns)
        raise
    return ns, operator


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed e2e test's report carries what explains it: the Warning Events of its namespace
    and the operator's log lines about it (CI shows only the test output)."""
    report = yield
    namespace = item.funcargs.get("namespace") if hasattr(item, "funcargs") else None
    if report.failed and call.when == "call" and isinstance(namespace, str):
        for title, text in failure_context(namespace, item.funcargs.get("core_v1")):
            report.sections.append((title, text))
    return report


def failure_context(namespace: str, core_v1: Any) -> list[tuple[str, str]]:
    sections = []
    if core_v1 is not None:
        try:
            events = core_v1.list_namespaced_event(namespace).items
            lines = [f"{e.involved_object.kind}/{e.involved_object.name} {e.type} {e.reason}: "
                     f"{(e.message or '')[:300]}" for e in events if e.type != "Normal"]
            sections.append((f"Warning Events in {namespace}", "\n".join(lines[-40:]) or "none"))
        except Exception as e:  # diagnostics must not hide the failure
            sections.append(("Events", f"could not list: {e}"))
    for op in _OPERATORS:
        lines = [line[:400] for line in op.log().splitlines()
                 if namespace in line and ("ERROR" in line or "WARNING" in line
                                           or "Traceback" in line or "exception" in line)]
        sections.append((f"operator log about {namespace} ({op.log_path})",
                         "\n".join(lines[-60:]) or "no warnings or errors"))
    return sections


def brief(status: dict[str, Any]) -> dict[str, Any]:
    """What a failed assertion needs of a Trial's status: phase, rewards, error, conditions."""
    return {
        "phase": status.get("phase"), "rewards": status.get("rewards"),
        "error": status.get("error"),
        "conditions": [(c.get("type"), c.get("reason"), c.get("message"))
                       for c in status.get("conditions") or []],
        "steps": [(s.get("name"), s.get("state"), s.get("rewards"), s.get("error"))
                  for s in status.get("steps") or []],
        "attempts": [(a.get("reason"), a.get("message")) for a in status.get("attempts") or []],
    }


@pytest.fixture(scope="session")
def crds(cluster) -> None:
    cluster.kubectl_run("apply", "-f", str(ROOT / "crds"))
    for name in ("tasks.shipyard.dev", "trials.shipyard.dev", "imagebuilds.shipyard.dev",
                 "sweeps.shipyard.dev", "warmpools.shipyard.dev"):
        cluster.kubectl_run("wait", "--for=condition=Established", f"crd/{name}",
                            "--timeout=60s")


@pytest.fixture(scope="session")
def operator(cluster, crds, tmp_path_factory) -> Iterator[OperatorProcess]:
    op = OperatorProcess(cluster.kubeconfig, tmp_path_factory.mktemp("operator") / "operator.log",
                         build_env(cluster.local))
    op.start()
    yield op
    op.stop()


# The local cluster's registry and buildkitd (hack/localcluster/imagebuilds.py); on another
# cluster set SHIPYARD_BUILD_* in the environment of the test run.
LOCAL_REGISTRY = "127.0.0.1:5055"
LOCAL_BUILD_ENV = {
    "SHIPYARD_BUILD_BACKEND": "buildkit",
    "SHIPYARD_BUILD_REGISTRY": f"{LOCAL_REGISTRY}/shipyard-tests",
    "SHIPYARD_BUILD_REGISTRY_INSECURE": "1",
    "SHIPYARD_BUILDKIT_ADDR": "tcp://127.0.0.1:1234",
    # buildkitd takes only clients with this certificate (mTLS; hack/localcluster/pki.py).
    "SHIPYARD_BUILDKIT_TLS_DIR": str(BUILDKIT_TLS_DIR),
    "SHIPYARD_BUILDER_IMAGE": "localhost/shipyard/buildctl:v0.34.2",
    "SHIPYARD_BUILD_HOST_NETWORK": "1",
    # Sweeps keep warm pods (docs/warm-pods.md; off by default): the sweep tests run with them.
    "SHIPYARD_SWEEP_WARM_PODS": "8",
    # The local cluster's pod CIDR and build network (hack/localcluster/operator_defaults.py):
    # `public` trial pods are kept out of them.
    "SHIPYARD_CLUSTER_CIDRS": "10.88.0.0/16,10.89.0.0/16",
    # A pod's first phase waits at most this long for its policy (docs/network-and-accelerators.md,
    # "The fence"): the test of a namespace that lets trial pods out waits it out.
    "SHIPYARD_NETWORK_FENCE_SEC": "10",
    # The probe container for trials with long timeouts (the local cluster's busybox).
    "SHIPYARD_PROBE_IMAGE": LOCAL_PROBE_IMAGE,
}


def cluster_defaults() -> dict[str, str]:
    """What `localcluster up` publishes for an operator run by hand (operator_defaults.py)."""
    hack = str(ROOT / "hack" / "localcluster")
    sys.path.insert(0, hack)
    try:
        import operator_defaults
    finally:
        sys.path.remove(hack)
    return dict(operator_defaults.DEFAULTS)


def local_runner() -> tuple[str, str]:
    """The static Go runner's image of this checkout (imported by `localcluster up`) and the
    folder of the runner and its loader (built by `up`: trial pods get them in ConfigMaps)."""
    hack = str(ROOT / "hack" / "localcluster")
    sys.path.insert(0, hack)
    try:
        import runner_image
        from layout import Layout
    finally:
        sys.path.remove(hack)
    return runner_image.reference(), str(runner_image.files_dir(Layout.default()))


def build_env(local: bool) -> dict[str, str]:
    """The local cluster's settings (each overridable from the environment): its builder,
    probe image and Go runner (SHIPYARD_RUNNER=sh runs the tests with runner.sh;
    SHIPYARD_RUNNER_FILES=none with the runner's init container)."""
    if not local:
        return {}
    image, files = local_runner()
    cluster = cluster_defaults()
    defaults = {**LOCAL_BUILD_ENV, "SHIPYARD_RUNNER_IMAGE": image,
                "SHIPYARD_RUNNER_FILES": files,
                # Where a prebuilt image's ENTRYPOINT is read (the nodes' mirrors); the
                # stand-in for astral.sh in builds.
                **{k: cluster[k] for k in ("SHIPYARD_REGISTRY_MIRRORS",
                                           "SHIPYARD_REGISTRY_INSECURE_HOSTS",
                                           "SHIPYARD_BUILD_ADD_HOSTS")}}
    return {k: os.environ.get(k, v) for k, v in defaults.items()}


class Shipyard:
    """Create Tasks and Trials in one namespace and wait for them."""

    def __init__(self, custom_objects, core_v1, namespace: str) -> None:
        self.api = custom_objects
        self.core = core_v1
        self.namespace = namespace

    def task(self, name: str, files: dict[str, str]) -> dict[str, Any]:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": {"name": name},
            "spec": {"source": {"inline": {"files": files}}},
        }
        return self.api.create_namespaced_custom_object(GROUP, VERSION, self.namespace, "tasks",
                                                        body)

    def trial(self, name: str, task: str, agent: dict[str, Any] | None = None,
              **spec: Any) -> dict[str, Any]:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Trial", "metadata": {"name": name},
            "spec": {"taskRef": {"name": task}, "agent": agent or {"name": "oracle"}, **spec},
        }
        return self.api.create_namespaced_custom_object(GROUP, VERSION, self.namespace, "trials",
                                                        body)

    def get(self, plural: str, name: str) -> dict[str, Any]:
        return self.api.get_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, name)

    def wait(self, name: str, timeout: float = 120, until=None) -> dict[str, Any]:
        """Poll the Trial until `until(trial)` (default: finished) or fail with its status."""
        until = until or (lambda t: t.get("status", {}).get("phase") in ("Completed", "Failed"))
        deadline = time.monotonic() + timeout
        trial: dict[str, Any] = {}
        while time.monotonic() < deadline:
            trial = self.get("trials", name)
            if until(trial):
                return trial
            time.sleep(0.5)
        raise AssertionError(f"trial {name} not there after {timeout}s: {trial.get('status')}")

    def wait_task(self, name: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            task = self.get("tasks", name)
            if task.get("status", {}).get("conditions"):
                return task
            time.sleep(0.3)
        raise AssertionError(f"task {name} never got a Ready condition")

    def events(self, name: str) -> list[Any]:
        events = self.core.list_namespaced_event(self.namespace).items
        return [e for e in events if e.involved_object.name == name]


@pytest.fixture
def shipyard(operator, custom_objects, core_v1, namespace) -> Shipyard:
    return Shipyard(custom_objects, core_v1, namespace)


def task_files(test_sh: str, solve_sh: str = "", toml_extra: str = "",
               instruction: str = "Do the thing.\n", agent_timeout: float = 60,
               verifier_timeout: float = 60) -> dict[str, str]:
    """A small single-step Harbor task on the local Debian image; `toml_extra` goes at the end
    of the [environment] table (start it with a new table header to add another)."""
    files = {
        "task.toml": (
            f'schema_version = "1.4"\n[agent]\ntimeout_sec = {agent_timeout}\n'
            f"[verifier]\ntimeout_sec = {verifier_timeout}\n"
            f'[environment]\ndocker_image = "{TASK_IMAGE}"\nworkdir = "/app"\n' + toml_extra
        ),
        "instruction.md": instruction,
        "tests/test.sh": "#!/bin/bash\n" + test_sh,
    }
    if solve_sh:
        files["solution/solve.sh"] = "#!/bin/bash\n" + solve_sh
    return files


def condition(trial: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in trial.get("status", {}).get("conditions", [])
                 if c["type"] == type_), None)


def wait_ready(core_v1, namespace: str, name: str, timeout: float = 60) -> str:
    """The pod's IP once it is Ready."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = core_v1.read_namespaced_pod(name, namespace)
        if pod.status.pod_ip and any(c.type == "Ready" and c.status == "True"
                                     for c in pod.status.conditions or []):
            return pod.status.pod_ip
        time.sleep(0.3)
    raise AssertionError(f"{namespace}/{name} never became ready")
