"""Deciding from observed objects that no operator serves a namespace (cli.serving)."""

from __future__ import annotations

from typing import Any

import pytest

from shipyard.cli.serving import (
    InstalledOperator,
    invalid_task_message,
    no_operator_message,
    operators_from_deployments,
    ready_server,
    silent_seconds,
    task_state,
    timeout_message,
    trial_silence,
    unvalidated_task_message,
)


def task(generation: int = 1, ready: str | None = None, observed: int | None = 1,
         status_observed: int | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": "hello", "generation": generation}}
    if ready is not None:
        cond: dict[str, Any] = {"type": "Ready", "status": ready, "reason": "Valid" if
                                ready == "True" else "TaskInvalid", "message": "task.toml: bad"}
        if observed is not None:
            cond["observedGeneration"] = observed
        obj["status"] = {"conditions": [cond]}
        if status_observed is not None:
            obj["status"]["observedGeneration"] = status_observed
    return obj


def trial(status: dict[str, Any] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": "hello-oracle-x"},
                           "spec": {"taskRef": {"name": "hello"}, "agent": {"name": "oracle"}}}
    if status is not None:
        obj["status"] = status
    return obj


@pytest.mark.parametrize(("obj", "state"), [
    (task(), "unvalidated"),                                     # no status at all
    (task(ready="True"), "ready"),
    (task(ready="False"), "invalid"),
    (task(generation=2, ready="True", observed=1), "unvalidated"),  # pushed again, not seen yet
    (task(generation=2, ready="True", observed=2), "ready"),
    (task(generation=2, ready="True", observed=None, status_observed=1), "unvalidated"),
    (task(generation=2, ready="True", observed=None), "ready"),  # no generation recorded
])
def test_task_state(obj, state):
    assert task_state(obj) == state


def test_invalid_task_message_names_reason_and_message():
    assert invalid_task_message(task(ready="False")) == (
        "task hello is not Ready: TaskInvalid: task.toml: bad")


def test_no_operator_message_gives_whole_commands():
    message = unvalidated_task_message("demo", "hello", 15, [])
    assert message.startswith("no Shipyard operator serves namespace demo: after 15s task hello "
                              "is still not validated (no Ready condition); no trial was created."
                              " Fix: ")
    assert "`helm install shipyard charts/shipyard -n demo`" in message
    assert "`shipyard operator -n demo`" in message
    assert "\n" not in message


def test_no_operator_message_points_at_the_namespaces_an_installed_operator_serves():
    operators = [InstalledOperator("shipyard-system", "shipyard", "shipyard-demo")]
    message = no_operator_message("demo", "trial t has no status", 16, operators)
    assert ("the installed operator (shipyard-system/shipyard) serves shipyard-demo: run there "
            "with `-n shipyard-demo`") in message
    # An operator that serves the namespace (it is just not answering) is no hint to go elsewhere.
    both = [InstalledOperator("a", "shipyard", "cluster-wide"),
            InstalledOperator("b", "shipyard", "x,y")]
    message = no_operator_message("demo", "silent", 16, both)
    assert "(b/shipyard) serves x, y: run there with `-n x`" in message
    assert "a/shipyard" not in message


def test_operators_from_deployments():
    deployments = [
        {"metadata": {"namespace": "ops", "name": "shipyard"},
         "spec": {"template": {"metadata": {"annotations": {"shipyard.dev/watch": "a,b"}}}},
         "status": {"replicas": 1, "readyReplicas": 1}},
        {"metadata": {"namespace": "o2", "name": "sy"}, "spec": {"template": {"metadata": {}}}},
    ]
    found = operators_from_deployments(deployments)
    assert found == [InstalledOperator("ops", "shipyard", "a,b", ready=True),
                     InstalledOperator("o2", "sy", "", ready=False)]
    assert found[0].serves("b") and not found[0].serves("c")
    assert InstalledOperator("x", "y", "cluster-wide").serves("anything")


def test_a_trial_with_a_status_is_never_judged():
    for status in ({"phase": "Pending"}, {"phase": "Running", "conditions": []}):
        assert trial_silence(trial(status), None, namespace="demo", silent_for=999, grace=15,
                             operators=[]) is None


def test_silence_shorter_than_grace_or_grace_zero_is_not_judged():
    assert trial_silence(trial(), task(), namespace="demo", silent_for=14.9, grace=15,
                         operators=[]) is None
    assert trial_silence(trial(), task(), namespace="demo", silent_for=999, grace=0,
                         operators=[]) is None


def test_silent_trial_of_an_unvalidated_task_means_no_operator():
    verdict = trial_silence(trial(), task(), namespace="demo", silent_for=15.2, grace=15,
                            operators=[])
    assert verdict is not None and verdict.fatal
    assert verdict.message.startswith(
        "no Shipyard operator serves namespace demo: after 15s trial hello-oracle-x still has "
        "no status and task hello was never validated. Fix: ")


def test_silent_trial_of_a_missing_task_means_no_operator():
    """An operator would have written TaskNotFound/waiting into the trial's status."""
    verdict = trial_silence(trial(), None, namespace="demo", silent_for=20, grace=15,
                            operators=[])
    assert verdict is not None and verdict.fatal
    assert "task hello does not exist" in verdict.message


def test_silent_trial_of_a_validated_task_only_warns():
    for state in ("True", "False"):
        verdict = trial_silence(trial(), task(ready=state), namespace="demo", silent_for=20,
                                grace=15, operators=[])
        assert verdict is not None and not verdict.fatal
        assert "is the operator serving namespace demo still running?" in verdict.message


def test_silent_seconds_uses_the_server_age_only_when_clearly_older():
    assert silent_seconds(trial(), 3, None) == 3
    assert silent_seconds(trial(), 3, 30) == 3          # within the skew margin: watched time
    assert silent_seconds(trial(), 3, 3600) == 3540     # an old trial: judged at once


def test_timeout_message_names_the_trial_and_its_last_phase():
    running = trial({"phase": "Running", "currentPhase": "agent"})
    assert timeout_message(running, "t1", "demo", 30) == (
        "trial t1 did not finish within 30s (last phase: Running, agent); it goes on running: "
        "`shipyard watch t1 -n demo --timeout 0`")
    assert "(last phase: no status yet)" in timeout_message(trial(), "t1", "demo", 5)
    assert "(last phase: Pending)" in timeout_message(trial({"phase": "Pending"}), "t", "d", 5)


def test_a_ready_installed_operator_serving_the_namespace_turns_the_verdict_into_a_warning():
    """Evidence that the namespace is served, only slowly (a busy operator): keep waiting."""
    serving = InstalledOperator("demo", "shipyard", "demo", ready=True)
    assert ready_server([serving], "demo") == serving
    for others in ([InstalledOperator("demo", "shipyard", "demo", ready=False)],
                   [InstalledOperator("ops", "shipyard", "elsewhere", ready=True)]):
        assert ready_server(others, "demo") is None
        verdict = trial_silence(trial(), None, namespace="demo", silent_for=20, grace=15,
                                operators=others)
        assert verdict is not None and verdict.fatal
    verdict = trial_silence(trial(), None, namespace="demo", silent_for=20, grace=15,
                            operators=[serving])
    assert verdict is not None and not verdict.fatal
    assert verdict.message.startswith(
        "after 20s trial hello-oracle-x still has no status and task hello does not exist, "
        "although the operator demo/shipyard serves namespace demo and is Ready: it may be busy")
    assert "`kubectl -n demo logs deployment/shipyard`" in verdict.message
