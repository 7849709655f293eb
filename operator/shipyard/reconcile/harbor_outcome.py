"""A Trial's outcome as Harbor records it: the exception of its TrialResult (spec §b.6, §b.7).
Pure; used by `shipyard results` and by the Sweep status (errors per eval key)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# Failed-condition reasons → the exception Harbor would have recorded for the same outcome.
EXCEPTION_TYPES = {
    "AgentFailed": "NonZeroAgentExitCodeError",
    "AgentTimeout": "AgentTimeoutError",
    "VerifierTimeout": "VerifierTimeoutError",
    "RewardFileMissing": "RewardFileNotFoundError",
    "RewardFileEmpty": "RewardFileEmptyError",
    "RewardFileInvalid": "VerifierOutputParseError",
    "HealthcheckFailed": "HealthcheckError",
    "EnvironmentStartTimeout": "EnvironmentStartTimeoutError",
    "Cancelled": "CancelledError",
}


def exception_type(reason: str) -> str:
    return EXCEPTION_TYPES.get(reason, f"{reason}Error" if reason else "UnknownError")


def _condition(status: Mapping[str, Any], *types: str) -> dict[str, Any] | None:
    for cond in status.get("conditions") or []:
        if cond.get("type") in types and cond.get("status") == "True":
            return cond
    return None


def agent_timeout(records: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    return next((r for r in records if r.get("name") == "agent" and r.get("timedOut")), None)


def exception_record(kind: str, message: str, occurred_at: str | None,
                     trial: Mapping[str, Any]) -> dict[str, Any]:
    """Harbor's ExceptionInfo: every field is required there, so the traceback (which an
    operator does not have) is empty and the time falls back to when the trial finished, else
    when it was created."""
    status = trial.get("status") or {}
    return {
        "exception_type": kind,
        "exception_message": message,
        "exception_traceback": "",
        "occurred_at": occurred_at or status.get("finishedAt")
        or (trial.get("metadata") or {}).get("creationTimestamp"),
    }


def exception_info(trial: Mapping[str, Any]) -> dict[str, Any] | None:
    """Harbor stores the first exception: the one the operator recorded in `status.error`
    (e.g. AgentTimeoutError, NonZeroAgentExitCodeError; the trial may still have a reward),
    else an agent timeout seen in the phases, else the reason the trial failed."""
    status = trial.get("status") or {}
    failed = _condition(status, "Failed")
    error = status.get("error")
    if error and error.get("type"):  # the operator records Harbor's exception names
        kind = error["type"]
        return exception_record(kind if kind.endswith("Error") else exception_type(kind),
                                error.get("message", ""),
                                (failed or {}).get("lastTransitionTime"), trial)
    timed_out = agent_timeout(status.get("phases") or [])
    if timed_out is not None:
        return exception_record("AgentTimeoutError",
                                timed_out.get("message") or "Agent execution timed out",
                                timed_out.get("finishedAt"), trial)
    if failed is None:
        return None
    return exception_record(exception_type(failed.get("reason", "")), failed.get("message", ""),
                            failed.get("lastTransitionTime"), trial)
