"""Trials in a namespace set up as platform teams set up shared ones: a ResourceQuota that
requires limits, or that holds only so many pods, and Pod Security levels. The apiserver
refuses such a pod at its create; a refusal for good fails the trial at once in the
apiserver's own words (`PodRejected`), a quota that is only full now makes the trial wait for
room (`WaitingForCapacity`), as the nodes being full does (docs/operations.md)."""

from __future__ import annotations

from kubernetes import client

from tests.e2e.conftest import TASK_IMAGE, brief, condition


def _task() -> dict[str, str]:
    return {"task.toml": f'[environment]\ndocker_image = "{TASK_IMAGE}"\n',
            "instruction.md": "Write ok to /tmp/out.\n",
            "solution/solve.sh": "#!/bin/sh\necho ok > /tmp/out\n",
            "tests/test.sh": ("#!/bin/sh\ngrep -q ok /tmp/out && echo 1 > "
                              "/logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n")}


def _quota(core_v1, namespace: str, hard: dict[str, str]) -> None:
    core_v1.create_namespaced_resource_quota(namespace, client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="team"), spec=client.V1ResourceQuotaSpec(hard=hard)))


def test_a_quota_that_requires_limits_fails_the_trial_at_once_naming_it(shipyard, core_v1):
    _quota(core_v1, shipyard.namespace, {"limits.cpu": "4", "limits.memory": "4Gi"})
    shipyard.task("plain", _task())
    shipyard.trial("plain", "plain")
    trial = shipyard.wait("plain", timeout=60)
    failed = condition(trial, "Failed")
    assert failed is not None and failed["reason"] == "PodRejected", brief(trial)
    assert failed["message"].startswith("the cluster refused the environment pod (403): "), failed
    assert "failed quota: team: must specify limits.cpu" in failed["message"], failed
    assert trial["status"]["error"]["type"] == "PodRejected", trial["status"]["error"]
    assert "PodRejected" in {e.reason for e in shipyard.events("plain")}


def test_a_full_quota_makes_the_next_trial_wait_for_room_then_run(shipyard, core_v1):
    _quota(core_v1, shipyard.namespace, {"pods": "1"})
    shipyard.task("one", _task())
    for name in ("first", "second"):
        shipyard.trial(name, "one")
    trials = [shipyard.wait(name, timeout=240) for name in ("first", "second")]
    for trial in trials:
        assert trial["status"]["phase"] == "Completed", brief(trial)
        assert trial["status"]["rewards"] == {"reward": 1.0}
    waited = [e for name in ("first", "second") for e in shipyard.events(name)
              if e.reason == "WaitingForCapacity"]
    assert waited and "waits for the namespace's quota" in waited[0].message, waited
    assert "exceeded quota: team" in waited[0].message, waited[0].message


def test_pod_security_baseline_admits_trial_pods_and_restricted_refuses_them_naming_why(
        shipyard, core_v1):
    ns = shipyard.namespace
    shipyard.task("ps", _task())
    for level, name in (("baseline", "ps-baseline"), ("restricted", "ps-restricted")):
        core_v1.patch_namespace(ns, {"metadata": {"labels": {
            "pod-security.kubernetes.io/enforce": level}}})
        shipyard.trial(name, "ps")
        trial = shipyard.wait(name, timeout=120)
        if level == "baseline":
            assert trial["status"]["phase"] == "Completed", brief(trial)
            assert trial["status"]["rewards"] == {"reward": 1.0}
        else:
            failed = condition(trial, "Failed")
            assert failed is not None and failed["reason"] == "PodRejected", brief(trial)
            assert 'violates PodSecurity "restricted' in failed["message"], failed
