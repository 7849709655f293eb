"""Kueue admission (issue 27) on the local cluster, with Kueue v0.17 as `localcluster up` runs it.

Each test makes its own ResourceFlavor, ClusterQueue and WorkloadPriorityClasses (named after
its namespace, removed afterwards) and a LocalQueue named `default` in its namespace. Kueue's
plain Pod integration is off in these namespaces (not labelled `shipyard.dev/kueue-pods`): on
the shared development cluster every checkout's test run re-applies the Trial CRD, and Kueue's
pod webhook, which reads a pod's owning Trial from its cache, then answered "Trial not found"
for a while. Trial pods are admitted through their Trial's Workload only; none is gated.
The node advertises `nvidia.com/gpu` (`localcluster up`; no device exists, the count is all a
pod gets).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import GROUP, ROOT, VERSION, condition, task_files

KUEUE = ("kueue.x-k8s.io", "v1beta2")
NODE = "localhost"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
GPU_TOML = 'gpus = 1\ngpu_types = ["t4"]\n'
T4 = {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
REWARD = ("if [ -e /app/done ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n")


class Queues:
    """The cluster-scoped Kueue objects of one test, and its LocalQueue."""

    def __init__(self, cluster, custom_objects, namespace: str) -> None:
        self.cluster, self.api, self.namespace = cluster, custom_objects, namespace
        self.cluster_scoped: list[tuple[str, str]] = []
        self.flavor = f"t4-{namespace}"
        self.cluster_queue = f"cq-{namespace}"

    def create(self, plural: str, body: dict[str, Any]) -> None:
        self.api.create_cluster_custom_object(*KUEUE, plural, body)
        self.cluster_scoped.append((plural, body["metadata"]["name"]))

    def setup(self, gpus: int, preemption: bool = False, cohort: str | None = None,
              namespace: str | None = None, suffix: str = "") -> None:
        namespace = namespace or self.namespace
        if not any(name == self.flavor for _, name in self.cluster_scoped):
            self.create("resourceflavors", {"apiVersion": "kueue.x-k8s.io/v1beta2",
                                            "kind": "ResourceFlavor",
                                            "metadata": {"name": self.flavor},
                                            "spec": {"nodeLabels": T4}})
        quota = [{"name": "cpu", "nominalQuota": "100"},
                 {"name": "memory", "nominalQuota": "100Gi"},
                 {"name": "ephemeral-storage", "nominalQuota": "1Ti"},
                 {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)}]
        spec: dict[str, Any] = {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "resourceGroups": [{"coveredResources": [q["name"] for q in quota],
                                "flavors": [{"name": self.flavor, "resources": quota}]}],
        }
        if preemption:
            spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
        if cohort:
            spec["cohortName"] = cohort
        self.create("clusterqueues", {"apiVersion": "kueue.x-k8s.io/v1beta2",
                                      "kind": "ClusterQueue",
                                      "metadata": {"name": self.cluster_queue + suffix},
                                      "spec": spec})
        body = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                "metadata": {"name": "default", "namespace": namespace},
                "spec": {"clusterQueue": self.cluster_queue + suffix}}
        self.api.create_namespaced_custom_object(*KUEUE, namespace, "localqueues", body)

    def priority(self, name: str, value: int) -> str:
        full = f"{name}-{self.namespace}"
        self.create("workloadpriorityclasses", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
            "metadata": {"name": full}, "value": value})
        return full

    def cleanup(self) -> None:
        for plural, name in reversed(self.cluster_scoped):
            with contextlib.suppress(Exception):
                self.api.delete_cluster_custom_object(*KUEUE, plural, name)


def advertise_gpus(cluster) -> None:
    """What `localcluster up` advertises (a test of the accelerators may have changed it)."""
    node = json.loads(cluster.kubectl_run("get", "node", NODE, "-o", "json").stdout)
    if int(node["status"].get("allocatable", {}).get("nvidia.com/gpu", "0")) < 4:
        patch = [{"op": "add", "path": f"/status/{f}/nvidia.com~1gpu", "value": "4"}
                 for f in ("capacity", "allocatable")]
        cluster.kubectl_run("patch", "node", NODE, "--subresource=status", "--type=json",
                            "-p", json.dumps(patch))
    cluster.kubectl_run("label", "node", NODE, "--overwrite",
                        *[f"{k}={v}" for k, v in T4.items()])


@pytest.fixture
def queues(cluster, custom_objects, core_v1, namespace) -> Iterator[Queues]:
    if not cluster.local:
        try:
            custom_objects.get_api_resources(*KUEUE)
        except Exception:
            pytest.skip("Kueue is not installed on this cluster (localcluster up installs it)")
    advertise_gpus(cluster)
    stop = keep_trial_crd(cluster)
    q = Queues(cluster, custom_objects, namespace)
    try:
        yield q
    finally:
        stop.set()
        q.cleanup()


def keep_trial_crd(cluster) -> threading.Event:
    """The Trial CRD of this checkout (phase Queued) applied, and applied again whenever it
    changes: another checkout's test run on the shared cluster may apply an older one (without
    Queued) meanwhile. A superset: the older checkouts' trials are not affected."""
    crd = str(ROOT / "crds" / "trials.shipyard.dev.yaml")
    stop = threading.Event()
    cluster.kubectl_run("apply", "-f", crd)

    def run() -> None:
        while not stop.wait(1.0):
            found = cluster.kubectl_run("get", "crd", "trials.shipyard.dev", "-o",
                                        "jsonpath={.spec.versions[0].schema}", check=False)
            if found.returncode == 0 and "Queued" not in found.stdout:
                cluster.kubectl_run("apply", "-f", crd, check=False)

    threading.Thread(target=run, daemon=True).start()
    return stop


