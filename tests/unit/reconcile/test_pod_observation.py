"""What the reconciler reads from an environment pod object."""

from __future__ import annotations

import pytest

from shipyard.api.conventions import Role
from shipyard.reconcile.pod_observation import PodObservation, observe_pod
from shipyard.render.pod import build_trial_pod, runner_configmap_name
from shipyard.render.runner_parts import RunnerConfigMaps
from tests.unit.helpers import T0, plan_for, pod, trial_body, unschedulable_pod, waiting


def test_no_pod_is_absent() -> None:
    assert observe_pod(None) == PodObservation.absent()
    assert not observe_pod(None).exists


def test_running_ready_pod() -> None:
    seen = observe_pod(pod(ready=True))
    assert (seen.exists, seen.ready, seen.running, seen.deleting) == (True, True, True, False)
    assert seen.created_at == T0
    assert (seen.lost, seen.image_pull_error, seen.config_error, seen.unschedulable) == (
        None, None, None, None)


def test_running_pod_whose_phase_is_busy_is_not_ready() -> None:
    seen = observe_pod(pod(ready=False, probed=True))
    assert (seen.running, seen.ready, seen.lost, seen.probed) == (True, False, None, True)


def test_a_pod_without_a_readiness_probe_is_not_probed() -> None:
    """Its readiness says only that it runs: a phase's result is waited for by an exec."""
    seen = observe_pod(pod(ready=True))
    assert (seen.ready, seen.probed) == (True, False)


def test_just_created_pod_without_status() -> None:
    body = pod()
    del body["status"]
    seen = observe_pod(body)
    assert (seen.exists, seen.ready, seen.running, seen.lost) == (True, False, False, None)


def test_pod_being_deleted_is_lost() -> None:
    seen = observe_pod(pod(ready=True, deleting=True))
    assert seen.deleting
    assert seen.lost == "the environment pod is being deleted"


def test_evicted_pod_is_lost_with_the_reason() -> None:
    seen = observe_pod(pod(phase="Failed", status={
        "phase": "Failed", "reason": "Evicted",
        "message": "The node was low on resource: ephemeral-storage."}))
    assert seen.lost is not None
    assert "Evicted" in seen.lost
    assert "ephemeral-storage" in seen.lost


def test_a_node_low_on_disk_is_the_clusters_loss_a_pod_over_its_own_limit_is_its_codes() -> None:
    """Evicted for the node's pressure: lost, retried. Evicted for the pod's own storage limit
    (the agent wrote more than the task's storage_mb, or into an emptyDir past its size
    limit): what ran in the pod ended it (`container_exit`), never a free retry."""
    node = observe_pod(pod(phase="Failed", status={
        "phase": "Failed", "reason": "Evicted",
        "message": "The node was low on resource: ephemeral-storage. Threshold quantity: "
                   "2Gi, available: 1Gi. "}))
    assert node.lost and not node.container_exit
    for message in (
            "Pod ephemeral local storage usage exceeds the total limit of containers 64Mi. ",
            'Container main exceeded its local ephemeral storage limit "64Mi". ',
            'Usage of EmptyDir volume "shipyard" exceeds the limit "32Mi". '):
        own = observe_pod(pod(phase="Failed", status={
            "phase": "Failed", "reason": "Evicted", "message": message}))
        assert own.container_exit, message
        assert own.lost.startswith(f"the environment pod stopped (Evicted): {message.strip()}")
        assert ("storage_mb" in own.lost) == ("EmptyDir" not in message), own.lost
    # the same words from anything but an eviction (a pod's own text) decide nothing
    other = observe_pod(pod(phase="Failed", status={
        "phase": "Failed", "reason": "NodeLost",
        "message": "exceeded its local ephemeral storage limit"}))
    assert other.lost and not other.container_exit


def test_a_failed_pod_without_a_message_says_what_its_container_did() -> None:
    """A kubelet restarted while it started the container (chaos, issue 13): StartError."""
    seen = observe_pod(pod(phase="Failed", status={
        "phase": "Failed", "containerStatuses": [{"name": "main", "state": {"terminated": {
            "reason": "StartError", "exitCode": 128,
            "message": "failed to start containerd task \"372e\": context canceled: unknown"}}}]}))
    assert seen.lost == ("the environment pod stopped (Failed): container main terminated "
                         "(StartError, exit code 128): failed to start containerd task \"372e\": "
                         "context canceled: unknown")


