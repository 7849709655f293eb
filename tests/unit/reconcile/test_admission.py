"""Kueue admission (issue 27): the Workload of an attempt, its states, and the Trial's status
through queueing, admission and preemption."""

from __future__ import annotations

from decimal import Decimal

import pytest

from shipyard.api.models import TrialStatus
from shipyard.plan.sweep import kueue_labels
from shipyard.reconcile import admission
from shipyard.reconcile import trial_machine as machine
from shipyard.render.workload import admit_pod, build_workload, pod_requests, quantity
from tests.unit.helpers import HELLO_TOML, T0, at, plan_for, task, trial_body

GPU_TOML = HELLO_TOML.replace('workdir = "/app"', 'workdir = "/app"\ncpus = 1\n'
                              'memory_mb = 512\ngpus = 1\ngpu_types = ["t4"]')
SEPARATE = GPU_TOML + '\n[verifier.environment]\ndocker_image = "v"\ncpus = 3\nmemory_mb = 256\n'
SEPARATE = SEPARATE.replace("[verifier]", '[verifier]\nenvironment_mode = "separate"', 1)
CHOICE = admission.QueueChoice("gpu-queue", "high")


def workload(*conditions: tuple[str, str, str, str], **status) -> dict:
    return {"metadata": {"name": "w"}, "spec": {}, "status": {
        "conditions": [{"type": t, "status": s, "reason": r, "message": m}
                       for t, s, r, m in conditions], **status}}


def test_quantities() -> None:
    assert quantity("500m") == Decimal("0.5")
    assert quantity("2Gi") == 2 * 2**30
    assert quantity(3) == 3
    with pytest.raises(ValueError):
        quantity("lots")


def test_queue_from_label_else_default_only_where_kueue_is_served() -> None:
    labels = {"kueue.x-k8s.io/queue-name": "lq", "kueue.x-k8s.io/priority-class": "high"}
    assert admission.queue_of(labels, None, False) == admission.QueueChoice("lq", "high")
    assert admission.queue_of({}, "team", True) == admission.QueueChoice("team")
    assert admission.queue_of({}, "team", False) is None  # no Kueue: nothing changes
    assert admission.queue_of({}, None, True) is None
    assert admission.queue_of(None, None, True) is None