def labelled_trial(shipyard, name: str, task: str, agent: dict | None = None,
                   priority: str | None = None, **spec: Any) -> None:
    labels = {QUEUE_LABEL: "default", **({PRIORITY_LABEL: priority} if priority else {})}
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Trial",
            "metadata": {"name": name, "labels": labels},
            "spec": {"taskRef": {"name": task}, "agent": agent or {"name": "oracle"}, **spec}}
    shipyard.api.create_namespaced_custom_object(GROUP, VERSION, shipyard.namespace, "trials",
                                                 body)


def trial_pods(shipyard) -> list[Any]:
    return [p for p in shipyard.core.list_namespaced_pod(
        shipyard.namespace, label_selector="shipyard.dev/trial").items
        if not p.metadata.deletion_timestamp]


def workloads_of(shipyard, trial: str) -> list[dict[str, Any]]:
    return shipyard.api.list_namespaced_custom_object(
        *KUEUE, shipyard.namespace, "workloads",
        label_selector=f"shipyard.dev/trial={trial}")["items"]


def admitted(workload: dict[str, Any]) -> bool:
    return any(c["type"] == "Admitted" and c["status"] == "True"
               for c in (workload.get("status") or {}).get("conditions") or [])


def owner(pod) -> str:
    return next(o.name for o in pod.metadata.owner_references if o.kind == "Trial")


def test_gpu_quota_of_two_admits_two_trials_at_a_time(shipyard, queues):
    queues.setup(gpus=2)
    # The oracle sleeps a little so that the admitted trials overlap the queued ones.
    shipyard.task("gpu", task_files(REWARD, solve_sh="sleep 3; echo ok > /app/done\n",
                                    toml_extra=GPU_TOML))
    names = [f"gpu-{i}" for i in range(6)]
    for name in names:
        labelled_trial(shipyard, name, "gpu")
    most, queued_reasons, checked = 0, set(), set()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        pods = trial_pods(shipyard)
        most = max(most, len({owner(p) for p in pods}))
        for pod in pods:
            trial = owner(pod)
            if pod.metadata.name in checked:
                continue
            # No pod before its admission: the trial's Workload is Admitted while it exists.
            assert any(admitted(w) for w in workloads_of(shipyard, trial)), pod.metadata.name
            assert not pod.spec.scheduling_gates, "gated a second time by Kueue's pod webhook"
            assert pod.spec.node_selector.get("cloud.google.com/gke-accelerator") == \
                "nvidia-tesla-t4"  # the admitted flavor's node labels
            checked.add(pod.metadata.name)
        trials = [shipyard.get("trials", n) for n in names]
        for t in trials:
            if t.get("status", {}).get("phase") == "Queued":
                queued_reasons.add(condition(t, "Queued")["reason"])
                assert not t["status"].get("podName")
        if all(t.get("status", {}).get("phase") in ("Completed", "Failed") for t in trials):
            break
        time.sleep(0.3)
    else:
        raise AssertionError(f"not all finished: {[t.get('status') for t in trials]}")
    assert most <= 2, f"{most} GPU trials had pods at once with a quota of 2"
    assert most == 2
    assert "InsufficientQuota" in queued_reasons, queued_reasons
    for t in trials:
        assert t["status"]["reward"] == 1.0, t["status"]
        assert t["status"]["queue"]["clusterQueue"] == queues.cluster_queue
        assert t["status"]["attempts"] == []
    assert len(checked) == 6
    # The Workloads are gone with the trials' ends: the quota is free at once.
    deadline = time.monotonic() + 30
    while any(workloads_of(shipyard, n) for n in names) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not any(workloads_of(shipyard, n) for n in names)