def test_a_container_that_could_not_start_says_why_and_what_a_container_wrote_stays_out() -> None:
    """`workdir = "/etc/passwd"`: runc's StartError message says why; an agent's text in its
    termination log (which it can write, a secret in it) does not reach the status."""
    chdir = ('failed to create containerd task: failed to create shim task: OCI runtime create '
             'failed: runc create failed: unable to start container process: error during '
             'container init: chdir to cwd ("/etc/passwd") set in config.json failed: not a '
             'directory: unknown')
    seen = observe_pod(pod(container_state={"terminated": {
        "reason": "StartError", "exitCode": 128, "message": chdir}}))
    assert seen.lost == f"container main terminated (StartError, exit code 128): {chdir[:300]}"
    seen = observe_pod(pod(container_state={"terminated": {
        "reason": "Error", "exitCode": 1, "message": "sk-the-agents-key"}}))
    assert seen.lost == "container main terminated (Error, exit code 1)"
    seen = observe_pod(pod(phase="Failed", status={
        "phase": "Failed", "containerStatuses": [{"name": "main", "state": {"terminated": {
            "reason": "Error", "exitCode": 1, "message": "sk-the-agents-key"}}}]}))
    assert "sk-the-agents-key" not in (seen.lost or "")


def test_succeeded_pod_is_lost() -> None:
    seen = observe_pod(pod(status={"phase": "Succeeded"}))
    assert seen.lost is not None and "Succeeded" in seen.lost


def test_terminated_container_is_lost_with_its_exit_code() -> None:
    seen = observe_pod(pod(container_state={"terminated": {"reason": "OOMKilled",
                                                           "exitCode": 137}}))
    assert seen.lost == "container main terminated (OOMKilled, exit code 137)"


def test_deletion_explains_the_loss_before_a_terminated_container() -> None:
    seen = observe_pod(pod(deleting=True, container_state={"terminated": {"exitCode": 0}}))
    assert seen.lost == "the environment pod is being deleted"


def test_image_pull_back_off() -> None:
    seen = observe_pod(pod(phase="Pending", container_state=waiting(
        "ImagePullBackOff", 'Back-off pulling image "nope:1"')))
    assert seen.image_pull_error == 'ImagePullBackOff: Back-off pulling image "nope:1"'
    assert seen.lost is None


def test_image_pull_error_without_message_names_the_image() -> None:
    seen = observe_pod(pod(phase="Pending", container_state=waiting("ErrImagePull")))
    assert seen.image_pull_error == "ErrImagePull: python:3.12-slim"


def test_invalid_image_name_is_an_image_pull_error() -> None:
    seen = observe_pod(pod(phase="Pending", container_state=waiting("InvalidImageName", "bad")))
    assert seen.image_pull_error == "InvalidImageName: bad"


@pytest.mark.parametrize(("reason", "message", "permanent"), [
    ("ErrImagePull", "pull QPS exceeded", False),
    ("ErrImagePull", "dial tcp 10.0.0.1:5000: i/o timeout", False),
    ("ImagePullBackOff", 'Back-off pulling image "a:1"', False),
    ("ErrImagePull", 'failed to resolve reference "a:1": a:1: not found', True),
    ("ErrImagePull", "unexpected status 401 Unauthorized", True),
    ("ErrImageNeverPull", 'Container image "a:1" is not present with pull policy of Never', True),
    ("InvalidImageName", "bad", True),
])
def test_pull_errors_that_no_retry_mends_are_permanent(reason, message, permanent) -> None:
    seen = observe_pod(pod(phase="Pending", container_state=waiting(reason, message)))
    assert seen.image_pull_error and seen.image_pull_permanent is permanent


def test_container_config_error() -> None:
    seen = observe_pod(pod(phase="Pending", container_state=waiting(
        "CreateContainerConfigError", 'secret "openai" not found')))
    assert seen.config_error == 'CreateContainerConfigError: secret "openai" not found'
    assert seen.image_pull_error is None


def test_container_creating_is_no_error() -> None:
    seen = observe_pod(pod(phase="Pending", container_state=waiting("ContainerCreating")))
    assert (seen.image_pull_error, seen.config_error, seen.lost) == (None, None, None)


