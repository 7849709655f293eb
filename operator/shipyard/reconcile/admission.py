"""Kueue admission of a trial attempt, as a pure state machine (see docs/kueue.md).

A Trial labelled `kueue.x-k8s.io/queue-name` (or any Trial, when the operator has a default
queue) gets one Workload per attempt (`render.workload`). Its states, read from the Workload's
conditions:

    (none) ──create──▶ Queued ──Kueue admits──▶ Admitted ──trial ends──▶ deleted (quota freed)
                         ▲                          │
                         └──── Evicted/Preempted ◀──┘  pods stopped, attempt recorded,
                                                       a new Workload for the next attempt

Pods are created only once the Workload is Admitted, with the admitted flavors' node labels
and tolerations. An eviction ends the attempt with reason `Preempted`; it does not count
against the Trial's `retries` (those are for infrastructure failures), and the next attempt
starts from scratch, so nothing of the evicted one runs twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from shipyard.api.conventions import LABEL_PRIORITY_CLASS, LABEL_QUEUE_NAME, iso
from shipyard.api.models import AttemptRecord, QueueRecord, TrialStatus
from shipyard.api.reasons import Reason
from shipyard.plan.phases import TrialPlan
from shipyard.reconcile.trial_machine import (
    Outcome,
    _begin_first_phase,
    _fresh_records,
    _set_condition,
)

QUEUE_POLL_SEC = 30.0
"""A queued driver looks at its Workload this often even without a watch event."""


@dataclass(frozen=True)
class QueueChoice:
    queue: str
    priority_class: str | None = None


def queue_of(labels: Mapping[str, str] | None, default_queue: str | None,
             served: bool) -> QueueChoice | None:
    """The LocalQueue a Trial is admitted through: its label, else the operator's default;
    None when neither (or when Kueue is not installed and the Trial has no label: the default
    queue alone never stops a Trial from running)."""
    labels = labels or {}
    queue = (labels.get(LABEL_QUEUE_NAME) or "").strip()
    if not queue:
        if not default_queue or not served:
            return None
        queue = default_queue
    return QueueChoice(queue, (labels.get(LABEL_PRIORITY_CLASS) or "").strip() or None)


def not_served(choice: QueueChoice) -> str:
    return (f"metadata.labels[{LABEL_QUEUE_NAME}]: the trial asks Kueue's LocalQueue "
            f"{choice.queue!r}, but Kueue's Workload API (kueue.x-k8s.io/v1beta2) is not served "
            "in this cluster; install Kueue or remove the label")


def unknown_priority(choice: QueueChoice) -> str:
    return (f"metadata.labels[{LABEL_PRIORITY_CLASS}]: no WorkloadPriorityClass named "
            f"{choice.priority_class!r} exists")


# ---------------------------------------------------------------- what the Workload says


@dataclass(frozen=True)
class Missing:
    """No Workload for this attempt yet: create it."""


@dataclass(frozen=True)
class Queued:
    reason: str
    message: str


@dataclass(frozen=True)
class Admitted:
    cluster_queue: str | None
    flavors: dict[str, str] = field(default_factory=dict)
    updates: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Evicted:
    reason: str
    message: str


@dataclass(frozen=True)
class Deleting:
    """The Workload is being deleted (its deletionTimestamp set, Kueue's finalizer still on
    it): the operator's own release at a trial's end or of an earlier attempt, or someone's
    delete. Not an eviction: a driver waits for it to be gone (an admitted trial whose
    Workload then disappears is evicted, `eviction`)."""


WorkloadState = Missing | Queued | Admitted | Evicted | Deleting


def _conditions(workload: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c.get("type", ""): c for c in (workload.get("status") or {}).get("conditions") or []}


def workload_state(workload: Mapping[str, Any] | None) -> WorkloadState:
    if workload is None:
        return Missing()
    if (workload.get("metadata") or {}).get("deletionTimestamp"):
        return Deleting()
    conds = _conditions(workload)
    for kind in ("Evicted", "Preempted"):
        c = conds.get(kind)
        if c is not None and c.get("status") == "True":
            return Evicted(c.get("reason") or kind, c.get("message") or "")
    finished = conds.get("Finished")
    if finished is not None and finished.get("status") == "True":
        return Evicted(finished.get("reason") or "Finished",
                       finished.get("message") or "the Workload was finished by Kueue")
    if (workload.get("spec") or {}).get("active") is False:
        return Evicted("Deactivated", "the Workload was deactivated")
    admitted = conds.get("Admitted")
    status = workload.get("status") or {}
    if admitted is not None and admitted.get("status") == "True":
        admission = status.get("admission") or {}
        assignments = admission.get("podSetAssignments") or []
        flavors = dict((assignments[0].get("flavors") or {}) if assignments else {})
        updates = tuple(u for check in status.get("admissionChecks") or []
                        for u in check.get("podSetUpdates") or [])
        return Admitted(admission.get("clusterQueue"), flavors, updates)
    reserved = conds.get("QuotaReserved")
    if reserved is not None and reserved.get("status") == "True":
        return Queued("WaitingForAdmissionChecks", reserved.get("message") or
                      "quota reserved; waiting for the admission checks")
    if reserved is None:
        return Queued(Reason.QUEUED, "waiting for Kueue to look at the Workload")
    return Queued(queue_reason(reserved.get("reason") or "", reserved.get("message") or ""),
                  reserved.get("message") or "")


def eviction(workload: Mapping[str, Any] | None, seen: bool, running: bool,
             name: str) -> Evicted | None:
    """Was the current attempt's Workload (as last watched; `seen`: the watch has told of it)
    evicted? A deleted one counts only once the attempt was admitted or has pods (`running`),
    and only once it is gone: one still being deleted is not evicted (yet)."""
    if not seen:
        return None
    if workload is None:
        return Evicted("WorkloadDeleted", f"the Workload {name} was deleted") if running \
            else None
    state = workload_state(workload)
    return state if isinstance(state, Evicted) else None


def queue_reason(kueue_reason: str, message: str) -> str:
    """A short word for `kubectl get trials`: why Kueue has not admitted it yet."""
    if "insufficient quota" in message or "insufficient unused quota" in message:
        return Reason.INSUFFICIENT_QUOTA
    if kueue_reason in ("", "Pending"):
        return Reason.WAITING_FOR_QUOTA
    return kueue_reason


def flavor_scheduling(flavors: list[Mapping[str, Any]]) -> tuple[dict[str, str], list[dict]]:
    """The node labels and tolerations of the admitted ResourceFlavors."""
    labels: dict[str, str] = {}
    tolerations: list[dict] = []
    for flavor in flavors:
        spec = flavor.get("spec") or {}
        labels.update(spec.get("nodeLabels") or {})
        for t in spec.get("tolerations") or []:
            if t not in tolerations:
                tolerations.append(dict(t))
    return labels, tolerations


# ---------------------------------------------------------------- the Trial's status


def _queue(status: TrialStatus, choice: QueueChoice) -> QueueRecord:
    if status.queue is None or status.queue.name != choice.queue:
        return QueueRecord(name=choice.queue,
                           preemptions=status.queue.preemptions if status.queue else 0)
    return status.queue


def queued(status: TrialStatus, choice: QueueChoice, workload: str, state: Queued,
           now: datetime) -> tuple[TrialStatus, Outcome]:
    """Waiting for Kueue: phase Queued, the Queued condition with Kueue's reason; an Event
    when a new Workload is queued, not at every change of Kueue's message."""
    status = status.model_copy(deep=True)
    record = _queue(status, choice)
    first = record.workload != workload
    if first:
        record = record.model_copy(update={"workload": workload, "queued_at": iso(now),
                                           "admitted_at": None, "cluster_queue": None,
                                           "flavors": {}})
    status.queue = record
    status.phase = "Queued"
    text = f"waiting in LocalQueue {choice.queue} (Workload {workload})" + (
        f": {state.message}" if state.message else "")
    _set_condition(status, "Queued", "True", state.reason, text, now)  # type: ignore[arg-type]
    _set_condition(status, "Running", "False", Reason.QUEUED, text, now)
    events = [("Normal", Reason.QUEUED, f"Workload {workload} created in LocalQueue "
               f"{choice.queue}")] if first else []
    return status, Outcome(events=events)