def test_high_priority_trial_preempts_a_low_one_which_requeues_and_completes(shipyard, queues):
    queues.setup(gpus=1, preemption=True)
    low, high = queues.priority("low", 10), queues.priority("high", 1000)
    shipyard.task("gpu", task_files(REWARD, toml_extra=GPU_TOML, agent_timeout=120))
    agent = {"name": "command", "command": "sleep 8; echo ok > /app/done"}
    labelled_trial(shipyard, "low", "gpu", agent, priority=low)
    first_pod = shipyard.wait("low", timeout=90, until=agent_running)["status"]["podName"]
    labelled_trial(shipyard, "high", "gpu", agent, priority=high)
    requeued = shipyard.wait("low", timeout=60, until=lambda t: t.get("status", {}).get(
        "attempts"))
    (record,) = requeued["status"]["attempts"]
    assert record["reason"] == "Preempted" and record["podName"] == first_pod
    assert requeued["status"]["queue"]["preemptions"] == 1
    done_high = shipyard.wait("high", timeout=120)
    assert done_high["status"]["reward"] == 1.0, done_high["status"]
    done_low = shipyard.wait("low", timeout=180)
    assert done_low["status"]["phase"] == "Completed", done_low["status"]
    assert done_low["status"]["reward"] == 1.0
    assert done_low["status"]["attempt"] == 2
    assert [a["reason"] for a in done_low["status"]["attempts"]] == ["Preempted"]
    reasons = [e.reason for e in shipyard.events("low")]
    assert "Preempted" in reasons and reasons.count("Admitted") == 2


def test_separate_verifier_task_is_admitted_once(shipyard, queues):
    queues.setup(gpus=1)
    files = task_files("echo 1 > /logs/verifier/reward.txt\n", solve_sh="true\n",
                       toml_extra=GPU_TOML)
    files["task.toml"] = files["task.toml"].replace(
        "[verifier]\n", '[verifier]\nenvironment_mode = "separate"\n')
    shipyard.task("sep", files)
    labelled_trial(shipyard, "sep-1", "sep")
    done = shipyard.wait("sep-1", timeout=180)
    assert done["status"]["reward"] == 1.0, done["status"]
    reasons = [e.reason for e in shipyard.events("sep-1")]
    assert reasons.count("Admitted") == 1 and reasons.count("Queued") == 1, reasons
    created = [e.message for e in shipyard.events("sep-1") if e.reason in ("PodCreated",
                                                                          "Started")]
    assert any("verifier pod" in m for m in created), created


def test_operator_killed_while_queued_loses_and_duplicates_nothing(operator, shipyard, queues):
    queues.setup(gpus=1)
    shipyard.task("gpu", task_files(REWARD, toml_extra=GPU_TOML, agent_timeout=120))
    agent = {"name": "command", "command": "sleep 6; echo ok > /app/done"}
    labelled_trial(shipyard, "first", "gpu", agent)
    shipyard.wait("first", timeout=90, until=lambda t: t.get("status", {}).get("podName"))
    labelled_trial(shipyard, "second", "gpu", agent)
    queued = shipyard.wait("second", timeout=60,
                           until=lambda t: t.get("status", {}).get("phase") == "Queued")
    workload = queued["status"]["queue"]["workload"]
    operator.kill()
    time.sleep(2)
    operator.start()
    for name in ("first", "second"):
        done = shipyard.wait(name, timeout=180)
        assert done["status"]["reward"] == 1.0, done["status"]
        assert done["status"]["attempts"] == []
    second = shipyard.get("trials", "second")
    assert second["status"]["queue"]["workload"] == workload  # found again, not a second one
    reasons = [e.reason for e in shipyard.events("second")]
    assert reasons.count("Queued") == 1 and reasons.count("Admitted") == 1, reasons


