"""The one write policy (reconcile/write_policy.py): material changes soon, nothing unchanged,
progress coalesced, and little left to redo after a restart."""

from __future__ import annotations

from datetime import timedelta

from shipyard.reconcile import write_policy as policy
from tests.unit.helpers import T0


def test_nothing_unchanged_is_written_unless_an_event_waits() -> None:
    status = {"phase": "Running"}
    assert policy.unchanged(status, dict(status))
    assert not policy.unchanged(status, dict(status), events=1)
    assert not policy.unchanged(None, status)
    assert not policy.unchanged(status, {"phase": "Completed"})


def test_a_condition_transition_goes_out_within_the_condition_delay() -> None:
    before = {"conditions": [{"type": "Complete", "status": "False", "reason": "Running"}],
              "counts": {"planned": 100, "completed": 1}}
    after = {"conditions": [{"type": "Complete", "status": "True", "reason": "Done"}],
             "counts": {"planned": 100, "completed": 1}}
    assert policy.write_delay(before, after, 0.5, 10.0) == policy.CONDITION_DELAY - 0.5
    assert policy.write_delay(before, after, 5.0, 10.0) == 0.0
    # A message alone is no transition: progress, written with the heartbeat.
    moved = {**before, "conditions": [{**before["conditions"][0], "message": "2/100"}]}
    assert policy.write_delay(before, moved, 0.5, 10.0) == policy.HEARTBEAT - 0.5


def test_a_driver_writes_before_an_exec_only_after_slow_work() -> None:
    assert not policy.write_before_exec(60.0, 1)
    assert not policy.write_before_exec(policy.UNSAVED_WORK_SEC, 3)
    assert policy.write_before_exec(policy.UNSAVED_WORK_SEC + 1, 2)


def test_a_starting_pod_holds_a_write_back_until_the_start_took_long() -> None:
    # Nothing to write, or no pod starting: write (or not) now.
    assert policy.hold_start_write(False, True, None, T0, 30.0) is None
    assert policy.hold_start_write(True, False, None, T0, 30.0) is None
    # The hold starts now, for at most the start delay (or the wait's own timeout).
    assert policy.hold_start_write(True, True, None, T0, None) == (
        policy.START_WRITE_DELAY_SEC, T0)
    assert policy.hold_start_write(True, True, None, T0, 3.0) == (3.0, T0)
    later = T0 + timedelta(seconds=4)
    assert policy.hold_start_write(True, True, T0, later, None) == (
        policy.START_WRITE_DELAY_SEC - 4, T0)
    done = T0 + timedelta(seconds=policy.START_WRITE_DELAY_SEC)
    assert policy.hold_start_write(True, True, T0, done, None) is None
