"""A Trial's outcome as Harbor records it: the exception of its TrialResult (docs/harbor.md §b.6,
§b.7). Pure; used by `shipyard results` and by the Sweep status (errors per eval key)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from shipyard.api.conventions import condition
from shipyard.api.reasons import HarborError, Reason

# Failed-condition reasons → the exception Harbor would have recorded for the same outcome.
EXCEPTION_TYPES: dict[str, str] = {
    Reason.AGENT_FAILED: HarborError.NON_ZERO_AGENT_EXIT,
    Reason.AGENT_TIMEOUT: HarborError.AGENT_TIMEOUT,
    Reason.VERIFIER_TIMEOUT: HarborError.VERIFIER_TIMEOUT,
    Reason.REWARD_FILE_MISSING: HarborError.REWARD_FILE_NOT_FOUND,
    Reason.REWARD_FILE_EMPTY: HarborError.REWARD_FILE_EMPTY,
    Reason.REWARD_FILE_INVALID: HarborError.VERIFIER_OUTPUT_PARSE,
    Reason.HEALTHCHECK_FAILED: HarborError.HEALTHCHECK,
    Reason.ENVIRONMENT_START_TIMEOUT: HarborError.ENVIRONMENT_START_TIMEOUT,
    Reason.CANCELLED: HarborError.CANCELLED,
}


def exception_type(reason: str) -> str:
    """Harbor's exception name for a reason; `<Reason>Error` for Shipyard's own (PodLost…)."""
    return str(EXCEPTION_TYPES.get(reason, f"{reason}Error" if reason else "UnknownError"))


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
    failed = condition(status.get("conditions"), "Failed")
    error = status.get("error")
    if error and error.get("type"):  # the operator records Harbor's exception names
        kind = error["type"]
        return exception_record(kind if kind.endswith("Error") else exception_type(kind),
                                error.get("message", ""),
                                (failed or {}).get("lastTransitionTime"), trial)
    timed_out = agent_timeout(status.get("phases") or [])
    if timed_out is not None:
        return exception_record(HarborError.AGENT_TIMEOUT,
                                timed_out.get("message") or "Agent execution timed out",
                                timed_out.get("finishedAt"), trial)
    if failed is None:
        return None
    return exception_record(exception_type(failed.get("reason", "")), failed.get("message", ""),
                            failed.get("lastTransitionTime"), trial)
