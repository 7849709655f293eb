"""What a finished Trial tells the metrics: phase durations, time to running and to reward, and
a bounded outcome reason."""

from __future__ import annotations

from shipyard.reconcile.trial_metrics import finished_trial, outcome_reason, phase_label


def trial(phase: str, reason: str, rewards=None) -> dict:
    return {"metadata": {"name": "t1", "creationTimestamp": "2026-11-26T10:00:00Z"},
            "status": {"phase": phase, "startedAt": "2026-11-26T10:00:01Z",
                       "finishedAt": "2026-11-26T10:00:30Z", "rewards": rewards,
                       "conditions": [{"type": "Complete" if phase == "Completed" else "Failed",
                                       "status": "True", "reason": reason}],
                       "phases": [
                           {"name": "environment", "startedAt": "2026-11-26T10:00:01Z",
                            "finishedAt": "2026-11-26T10:00:04Z"},
                           {"name": "agent", "startedAt": "2026-11-26T10:00:04Z",
                            "finishedAt": "2026-11-26T10:00:14.5Z"},
                           {"name": "verifier", "startedAt": "2026-11-26T10:00:15Z"},
                           {"name": "my-own-phase", "startedAt": "2026-11-26T10:00:15Z",
                            "finishedAt": "2026-11-26T10:00:16Z"}]}}


def test_a_finished_trial_gives_its_phase_durations_and_times() -> None:
    times = finished_trial(trial("Completed", "RewardRecorded", {"reward": 1}))
    assert times is not None
    assert times.outcome == "RewardRecorded"
    assert times.phases == [("environment", 3.0), ("agent", 10.5), ("other", 1.0)]
    assert times.to_running == 4.0  # creation → environment phase ended
    assert times.to_reward == 30.0


def test_no_reward_no_time_to_reward_and_reasons_are_bounded() -> None:
    times = finished_trial(trial("Failed", "RewardFileMissing"))
    assert times is not None and times.to_reward is None
    assert outcome_reason(trial("Failed", "made-up-by-someone")) == "Unknown"
    assert finished_trial({"status": {"phase": "Running"}}) is None
    assert phase_label("trial-name-abc123") == "other"