def agent_running(trial: dict[str, Any]) -> bool:
    return any(p["name"] == "agent" and p.get("startedAt") for p in
               trial.get("status", {}).get("phases", []))


def evicted(workload: dict[str, Any]) -> bool:
    return any(c["type"] in ("Evicted", "Preempted") and c["status"] == "True"
               for c in (workload.get("status") or {}).get("conditions") or [])


def test_operator_killed_during_preemption_loses_and_duplicates_nothing(operator, shipyard,
                                                                        queues):
    """The operator is SIGKILLed the moment Kueue evicts the low-priority trial's Workload
    (the trial still has its pod; its attempt is not recorded yet, or only just) and started
    again: the low trial is re-queued once, its first attempt recorded once, and both trials
    complete; never two GPU pods at once with a quota of one."""
    queues.setup(gpus=1, preemption=True)
    low, high = queues.priority("low", 10), queues.priority("high", 1000)
    shipyard.task("gpu", task_files(REWARD, toml_extra=GPU_TOML, agent_timeout=120))
    agent = {"name": "command", "command": "sleep 8; echo ok > /app/done"}
    labelled_trial(shipyard, "low", "gpu", agent, priority=low)
    first_pod = shipyard.wait("low", timeout=90, until=agent_running)["status"]["podName"]
    (first_workload,) = [w["metadata"]["name"] for w in workloads_of(shipyard, "low")]
    labelled_trial(shipyard, "high", "gpu", agent, priority=high)
    deadline = time.monotonic() + 60
    while not any(evicted(w) for w in workloads_of(shipyard, "low")
                  if w["metadata"]["name"] == first_workload):
        assert time.monotonic() < deadline, "Kueue did not evict the low trial"
        time.sleep(0.05)
    operator.kill()
    at_kill = shipyard.get("trials", "low")["status"]
    time.sleep(3)
    operator.start()
    most, pods_seen = 0, set()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        pods = trial_pods(shipyard)
        most = max(most, len({owner(p) for p in pods}))
        pods_seen |= {(owner(p), p.metadata.name) for p in pods}
        trials = [shipyard.get("trials", n) for n in ("low", "high")]
        if all(t.get("status", {}).get("phase") in ("Completed", "Failed") for t in trials):
            break
        time.sleep(0.3)
    else:
        raise AssertionError(f"not finished: {[t.get('status') for t in trials]}")
    done_low, done_high = trials
    assert done_high["status"]["reward"] == 1.0, done_high["status"]
    assert done_high["status"]["attempts"] == []
    assert done_low["status"]["phase"] == "Completed", done_low["status"]
    assert done_low["status"]["reward"] == 1.0
    assert done_low["status"]["attempt"] == 2, (done_low["status"], at_kill)
    (record,) = done_low["status"]["attempts"]
    assert record["reason"] == "Preempted" and record["podName"] == first_pod
    assert done_low["status"]["queue"]["preemptions"] == 1
    assert most <= 1, f"{most} GPU trials had pods at once with a quota of 1"
    assert len({name for trial, name in pods_seen if trial == "low"} - {first_pod}) <= 1
    reasons = [e.reason for e in shipyard.events("low")]
    assert reasons.count("Preempted") == 1 and reasons.count("Admitted") == 2, reasons
    deadline = time.monotonic() + 30
    while workloads_of(shipyard, "low") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not workloads_of(shipyard, "low"), "a Workload of the low trial was left behind"


