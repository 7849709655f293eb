"""What a finished Trial tells the operator's metrics (`/metrics`, docs/observability.md): its
phases' durations, the time from its creation to its pod running and to its reward, and its
outcome reason. Pure: a Trial dict in, numbers and bounded label values out (no trial or task
name ever becomes a label)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shipyard.api.conventions import condition, is_finished_phase, parse_time
from shipyard.api.reasons import Reason

PHASES = ("environment", "healthcheck", "setup", "agent", "verifier", "verifier-environment",
          "collect")
"""Phase names used as label values; any other is counted as "other"."""
TRIAL_PHASES = ("Pending", "Running", "Completed", "Failed", "Cancelled")
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0,
                    1200.0, 1800.0, 3600.0, 7200.0)
"""Seconds: from a trivial phase (a fraction of a second) to a long agent run (2 h)."""
REASONS = frozenset(str(r) for r in Reason)


def phase_label(name: str | None) -> str:
    return name if name in PHASES else "other"


def trial_phase_label(phase: str | None) -> str:
    return phase if phase in TRIAL_PHASES else "Pending"


def outcome_reason(trial: Mapping[str, Any]) -> str:
    """The reason of the Trial's terminal condition (Complete or Failed), one of api.reasons."""
    status = trial.get("status") or {}
    done = condition(status.get("conditions"), "Complete", "Failed")
    reason = (done or {}).get("reason") or ""
    if reason in REASONS:
        return reason
    return "Cancelled" if status.get("phase") == "Cancelled" else "Unknown"


def _seconds(start: str | None, end: str | None) -> float | None:
    began, ended = parse_time(start), parse_time(end)
    if began is None or ended is None:
        return None
    return max(0.0, (ended - began).total_seconds())


@dataclass(frozen=True)
class TrialTimes:
    """The observations of one finished Trial."""

    outcome: str
    phases: list[tuple[str, float]] = field(default_factory=list)
    to_running: float | None = None
    to_reward: float | None = None


def phase_durations(trial: Mapping[str, Any]) -> list[tuple[str, float]]:
    """(phase label, seconds) of each phase record that started and ended."""
    out = []
    for record in (trial.get("status") or {}).get("phases") or []:
        seconds = _seconds(record.get("startedAt"), record.get("finishedAt"))
        if seconds is not None:
            out.append((phase_label(record.get("name")), seconds))
    return out


def finished_trial(trial: Mapping[str, Any]) -> TrialTimes | None:
    """A finished Trial's observations; None while it runs."""
    status = trial.get("status") or {}
    if not is_finished_phase(status.get("phase")):
        return None
    created = (trial.get("metadata") or {}).get("creationTimestamp")
    rewarded = status.get("rewards") is not None
    # The pod runs once its environment phase (pod scheduled, image pulled, started) ended.
    environment = next((r for r in status.get("phases") or []
                        if r.get("name") == "environment" and r.get("finishedAt")), None)
    return TrialTimes(
        outcome=outcome_reason(trial),
        phases=phase_durations(trial),
        to_running=_seconds(created, (environment or {}).get("finishedAt")),
        to_reward=_seconds(created, status.get("finishedAt")) if rewarded else None,
    )
