"""One condition setter (Kubernetes' SetStatusCondition semantics) and one rule for what
changed, used by Trials, Sweeps, ImageBuilds' ImagesReady and Tasks."""

from __future__ import annotations

from shipyard.api.conditions import (
    carried,
    changed,
    event_key,
    material,
    set_condition,
    transition_time,
)
from shipyard.api.models import Condition

T0, T1 = "2026-11-26T10:00:00Z", "2026-11-26T10:05:00Z"


def cond(status: str = "True", reason: str = "R", message: str = "m", **kw) -> Condition:
    return Condition(type="Ready", status=status, reason=reason, message=message, **kw)


def test_a_new_condition_is_appended_with_the_time_of_its_transition() -> None:
    conditions: list[Condition] = []
    assert set_condition(conditions, cond(observed_generation=2), T0)
    assert conditions == [cond(observed_generation=2, last_transition_time=T0)]


def test_the_transition_time_changes_only_when_the_status_does() -> None:
    conditions = [cond(last_transition_time=T0)]
    assert set_condition(conditions, cond(reason="Other", message="new", observed_generation=3),
                         T1)
    assert conditions == [cond(reason="Other", message="new", observed_generation=3,
                               last_transition_time=T0)]
    assert set_condition(conditions, cond(status="False", reason="Other", message="new",
                                          observed_generation=3), T1)
    assert conditions[0].last_transition_time == T1 and conditions[0].status == "False"


def test_setting_the_same_condition_again_changes_nothing() -> None:
    conditions = [cond(last_transition_time=T0), Condition(type="Other", status="False")]
    assert not set_condition(conditions, cond(), T1)
    assert conditions[0].last_transition_time == T0 and len(conditions) == 2


def test_a_given_transition_time_is_used_when_the_status_changes() -> None:
    conditions = [cond(last_transition_time=T0)]
    set_condition(conditions, cond(status="False", last_transition_time="2026-11-26T09:00:00Z"),
                  T1)
    assert conditions[0].last_transition_time == "2026-11-26T09:00:00Z"


def test_carried_over_api_dicts_as_a_status_built_afresh() -> None:
    previous = [{"type": "Ready", "status": "True", "reason": "R", "message": "m",
                 "lastTransitionTime": T0}]
    assert carried(previous, cond(reason="X"), T1).last_transition_time == T0
    assert carried(previous, cond(status="False"), T1).last_transition_time == T1
    assert carried(None, cond(), T1).last_transition_time == T1
    assert transition_time({"status": "True"}, "True", T1) == T1  # none recorded: now


def test_changed_is_what_an_event_announces() -> None:
    before = [{"type": "Ready", "status": "True", "reason": "R", "message": "m"}]
    same, other_message = cond(), cond(message="other")
    assert changed(before, [same]) == []
    assert changed(before, [other_message]) == [other_message]
    assert changed(before, [other_message], fields=("type", "status", "reason")) == []
    assert changed(None, [same]) == [same]


def test_event_key_names_the_transition() -> None:
    assert event_key(cond(last_transition_time=T0)) == f"Ready/True/R/{T0}"
    assert event_key({"type": "Failed", "status": "True", "reason": "X",
                      "lastTransitionTime": T1}) == f"Failed/True/X/{T1}"


def test_material_is_a_transition_not_a_message() -> None:
    before = [{"type": "Complete", "status": "False", "reason": "Running", "message": "3/10"}]
    assert not material(before, [{**before[0], "message": "4/10"}])
    assert material(before, [{**before[0], "status": "True", "reason": "AllTrialsFinished"}])
    assert material(before, [])  # a condition went
    assert material(None, before)  # one came
    assert not material(None, [])