def test_keep_pods_releases_the_workload_and_its_quota_while_the_pods_remain(shipyard, queues):
    """A trial with keepPods keeps its (idle) pod after its end, but its Workload goes at once:
    with a GPU quota of one, the next GPU trial is admitted and runs while the first's pod is
    still there."""
    queues.setup(gpus=1)
    shipyard.task("gpu", task_files(REWARD, solve_sh="echo ok > /app/done\n",
                                    toml_extra=GPU_TOML))
    pods = []
    for name in ("kept-1", "kept-2"):
        labelled_trial(shipyard, name, "gpu", keepPods=True)
        done = shipyard.wait(name, timeout=180)
        assert done["status"]["reward"] == 1.0, done["status"]
        pods.append(done["status"]["podName"])
        deadline = time.monotonic() + 30
        while workloads_of(shipyard, name) and time.monotonic() < deadline:
            time.sleep(0.3)
        assert not workloads_of(shipyard, name), f"{name}'s Workload still holds the quota"
    # kept-2 was admitted (quota 1) while kept-1's pod was still there; both pods remain
    for pod in pods:
        found = shipyard.core.read_namespaced_pod(pod, shipyard.namespace)
        assert found.metadata.deletion_timestamp is None, pod
    second = shipyard.get("trials", "kept-2")
    assert second["status"]["attempts"] == [] and second["status"]["queue"]["clusterQueue"]


def test_two_namespaces_in_one_cohort_share_the_gpus_fairly(shipyard, queues, core_v1,
                                                            custom_objects):
    """A Sweep in each of two namespaces, each with its LocalQueue and ClusterQueue
    (`nvidia.com/gpu: 1` each, one cohort): never more than two GPU trials at once, both
    namespaces are admitted while both wait, and the share of admitted trials per namespace
    over time is printed (`pytest -s`)."""
    from tests.conftest import TEST_NAMESPACE_PREFIX

    other = f"{TEST_NAMESPACE_PREFIX}-{uuid.uuid4().hex[:8]}"
    core_v1.create_namespace({"metadata": {"name": other}})
    try:
        cohort = f"cohort-{shipyard.namespace}"
        queues.setup(gpus=1, cohort=cohort)
        queues.setup(gpus=1, cohort=cohort, namespace=other, suffix="-b")
        for _ in range(100):  # pods wait for the namespace's default ServiceAccount
            if core_v1.list_namespaced_service_account(other).items:
                break
            time.sleep(0.2)
        files = task_files(REWARD, solve_sh="sleep 2; echo ok > /app/done\n",
                           toml_extra=GPU_TOML)
        for ns in (shipyard.namespace, other):
            custom_objects.create_namespaced_custom_object(GROUP, VERSION, ns, "tasks", {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": {"name": "gpu"},
                "spec": {"source": {"inline": {"files": files}}}})
            custom_objects.create_namespaced_custom_object(GROUP, VERSION, ns, "sweeps", {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "Sweep",
                "metadata": {"name": "s", "labels": {QUEUE_LABEL: "default"}},
                "spec": {"tasks": {"names": ["gpu"]}, "agents": [{"name": "oracle"}],
                         "attempts": 4, "parallelism": 4}})
        samples: list[dict[str, int]] = []
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            running = {ns: len({owner(p) for p in core_v1.list_namespaced_pod(
                ns, label_selector="shipyard.dev/trial").items
                if not p.metadata.deletion_timestamp}) for ns in (shipyard.namespace, other)}
            if sum(running.values()):
                samples.append(running)
            sweeps = [custom_objects.get_namespaced_custom_object(GROUP, VERSION, ns,
                                                                  "sweeps", "s")
                      for ns in (shipyard.namespace, other)]
            if all(condition(sw, "Complete") and condition(sw, "Complete")["status"] == "True"
                   for sw in sweeps):
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"sweeps not complete: {[sw.get('status') for sw in sweeps]}")
        for sw in sweeps:
            assert sw["status"]["counts"]["completed"] == 4, sw["status"]
            assert sw["status"]["mean"] == 1.0, sw["status"]
        assert max(sum(s.values()) for s in samples) <= 2
        total = sum(sum(s.values()) for s in samples)
        share = {ns: sum(s[ns] for s in samples) / total for ns in (shipyard.namespace, other)}
        both = [s for s in samples if all(s.values())]
        print(f"\nfair sharing: admitted-trial share over {len(samples)} samples: "
              + ", ".join(f"{ns} {v:.0%}" for ns, v in share.items())
              + f"; both admitted at once in {len(both)} samples")
        assert all(v >= 0.25 for v in share.values()), share
    finally:
        core_v1.delete_namespace(other)