def admitted(status: TrialStatus, choice: QueueChoice, workload: str, state: Admitted,
             now: datetime) -> tuple[TrialStatus, Outcome]:
    """Admitted: the trial runs (its start timeouts count from now, not from its queueing)."""
    status = status.model_copy(deep=True)
    record = _queue(status, choice)
    fresh = record.admitted_at is None or record.workload != workload
    status.queue = record.model_copy(update={
        "workload": workload, "cluster_queue": state.cluster_queue,
        "flavors": dict(state.flavors), "admitted_at": record.admitted_at if not fresh
        else iso(now), "queued_at": record.queued_at or iso(now)})
    if not fresh:
        return status, Outcome()
    status.phase = "Running"
    flavors = ", ".join(f"{k}: {v}" for k, v in sorted(state.flavors.items()))
    text = (f"admitted by ClusterQueue {state.cluster_queue}"
            + (f" (flavors {flavors})" if flavors else ""))
    _set_condition(status, "Queued", "False", Reason.ADMITTED, text, now)
    _set_condition(status, "Running", "True", Reason.ENVIRONMENT_STARTING,
                   "creating the environment pod", now)
    if status.phases and status.phases[0].state == "Running" and not status.pod_name:
        status.phases[0].started_at = iso(now)
    return status, Outcome(events=[("Normal", Reason.ADMITTED, f"Workload {workload} {text}")])


def preempted(status: TrialStatus, plan: TrialPlan, state: Evicted,
              now: datetime) -> tuple[TrialStatus, Outcome]:
    """Evicted by Kueue (preempted, or its ClusterQueue stopped, ...): this attempt ends with
    reason Preempted and its pods go; the next attempt queues again from scratch. It does not
    count against `retries` (`trial_machine.infrastructure_failure` subtracts preemptions)."""
    status = status.model_copy(deep=True)
    old_pods = [n for n in (status.pod_name, status.verifier_pod_name) if n]
    message = f"evicted by Kueue ({state.reason}): {state.message}".rstrip(": ")
    status.attempts.append(AttemptRecord(
        attempt=status.attempt, pod_name=status.pod_name, reason=str(Reason.PREEMPTED),
        message=message, started_at=status.phases[0].started_at if status.phases else None,
        finished_at=iso(now)))
    status.attempt += 1
    record = status.queue or QueueRecord(name="")
    status.queue = record.model_copy(update={
        "preemptions": record.preemptions + 1, "workload": None, "admitted_at": None,
        "cluster_queue": None, "flavors": {}})
    status.retry_at = None
    status.pod_name = status.verifier_pod_name = None
    status.pod_process_base = None
    status.error = None
    status.rewards = status.reward = None
    status.agent_result = None
    status.phases, status.steps = _fresh_records(plan)
    _begin_first_phase(status, now)
    status.phase = "Queued"
    text = f"attempt {status.attempt - 1} {message}; queued again"
    _set_condition(status, "Queued", "True", Reason.PREEMPTED, text, now)
    _set_condition(status, "Running", "False", Reason.QUEUED, text, now)
    return status, Outcome(events=[("Warning", Reason.PREEMPTED, text)], delete_pods=old_pods)
