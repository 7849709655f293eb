"""The operator's metrics: a Trial seen to finish is observed once (not one found finished at
start), Trials are counted by phase and namespace, and a port in use leaves /metrics off
without stopping anything."""

from __future__ import annotations

import socket
import urllib.request

from prometheus_client import REGISTRY

from shipyard.runtime import metrics


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def trial(phase: str) -> dict:
    return {"metadata": {"creationTimestamp": "2026-11-26T10:00:00Z"},
            "status": {"phase": phase, "rewards": {"reward": 1} if phase == "Completed" else None,
                       "finishedAt": "2026-11-26T10:00:20Z",
                       "conditions": [{"type": "Complete", "status": "True",
                                       "reason": "RewardRecorded"}],
                       "phases": [{"name": "agent", "startedAt": "2026-11-26T10:00:02Z",
                                   "finishedAt": "2026-11-26T10:00:07Z"}]}}


def test_trials_by_phase_and_outcomes_once() -> None:
    before = value("shipyard_trial_outcomes_total", reason="RewardRecorded")
    agent = value("shipyard_trial_phase_duration_seconds_count", phase="agent")
    metrics.trial_seen("unit-a", "old", trial("Completed"))  # finished before we looked
    metrics.trial_seen("unit-a", "t1", trial("Running"))
    assert value("shipyard_trials", phase="Running", namespace="unit-a") == 1
    metrics.trial_seen("unit-a", "t1", trial("Completed"))
    metrics.trial_seen("unit-a", "t1", trial("Completed"))  # a later event of the same
    assert value("shipyard_trials", phase="Completed", namespace="unit-a") == 2
    assert value("shipyard_trials", phase="Running", namespace="unit-a") == 0
    assert value("shipyard_trial_outcomes_total", reason="RewardRecorded") == before + 1
    assert value("shipyard_trial_phase_duration_seconds_count", phase="agent") == agent + 1
    assert value("shipyard_trial_time_to_reward_seconds_sum") >= 20.0
    metrics.trial_gone("unit-a", "t1")
    metrics.trial_gone("unit-a", "old")
    assert value("shipyard_trials", phase="Completed", namespace="unit-a") == 0


def test_reconciles_are_counted_by_kind_and_result() -> None:
    ok = value("shipyard_reconcile_total", kind="unit", result="success")
    with metrics.reconciling("unit"):
        pass
    try:
        with metrics.reconciling("unit"):
            raise ValueError("boom")
    except ValueError:
        pass
    assert value("shipyard_reconcile_total", kind="unit", result="success") == ok + 1
    assert value("shipyard_reconcile_errors_total", kind="unit") >= 1


def test_a_port_in_use_leaves_metrics_off_and_0_takes_a_free_one() -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        assert metrics.serve(taken.getsockname()[1]) is None
    port = metrics.serve(0)
    assert port
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    assert "shipyard_reconcile_total" in text and "shipyard_warm_pods" in text
    assert metrics.serve(-1) is None


def test_queued_sweep_trials_stay_a_series_at_0_once_done() -> None:
    metrics.sweep_queued("unit-q", "s1", 7)
    metrics.sweep_queued("unit-q", "s2", 3)
    assert value("shipyard_sweep_queued_trials", namespace="unit-q") == 10
    metrics.sweep_queued("unit-q", "s1", None)
    metrics.sweep_queued("unit-q", "s2", None)
    assert REGISTRY.get_sample_value("shipyard_sweep_queued_trials",
                                     {"namespace": "unit-q"}) == 0
