"""A Task's status, computed purely from what loading it gave."""

from __future__ import annotations

from shipyard.api.reasons import Reason
from shipyard.reconcile import task_status
from shipyard.taskformat import load_task_files

T0, T1 = "2026-11-26T10:00:00Z", "2026-11-26T10:05:00Z"
FILES = {
    "task.toml": '[environment]\ndocker_image = "debian:bookworm"\n',
    "instruction.md": "Do it.\n",
    "tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
}


def test_a_valid_task_is_ready_with_its_digest_summary_and_a_normal_event() -> None:
    task = load_task_files({k: v.encode() for k, v in FILES.items()}, name="t")
    status, event = task_status.valid(None, 4, task, T0)
    ready = status.conditions[0]
    assert (ready.type, ready.status, ready.reason) == ("Ready", "True", Reason.VALID)
    assert ready.last_transition_time == T0 and ready.observed_generation == 4
    assert status.digest == task.digest and status.summary is not None
    assert event[0] == "Normal" and event[1] == Reason.VALID and "step(s)" in event[2]
    # Validated again (a resumed operator): the transition time stays.
    again, _ = task_status.valid(status.model_dump(by_alias=True)["conditions"], 4, task, T1)
    assert again.conditions[0].last_transition_time == T0


def test_a_missing_bundle_is_bundle_not_found_and_a_warning() -> None:
    status, event = task_status.invalid(None, 1, Reason.TASK_NOT_FOUND, "no ConfigMap x", T0)
    ready = status.conditions[0]
    assert (ready.status, ready.reason, ready.message) == ("False", Reason.BUNDLE_NOT_FOUND,
                                                          "no ConfigMap x")
    assert event == ("Warning", Reason.BUNDLE_NOT_FOUND, "no ConfigMap x")
    status, event = task_status.invalid(None, 1, Reason.TASK_INVALID, "task.toml: bad", T0)
    assert status.conditions[0].reason == Reason.TASK_INVALID and event[0] == "Warning"


def test_a_verdict_is_kept_with_what_it_was_reached_on_and_not_reached_again() -> None:
    spec = {"source": {"configMap": {"name": "b-1a2b", "parts": 3}}}
    key = task_status.validation_key(spec, "0.1.0", "settings")
    assert key.startswith("sha256:")
    assert key == task_status.validation_key(dict(spec), "0.1.0", "settings")
    assert key != task_status.validation_key({**spec, "forceBuild": True}, "0.1.0", "settings")
    assert key != task_status.validation_key(spec, "0.2.0", "settings")
    assert key != task_status.validation_key(spec, "0.1.0", "other settings")
    task = load_task_files({k: v.encode() for k, v in FILES.items()}, name="t")
    status, _ = task_status.valid(None, 2, task, T0, key=key)
    body = status.model_dump(by_alias=True, mode="json")
    assert body["validated"] == key
    assert task_status.already_validated(body, 2, key)
    assert not task_status.already_validated(body, 3, key)  # a new generation
    assert not task_status.already_validated(body, 2, key + "x")  # other spec/version/settings
    assert not task_status.already_validated(None, 2, key)
    # Invalid content is a final verdict too; a bundle not there yet is not.
    bad, _ = task_status.invalid(None, 2, Reason.TASK_INVALID, "bomb", T0, key)
    assert task_status.already_validated(bad.model_dump(by_alias=True, mode="json"), 2, key)
    missing, _ = task_status.invalid(None, 2, Reason.TASK_NOT_FOUND, "no bundle", T0, key)
    dumped = missing.model_dump(by_alias=True, mode="json")
    assert dumped["validated"] is None and not task_status.already_validated(dumped, 2, key)