def test_workload_has_one_pod_set_sized_to_the_largest_pod() -> None:
    plan = plan_for(task(SEPARATE))
    body = build_workload(trial_body(), plan, "w-a1", "gpu-queue", ("high", 100), "probe:1")
    assert body["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert body["metadata"]["ownerReferences"][0]["kind"] == "Trial"
    assert body["metadata"]["labels"]["shipyard.dev/trial"] == "hello-oracle"
    assert body["spec"]["queueName"] == "gpu-queue"
    assert body["spec"]["priorityClassRef"] == {
        "group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}
    assert body["spec"]["priority"] == 100
    (pod_set,) = body["spec"]["podSets"]
    assert pod_set["count"] == 1
    requests = pod_set["template"]["spec"]["containers"][0]["resources"]["requests"]
    # The environment pod: 1 CPU, 512 Mi and the GPU, plus its sidecars (probe); the verifier
    # pod: 3 CPUs. The pod set holds the larger of each.
    assert quantity(requests["cpu"]) > 3
    assert quantity(requests["memory"]) > 512 * 2**20
    assert requests["nvidia.com/gpu"] == "1"
    spec = pod_set["template"]["spec"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"]
    assert "nodeAffinity" in spec["affinity"] or spec.get("nodeSelector")


def test_pod_requests_count_sidecars_and_init_containers() -> None:
    pod = {"spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}},
                                   {"resources": {"requests": {"cpu": "10m"}}}],
                    "initContainers": [{"resources": {"requests": {"cpu": "2"}}}]}}
    assert pod_requests(pod) == {"cpu": Decimal(2)}


def test_workload_states() -> None:
    assert isinstance(admission.workload_state(None), admission.Missing)
    queued = admission.workload_state(workload(
        ("QuotaReserved", "False", "Pending",
         "couldn't assign flavors to pod set trial: insufficient quota for nvidia.com/gpu in "
         "flavor t4, previously considered podsets requests (0) + current podset request (1) "
         "> maximum capacity (0)")))
    assert isinstance(queued, admission.Queued)
    assert queued.reason == "InsufficientQuota" and "nvidia.com/gpu" in queued.message
    assert admission.workload_state(workload(
        ("QuotaReserved", "False", "Inadmissible", "LocalQueue lq doesn't exist"))) == \
        admission.Queued("Inadmissible", "LocalQueue lq doesn't exist")
    admitted = admission.workload_state(workload(
        ("QuotaReserved", "True", "QuotaReserved", ""), ("Admitted", "True", "Admitted", ""),
        admission={"clusterQueue": "cq", "podSetAssignments": [
            {"name": "trial", "flavors": {"nvidia.com/gpu": "t4", "cpu": "default"}}]},
        admissionChecks=[{"name": "c", "podSetUpdates": [{"name": "trial",
                                                           "labels": {"a": "b"}}]}]))
    assert admitted == admission.Admitted("cq", {"nvidia.com/gpu": "t4", "cpu": "default"},
                                          ({"name": "trial", "labels": {"a": "b"}},))
    evicted = admission.workload_state(workload(
        ("Admitted", "True", "Admitted", ""),
        ("Evicted", "True", "Preempted", "Preempted to accommodate a workload with higher "
         "priority")))
    assert isinstance(evicted, admission.Evicted) and evicted.reason == "Preempted"
    # Being deleted (Kueue's finalizer still on it) is not an eviction, even when its
    # conditions still say Admitted or Evicted: the driver waits for it to be gone.
    deleting = workload(("Admitted", "True", "Admitted", ""),
                        ("Evicted", "True", "Preempted", "preempted"))
    deleting["metadata"]["deletionTimestamp"] = "2026-11-26T20:00:00Z"
    assert admission.workload_state(deleting) == admission.Deleting()


def test_a_workload_being_deleted_is_never_counted_as_evicted() -> None:
    """The operator's own release at a trial's end (or of an earlier attempt) sets the
    Workload's deletionTimestamp while Kueue's finalizer keeps it: the watch then reports it,
    and neither a queued nor an admitted (running) attempt may be preempted for it."""
    deleting = workload(("QuotaReserved", "True", "QuotaReserved", ""),
                        ("Admitted", "True", "Admitted", ""))
    deleting["metadata"]["deletionTimestamp"] = "2026-11-26T20:00:00Z"
    for running in (False, True):
        assert admission.eviction(deleting, True, running, "w") is None
    # Gone for good: an eviction only for an attempt that was admitted or has pods.
    assert admission.eviction(None, True, False, "w") is None
    assert admission.eviction(None, True, True, "w") == admission.Evicted(
        "WorkloadDeleted", "the Workload w was deleted")
    assert admission.eviction(None, False, True, "w") is None  # never watched: not known
    evicted = workload(("Evicted", "True", "Preempted", "to fit a higher priority"))
    assert admission.eviction(evicted, True, True, "w") == admission.Evicted(
        "Preempted", "to fit a higher priority")
    assert admission.eviction(workload(("Admitted", "True", "Admitted", "")), True, True,
                              "w") is None


def test_admitted_flavor_scheduling_is_merged_into_the_pod() -> None:
    labels, tolerations = admission.flavor_scheduling([
        {"spec": {"nodeLabels": {"pool": "gpu"},
                  "tolerations": [{"key": "gpu", "operator": "Exists"}]}},
        {"spec": {}}])
    pod = {"metadata": {"labels": {"x": "y"}},
           "spec": {"nodeSelector": {"k": "v"}, "tolerations": [{"key": "t"}]}}
    merged = admit_pod(pod, labels, tolerations,
                       [{"labels": {"team": "a"}, "nodeSelector": {"zone": "z"}}])
    assert merged["spec"]["nodeSelector"] == {"k": "v", "pool": "gpu", "zone": "z"}
    assert merged["spec"]["tolerations"] == [{"key": "t"}, {"key": "gpu", "operator": "Exists"}]
    assert merged["metadata"]["labels"] == {"x": "y", "team": "a"}
    assert pod["spec"]["nodeSelector"] == {"k": "v"}  # a copy


def started() -> tuple[TrialStatus, object]:
    plan = plan_for(task(GPU_TOML))
    return machine.start(TrialStatus(), plan, "digest", 1, T0), plan


def test_queued_then_admitted_status() -> None:
    status, _ = started()
    state = admission.Queued("InsufficientQuota", "insufficient quota for nvidia.com/gpu")
    status, outcome = admission.queued(status, CHOICE, "w-a1", state, at(1))
    assert status.phase == "Queued"
    assert status.queue.name == "gpu-queue" and status.queue.workload == "w-a1"
    cond = next(c for c in status.conditions if c.type == "Queued")
    assert (cond.status, cond.reason) == ("True", "InsufficientQuota")
    assert "nvidia.com/gpu" in cond.message
    assert [e[1] for e in outcome.events] == ["Queued"]
    again, outcome = admission.queued(status, CHOICE, "w-a1", state, at(5))
    assert outcome.events == [] and again.queue.queued_at == status.queue.queued_at
    status, outcome = admission.admitted(again, CHOICE, "w-a1", admission.Admitted(
        "cq", {"nvidia.com/gpu": "t4"}), at(9))
    assert status.phase == "Running" and status.queue.admitted_at
    assert status.phases[0].started_at == "2026-01-01T12:00:09Z"  # timeouts from admission
    cond = next(c for c in status.conditions if c.type == "Queued")
    assert (cond.status, cond.reason) == ("False", "Admitted")
    assert "ClusterQueue cq" in outcome.events[0][2]


def test_preemption_records_the_attempt_and_does_not_use_up_retries() -> None:
    status, plan = started()
    status, _ = admission.admitted(status, CHOICE, "w-a1", admission.Admitted("cq"), at(1))
    status = machine.on_pod_created(status, "env", "hello-oracle-env", at(2))
    status, outcome = admission.preempted(status, plan, admission.Evicted(
        "Preempted", "to accommodate a higher priority workload"), at(30))
    assert outcome.delete_pods == ["hello-oracle-env"]
    assert status.phase == "Queued" and status.attempt == 2 and status.pod_name is None
    assert status.queue.preemptions == 1 and status.queue.workload is None
    (record,) = status.attempts
    assert record.reason == "Preempted" and record.pod_name == "hello-oracle-env"
    assert "higher priority" in record.message
    assert all(p.state in ("Pending", "Running") for p in status.phases)
    # retries: 1 still allows one retry of an infrastructure failure after the preemption.
    status = machine.on_pod_created(status, "env", "hello-oracle-env-a2", at(40))
    retried, _ = machine.infrastructure_failure(status, plan, 1, "PodLost", "gone", at(50))
    assert machine.terminal_condition(retried) is None and retried.attempt == 3
    failed, _ = machine.infrastructure_failure(retried, plan, 1, "PodLost", "gone", at(60))
    assert machine.terminal_condition(failed).reason == "PodLost"


def test_sweep_passes_kueue_labels_to_its_trials() -> None:
    sweep = {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "lq",
                                     "kueue.x-k8s.io/priority-class": "low", "other": "x"}}}
    assert kueue_labels(sweep) == {"kueue.x-k8s.io/queue-name": "lq",
                                   "kueue.x-k8s.io/priority-class": "low"}
    assert kueue_labels({"metadata": {}}) == {}


