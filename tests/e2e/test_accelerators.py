"""GPU and TPU trials on the local cluster (issue 6).

The local node has none of the accelerators these trials ask for (`localcluster up` advertises
T4 GPUs and a v6e TPU host for the Kueue tests): a GPU or TPU trial fails promptly with
`Unschedulable` and the scheduler's message. Then the test makes the node look like a GKE
accelerator node (the node labels GKE sets, and the extended resource advertised in the node's
status, which the kubelet keeps because no device plugin manages it) and the same trial
schedules and completes.
Labels and capacity are put back as they were afterwards.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import ROOT, condition, task_files

NODE = "localhost"
REWARD_FROM_ENV = (
    'if [ "$(cat /app/resources.txt)" = ok ]; then echo 1; else echo 0; fi '
    "> /logs/verifier/reward.txt\n"
)
# The solution records that the pod got its accelerator request (from the container's view the
# request is invisible, so the test checks the pod object; the solution only proves it ran).
SOLVE = "echo ok > /app/resources.txt\n"


class FakeAccelerators:
    """Node labels and status capacity that make the local node look like an accelerator node;
    `remove` puts back what the node had before (`localcluster up` advertises accelerators of
    other types for the Kueue tests)."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.labels: dict[str, str | None] = {}  # label → its value before (None: absent)
        self.resources: dict[str, dict[str, str | None]] = {}  # escaped → field → before

    def node(self) -> dict:
        return json.loads(self.cluster.kubectl_run("get", "node", NODE, "-o", "json").stdout)

    def add(self, labels: dict[str, str], resource: str, count: int) -> None:
        node = self.node()
        for key in labels:
            self.labels.setdefault(key, node["metadata"].get("labels", {}).get(key))
        self.cluster.kubectl_run(
            "label", "node", NODE, "--overwrite", *[f"{k}={v}" for k, v in labels.items()])
        escaped = resource.replace("/", "~1")
        self.resources.setdefault(escaped, {f: node["status"].get(f, {}).get(resource)
                                            for f in ("capacity", "allocatable")})
        patch = [{"op": "add", "path": f"/status/{field}/{escaped}", "value": str(count)}
                 for field in ("capacity", "allocatable")]
        self.cluster.kubectl_run("patch", "node", NODE, "--subresource=status", "--type=json",
                                 "-p", json.dumps(patch))

    def remove(self) -> None:
        if self.labels:
            self.cluster.kubectl_run(
                "label", "node", NODE, "--overwrite",
                *[f"{k}-" if v is None else f"{k}={v}" for k, v in self.labels.items()],
                check=False)
        for escaped, before in self.resources.items():
            for field, value in before.items():
                op = ({"op": "remove", "path": f"/status/{field}/{escaped}"} if value is None
                      else {"op": "add", "path": f"/status/{field}/{escaped}", "value": value})
                self.cluster.kubectl_run("patch", "node", NODE, "--subresource=status",
                                         "--type=json", "-p", json.dumps([op]), check=False)
        self.labels, self.resources = {}, {}


@pytest.fixture
def fake_accelerators(cluster) -> Iterator[FakeAccelerators]:
    if not cluster.local:
        pytest.skip("changes the node: only on the project's own local cluster")
    fake = FakeAccelerators(cluster)
    try:
        yield fake
    finally:
        fake.remove()


def pods_of(shipyard, trial: str) -> list:
    return shipyard.core.list_namespaced_pod(
        shipyard.namespace, label_selector=f"shipyard.dev/trial={trial}").items


def env_pod(shipyard, trial: str) -> dict:
    pods = pods_of(shipyard, trial)
    assert pods, f"no pod for {trial}"
    return shipyard.core.api_client.sanitize_for_serialization(pods[0])