def test_unschedulable_carries_the_scheduler_message() -> None:
    seen = observe_pod(unschedulable_pod())
    assert seen.unschedulable == "0/1 nodes are available: 1 Insufficient cpu."
    assert not seen.running


def test_unschedulable_without_message() -> None:
    body = unschedulable_pod()
    del body["status"]["conditions"][0]["message"]
    assert observe_pod(body).unschedulable == "no node can run the pod"


def test_pending_scheduling_for_another_reason_is_not_unschedulable() -> None:
    seen = observe_pod(pod(phase="Pending", conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]))
    assert seen.unschedulable is None


def test_creation_time_with_fractional_seconds() -> None:
    body = pod()
    body["metadata"]["creationTimestamp"] = "2026-01-01T12:00:00.250000Z"
    assert observe_pod(body).created_at == T0.replace(microsecond=250000)


def probe_pod(phase: str = "Running", probe: dict | None = None) -> dict:
    """A pod with a `probe` container (render.pod.probe_container), whose readiness says that a
    phase runs; the pod's own Ready condition is then not what the operator reads."""
    body = pod(phase=phase, ready=True)
    body["spec"] = {"containers": [{"name": "main"}, {"name": "probe"}]}
    statuses = [{"name": "main", "state": {"running": {}}, "ready": True}]
    if probe is not None:
        statuses.append({"name": "probe", **probe})
    body["status"]["containerStatuses"] = statuses
    return body


def test_with_a_probe_container_a_phase_runs_while_that_container_is_ready() -> None:
    busy = observe_pod(probe_pod(probe={"state": {"running": {}}, "ready": True}))
    assert (busy.running, busy.ready) == (True, False)
    idle = observe_pod(probe_pod(probe={"state": {"running": {}}, "ready": False}))
    assert (idle.running, idle.ready) == (True, True)


def test_with_a_probe_container_nothing_is_read_before_it_runs_nor_from_a_pending_pod() -> None:
    assert not observe_pod(probe_pod()).ready
    assert not observe_pod(probe_pod(probe={"state": {"waiting": {"reason": "ContainerCreating"}},
                                            "ready": False})).ready
    assert not observe_pod(probe_pod(phase="Pending",
                                     probe={"state": {"running": {}}, "ready": False})).ready


def test_a_probe_container_that_ended_loses_the_pod() -> None:
    seen = observe_pod(probe_pod(probe={"state": {"terminated": {"exitCode": 127}},
                                        "ready": False}))
    assert seen.lost == "container probe terminated (Error, exit code 127)"
    assert not seen.ready


def test_a_runtime_that_timed_out_creating_the_container_is_waited_for() -> None:
    """The kubelet tries again; the start timeout bounds it (an overloaded node)."""
    seen = observe_pod(pod(phase="Pending", container_state=waiting(
        "CreateContainerError", "context deadline exceeded")))
    assert (seen.config_error, seen.lost) == (None, None)


def test_a_pod_s_runner_is_the_configmap_it_mounts() -> None:
    """Content-addressed: a pod an older operator made mounts another (`chained_phases`)."""
    manifest = build_trial_pod(trial_body(), plan_for(), Role.ENV, None, "p", None)
    assert observe_pod(manifest).runner == runner_configmap_name()
    manifest["spec"]["volumes"] = [v for v in manifest["spec"]["volumes"]
                                   if v["name"] != "runner"]
    assert observe_pod(manifest).runner is None


def test_a_pod_s_go_runner_is_its_first_configmap_part_or_its_init_container_s_image() -> None:
    """What `machine.folds_verifier` compares with the operator's own Go runner."""
    parts = RunnerConfigMaps(("shipyard-runner-go-abc-0", "shipyard-runner-go-abc-1"))
    from_parts = build_trial_pod(trial_body(), plan_for(), Role.ENV, None, "p", None,
                                 runner=parts)
    assert observe_pod(from_parts).go_runner == "shipyard-runner-go-abc-0"
    from_image = build_trial_pod(trial_body(), plan_for(), Role.ENV, None, "p", None,
                                 runner="localhost/runner:1")
    assert observe_pod(from_image).go_runner == "localhost/runner:1"
    sh = build_trial_pod(trial_body(), plan_for(), Role.ENV, None, "p", None)
    assert observe_pod(sh).go_runner is None