def test_the_pod_set_counts_the_go_runners_init_container() -> None:
    """With a runner image every trial pod has the runner's init container (10m CPU, 16 Mi):
    the pod set asks at least for it (Kubernetes: max(each init container, sum of containers)),
    so Kueue's quota covers what the scheduler counts."""
    from shipyard.api.conventions import RUNNER_INIT_CONTAINER
    from shipyard.render.workload import trial_pods

    def requests(body: dict) -> dict[str, Decimal]:
        (pod_set,) = body["spec"]["podSets"]
        return {k: quantity(v) for k, v in
                pod_set["template"]["spec"]["containers"][0]["resources"]["requests"].items()}

    plan = plan_for(task())  # no cpus or memory declared: the init container dominates
    without = requests(build_workload(trial_body(), plan, "w", "q", None, None))
    body = build_workload(trial_body(), plan, "w", "q", None, None, "runner:1")
    with_runner = requests(body)
    assert without.get("memory", Decimal(0)) < 16 * 2**20
    assert with_runner["cpu"] == Decimal("0.01") and with_runner["memory"] == 16 * 2**20
    (pod,) = trial_pods(trial_body(), plan, None, "runner:1")
    assert [c["name"] for c in pod["spec"]["initContainers"]] == [RUNNER_INIT_CONTAINER]
    # A pod whose containers ask for more than the init container: their sum counts.
    big = plan_for(task(GPU_TOML))
    (pod,) = trial_pods(trial_body(), big, "probe:1", "runner:1")
    summed = pod_requests({"spec": {"containers": pod["spec"]["containers"]}})
    assert requests(build_workload(trial_body(), big, "w", "q", None, "probe:1", "runner:1")) \
        == summed