def run_unschedulable_then_schedulable(shipyard, fake, task: str, toml: str, resource: str,
                                       count: int, labels: dict[str, str]) -> dict:
    shipyard.task(task, task_files(REWARD_FROM_ENV, solve_sh=SOLVE, toml_extra=toml))
    grace = {"unschedulableGraceSec": 3}
    shipyard.trial(f"{task}-1", task, environment=grace)
    began = time.monotonic()
    trial = shipyard.wait(f"{task}-1", timeout=60)
    failed = condition(trial, "Failed")
    assert failed is not None and failed["reason"] == "Unschedulable", trial["status"]
    assert "0/1 nodes are available" in failed["message"]
    assert time.monotonic() - began < 30  # the grace, not the 600 s environment start timeout
    # Its pod is deleted (else it would take the accelerator as soon as there is one).
    deadline = time.monotonic() + 30
    while pods_of(shipyard, f"{task}-1") and time.monotonic() < deadline:
        time.sleep(0.3)

    fake.add(labels, resource, count)
    shipyard.trial(f"{task}-2", task, keepPods=True, environment=grace)
    trial = shipyard.wait(f"{task}-2", timeout=120)
    assert trial["status"]["phase"] == "Completed", trial["status"]
    assert trial["status"]["reward"] == 1.0
    pod = env_pod(shipyard, f"{task}-2")
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {resource: str(count)}
    assert resources["requests"][resource] == str(count)
    return pod


def test_gpu_trial_is_unschedulable_until_the_node_has_the_gpu(shipyard, fake_accelerators):
    pod = run_unschedulable_then_schedulable(
        shipyard, fake_accelerators, "gpu",
        'gpus = 1\ngpu_types = ["h100", "L4"]\n', "nvidia.com/gpu", 1,
        {"cloud.google.com/gke-accelerator": "nvidia-l4"})
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == ["nvidia-h100-80gb", "nvidia-l4"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "spec"]["tolerations"]
    assert pod["spec"]["nodeName"] == NODE


def test_tpu_trial_is_unschedulable_until_the_node_has_the_slice(shipyard, fake_accelerators):
    pod = run_unschedulable_then_schedulable(
        shipyard, fake_accelerators, "tpu",
        'tpu = { type = "v5e", topology = "2x2" }\n', "google.com/tpu", 4,
        {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
         "cloud.google.com/gke-tpu-topology": "2x2"})
    assert pod["spec"]["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "2x2"}
    assert pod["spec"]["nodeName"] == NODE


def test_multi_host_tpu_is_refused_at_admission_not_left_pending(shipyard):
    shipyard.task("big-tpu", task_files(REWARD_FROM_ENV, solve_sh=SOLVE,
                                        toml_extra='tpu = { type = "v5p", topology = "2x2x2" }\n'))
    shipyard.trial("big-tpu-1", "big-tpu")
    trial = shipyard.wait("big-tpu-1", timeout=30)
    failed = condition(trial, "Failed")
    assert failed["reason"] == "TaskInvalid"
    assert "environment.tpu.topology" in failed["message"]
    assert "4 chips, topology 2x2x1" in failed["message"]
    assert not trial["status"].get("podName")


def test_gpu_and_tpu_examples_run_where_the_node_has_them(cluster, shipyard, namespace,
                                                          fake_accelerators):
    fake_accelerators.add({"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"},
                          "nvidia.com/gpu", 2)
    fake_accelerators.add({"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                           "cloud.google.com/gke-tpu-topology": "2x2"}, "google.com/tpu", 8)
    for example in ("gpu", "tpu"):
        root = ROOT / "examples" / example
        cluster.kubectl_run("-n", namespace, "apply", "-f", str(root / "task.yaml"),
                            "-f", str(root / "trial-oracle.yaml"),
                            "-f", str(root / "trial-nop.yaml"))
    for example in ("gpu", "tpu"):
        assert shipyard.wait(f"{example}-oracle", timeout=120)["status"]["reward"] == 1.0
        assert shipyard.wait(f"{example}-nop", timeout=120)["status"]["reward"] == 0.0
