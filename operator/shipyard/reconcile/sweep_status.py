"""A Sweep's reconcile, pure: (spec, Tasks, the Sweep's Trials as observed) → which Trials to
create now, and the status. Nothing here remembers anything between calls: the Trials are the
state, so an operator killed at any moment loses nothing and duplicates nothing.

The status stays O(eval keys), never O(trials): counts, Job-style compressed index ranges and
Harbor's per eval key stats (docs/harbor.md §e.3, §e.4) without the per-trial name lists.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from shipyard.api.conditions import carried
from shipyard.api.conventions import (
    ANNOTATION_AGENT_KEY,
    LABEL_ATTEMPT,
    LABEL_RETRY,
    condition,
    is_finished_phase,
    iso,
)
from shipyard.api.models import Condition
from shipyard.api.reasons import HarborError, Reason
from shipyard.api.sweep import EvalStats, LabelSelector, SweepCounts, SweepSpec, SweepStatus
from shipyard.plan.settings import TASK_WAIT_SEC
from shipyard.plan.sweep import (
    Slot,
    agent_key,
    dataset_name,
    duplicate_agents,
    eval_key,
    oversized,
    trial_name,
)
from shipyard.reconcile.harbor_outcome import exception_info, exception_type
from shipyard.reconcile.sweep_results import (
    NO_TOKENS,
    Outcome,
    eval_results,
    overall_mean,
    token_totals,
)
from shipyard.reconcile.write_policy import (  # noqa: F401
    CONDITION_DELAY,
    HEARTBEAT,
    PROGRESS_STEP,
    write_delay,
)

MAX_NAMED = 10  # tasks named in one condition message


# ---------------------------------------------------------------- observing Trials


@dataclass(frozen=True)
class ObservedTrial:
    """What the Sweep needs of one of its Trials."""

    name: str
    task: str
    agent_key: str
    attempt: int
    generation: int
    phase: str
    rewards: dict[str, float] | None
    exception: str | None
    resource_version: str = ""
    tokens: tuple[int | None, int | None, int | None, float | None] = (None, None, None, None)

    @property
    def slot_key(self) -> tuple[str, str, int]:
        return (self.task, self.agent_key, self.attempt)

    @property
    def finished(self) -> bool:
        return is_finished_phase(self.phase)


def _number(source: Mapping[str, Any], *names: str) -> Any:
    for name in names:
        value = source.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
    return None


def agent_tokens(status: Mapping[str, Any]
                 ) -> tuple[int | None, int | None, int | None, float | None]:
    """Tokens and cost an agent reported (`status.agentResult`, when the Trial has one)."""
    result = status.get("agentResult")
    if not isinstance(result, Mapping):
        return (None, None, None, None)
    return (_number(result, "inputTokens", "nInputTokens"),
            _number(result, "cacheTokens", "nCacheTokens"),
            _number(result, "outputTokens", "nOutputTokens"),
            _number(result, "costUsd"))


def observe(trial: Mapping[str, Any]) -> ObservedTrial | None:
    """The Trial as a Sweep sees it; None when it carries no sweep slot labels."""
    meta = trial.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    status = trial.get("status") or {}
    spec = trial.get("spec") or {}
    try:
        attempt = int(labels[LABEL_ATTEMPT])
        generation = int(labels.get(LABEL_RETRY, "0"))
    except (KeyError, ValueError):
        return None
    key = annotations.get(ANNOTATION_AGENT_KEY) or (spec.get("agent") or {}).get("name", "")
    phase = status.get("phase") or "Pending"
    finished = is_finished_phase(phase)
    rewards = status.get("rewards") if finished else None
    info = exception_info(trial) if finished else None
    return ObservedTrial(
        name=meta.get("name", ""),
        task=(spec.get("taskRef") or {}).get("name", ""),
        agent_key=key,
        attempt=attempt,
        generation=generation,
        phase=phase,
        rewards=dict(rewards) if isinstance(rewards, Mapping) else None,
        exception=(info or {}).get("exception_type"),
        resource_version=str(meta.get("resourceVersion") or ""),
        tokens=agent_tokens(status),
    )


def newer(a: ObservedTrial | None, b: ObservedTrial) -> bool:
    """Is `b` at least as recent as `a` (resourceVersions compared as numbers when they are)?"""
    if a is None:
        return True
    if a.resource_version.isdigit() and b.resource_version.isdigit():
        return int(b.resource_version) >= int(a.resource_version)
    return True


def wakes(before: ObservedTrial | None, after: ObservedTrial | None) -> bool:
    """Does a Trial event change what its Sweep creates or shows? A new Trial, a new phase
    (the running and pending counts; a finished Trial frees a slot) or a new result do; the
    Trial's own progress within a phase (its phase records, its current phase) does not, and
    the Sweep skips a reconcile pass for it."""
    if after is None or after is before:
        return False
    if before is None:
        return True
    return ((before.phase, before.rewards, before.exception, before.tokens)
            != (after.phase, after.rewards, after.exception, after.tokens))


# ---------------------------------------------------------------- Tasks

TaskStateName = Literal["ready", "pending", "invalid", "missing"]


@dataclass(frozen=True)
class TaskState:
    name: str
    state: TaskStateName
    message: str = ""


def selector_matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.match_labels.items()):
        return False
    for req in selector.match_expressions:
        present = req.key in labels
        if req.operator == "In" and (not present or labels[req.key] not in req.values):
            return False
        if req.operator == "NotIn" and present and labels[req.key] in req.values:
            return False
        if req.operator == "Exists" and not present:
            return False
        if req.operator == "DoesNotExist" and present:
            return False
    return True


def task_state(name: str, task: Mapping[str, Any] | None, waited: float,
               task_wait: float = TASK_WAIT_SEC) -> TaskState:
    """A Task named by a Sweep but missing is waited for `task_wait` seconds after the Sweep's
    creation (GitOps tools apply in any order), then its slots count as errors."""
    if task is None:
        if waited < task_wait:
            return TaskState(name, "pending", f"task {name} not found yet")
        return TaskState(name, "missing", f"task {name} not found")
    meta, status = task.get("metadata") or {}, task.get("status") or {}
    ready = condition(status.get("conditions"), "Ready", status=None)
    observed = status.get("observedGeneration")
    if ready is None or (observed is not None and observed < meta.get("generation", 0)):
        return TaskState(name, "pending", f"task {name} is not validated yet")
    if ready.get("status") == "True":
        return TaskState(name, "ready")
    reason = ready.get("reason") or Reason.TASK_INVALID
    if reason == Reason.BUNDLE_NOT_FOUND and waited < task_wait:
        return TaskState(name, "pending", f"task {name}: {ready.get('message', reason)}")
    return TaskState(name, "invalid", f"task {name}: {reason}: {ready.get('message', '')}")


def resolve_tasks(spec: SweepSpec, tasks: Iterable[Mapping[str, Any]], waited: float,
                  task_wait: float = TASK_WAIT_SEC) -> list[TaskState]:
    """The Sweep's tasks in order: the names listed, then the selector's matches by name."""
    by_name = {t["metadata"]["name"]: t for t in tasks}
    names = list(dict.fromkeys(spec.tasks.names))
    if spec.tasks.selector is not None:
        seen = set(names)
        names += sorted(n for n, t in by_name.items() if n not in seen and selector_matches(
            spec.tasks.selector, (t["metadata"].get("labels") or {})))
    return [task_state(n, by_name.get(n), waited, task_wait) for n in names]


# ---------------------------------------------------------------- the plan against the Trials


@dataclass
class Ledger:
    """The Trials of each slot (by generation) and the non-terminal ones, counted."""

    slots: dict[tuple[str, str, int], list[ObservedTrial]] = field(default_factory=dict)
    active: int = 0
    active_by_agent: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    active_by_task: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    @classmethod
    def of(cls, trials: Iterable[ObservedTrial]) -> Ledger:
        ledger = cls()
        for t in trials:
            ledger.slots.setdefault(t.slot_key, []).append(t)
            if not t.finished:
                ledger.add_active(t.task, t.agent_key)
        for trials_of_slot in ledger.slots.values():
            trials_of_slot.sort(key=lambda t: t.generation)
        return ledger

    def add_active(self, task: str, agent: str) -> None:
        self.active += 1
        self.active_by_agent[agent] += 1
        self.active_by_task[task] += 1

    def current(self, slot: Slot) -> ObservedTrial | None:
        trials = self.slots.get(slot.key)
        return trials[-1] if trials else None


def wanted_generation(slot: Slot, ledger: Ledger, retry_unscored: int) -> int | None:
    """The generation of the Trial this slot needs created, or None."""
    current = ledger.current(slot)
    if current is None:
        return 0
    if current.finished and current.rewards is None and current.generation < retry_unscored:
        return current.generation + 1
    return None


def admit(spec: SweepSpec, slots: Sequence[Slot], tasks: Sequence[TaskState],
          trials: Iterable[ObservedTrial]) -> list[tuple[Slot, int]]:
    """The Trials to create now, in plan order: missing slots (and unscored ones to retry) of
    ready tasks, within `parallelism`, each agent's `parallelism` and `perTaskParallelism`.
    Nothing while suspended or when the spec is unusable."""
    if spec.suspend or duplicate_agents(spec):
        return []
    ready = {t.name for t in tasks if t.state == "ready"}
    ledger = Ledger.of(trials)
    agent_limits = {agent_key(a): a.parallelism for a in spec.agents}
    admitted = []
    for slot in slots:
        if ledger.active >= spec.parallelism:
            break
        if slot.task not in ready:
            continue
        generation = wanted_generation(slot, ledger, spec.retry_unscored)
        if generation is None:
            continue
        limit = agent_limits.get(slot.agent_key)
        if limit is not None and ledger.active_by_agent[slot.agent_key] >= limit:
            continue
        if (spec.per_task_parallelism is not None
                and ledger.active_by_task[slot.task] >= spec.per_task_parallelism):
            continue
        admitted.append((slot, generation))
        ledger.add_active(slot.task, slot.agent_key)
    return admitted


# ---------------------------------------------------------------- status


def compress(indexes: Iterable[int]) -> str:
    """Job-style ranges: [0, 1, 2, 5, 7, 8] → "0-2,5,7-8"."""
    parts: list[str] = []
    start = prev = None
    for i in sorted(set(indexes)):
        if prev is not None and i == prev + 1:
            prev = i
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = i
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)


@dataclass(frozen=True)
class SlotView:
    """A plan slot with its current Trial and, once it is finished (or cannot run), its
    outcome as Harbor's statistics count it."""

    slot: Slot
    current: ObservedTrial | None
    outcome: Outcome | None


def slot_views(sweep_name: str, spec: SweepSpec, tasks: Sequence[TaskState],
               slots: Sequence[Slot], ledger: Ledger) -> list[SlotView]:
    """Every slot in plan order; a slot of an invalid or missing Task (no Trial) is finished
    with that error, under the name its Trial would have had. The one source of a sweep's
    results: the status, `shipyard sweep results` and the report."""
    dataset = dataset_name(sweep_name, spec)
    keys = {agent_key(a): eval_key(a.name, a.model, dataset) for a in spec.agents}
    bad = {t.name: t for t in tasks if t.state in ("invalid", "missing")}
    views = []
    for slot in slots:
        current = ledger.current(slot)
        outcome = None
        if current is None:
            if slot.task in bad:
                kind = exception_type(Reason.TASK_NOT_FOUND if bad[slot.task].state == "missing"
                                      else Reason.TASK_INVALID)
                outcome = Outcome(keys[slot.agent_key], slot.task,
                                  trial_name(sweep_name, slot), None, kind)
        elif current.finished:
            outcome = Outcome(keys[slot.agent_key], slot.task, current.name, current.rewards,
                              current.exception, current.tokens)
        views.append(SlotView(slot, current, outcome))
    return views


def _condition(type_: str, status: str, reason: str, message: str, now: datetime,
               generation: int | None, previous: Sequence[Mapping[str, Any]]) -> Condition:
    new = Condition(type=type_, status=status, reason=reason,  # type: ignore[arg-type]
                    message=message, observed_generation=generation)
    return carried(previous, new, iso(now))


def _names(tasks: Sequence[TaskState]) -> str:
    shown = "; ".join(t.message for t in tasks[:MAX_NAMED])
    return shown + (f"; and {len(tasks) - MAX_NAMED} more" if len(tasks) > MAX_NAMED else "")


def sweep_status(sweep: Mapping[str, Any], spec: SweepSpec, tasks: Sequence[TaskState],
                 slots: Sequence[Slot], trials: Iterable[ObservedTrial], now: datetime
                 ) -> SweepStatus:
    """The Sweep's status from its plan and its Trials. A slot counts through its current
    Trial (the latest retry); a slot of an invalid or missing Task counts as an error, as
    Harbor counts a task that cannot run."""
    meta = sweep.get("metadata") or {}
    name, generation = meta.get("name", ""), meta.get("generation")
    previous = (sweep.get("status") or {}).get("conditions") or []
    ledger = Ledger.of(trials)
    dataset = dataset_name(name, spec)
    bad = {t.name: t for t in tasks if t.state in ("invalid", "missing")}

    # Counted in a plain Counter: a pydantic model's attribute writes cost ~4 µs each, at
    # every slot of every pass.
    tally: Counter[str] = Counter()
    completed: list[int] = []
    failed: list[int] = []
    planned: Counter[str] = Counter()
    views = slot_views(name, spec, tasks, slots, ledger)
    for view in views:
        planned[view.slot.agent_key] += 1
        current, outcome = view.current, view.outcome
        if current is not None:
            tally["created"] += 1
            if not current.finished:
                tally["running" if current.phase == "Running" else "pending"] += 1
                if current.phase == "Queued":  # waits for Kueue's admission
                    tally["queued"] += 1
        if outcome is None:
            continue
        completed.append(view.slot.index)
        tally["completed"] += 1
        if outcome.rewards is None:
            failed.append(view.slot.index)
            tally["failed"] += 1
        if outcome.exception:
            tally["errored"] += 1
            if outcome.exception == HarborError.CANCELLED:
                tally["cancelled"] += 1

    counts = SweepCounts(planned=len(slots),
                         retried=sum(len(ts) - 1 for ts in ledger.slots.values()), **tally)
    outcomes = [v.outcome for v in views if v.outcome is not None]
    results = eval_results(outcomes, [m.type for m in spec.metrics])
    eval_list = []
    for agent in sorted(spec.agents, key=lambda a: eval_key(a.name, a.model, dataset)):
        key = eval_key(agent.name, agent.model, dataset)
        stats = results.get(key)
        if not planned[agent_key(agent)]:
            continue
        tokens = stats.tokens if stats else NO_TOKENS
        eval_list.append(EvalStats(
            key=key, agent=agent.name, model=agent.model, dataset=dataset,
            planned=planned[agent_key(agent)], finished=len(stats.rewards) if stats else 0,
            n_trials=stats.n_trials if stats else 0, n_errors=stats.n_errors if stats else 0,
            metrics=stats.metrics if stats else [],
            pass_at_k={str(k): v for k, v in stats.pass_at_k.items()} if stats else {},
            exception_counts=stats.exception_counts if stats else {},
            n_input_tokens=tokens[0], n_cache_tokens=tokens[1], n_output_tokens=tokens[2],
            cost_usd=tokens[3],
        ))
    mean = overall_mean(outcomes)
    totals = token_totals(outcomes)

    conditions = []
    problem = None
    if duplicate_agents(spec):
        problem = (Reason.DUPLICATE_AGENTS, "spec.agents: the same agent and model appear "
                   f"more than once ({', '.join(duplicate_agents(spec))}); give each a "
                   "different model")
    elif oversized(len(tasks), spec):
        problem = (Reason.TOO_MANY_TRIALS, oversized(len(tasks), spec) or "")
    elif not tasks:
        problem = (Reason.NO_TASKS, "spec.tasks selects no Task (names "
                   f"{spec.tasks.names or '[]'}, selector "
                   f"{spec.tasks.selector.model_dump(by_alias=True, exclude_defaults=True) if spec.tasks.selector else 'none'})")  # noqa: E501
    done = bool(slots) and counts.completed == counts.planned and not any(
        wanted_generation(s, ledger, spec.retry_unscored) is not None
        for s in slots if s.task not in bad)
    if problem is not None:
        conditions.append(_condition("Failed", "True", problem[0], problem[1], now, generation,
                                     previous))
    elif done:
        shown = f", mean {mean:.4g}" if mean is not None else ""
        conditions.append(_condition(
            "Complete", "True", Reason.ALL_TRIALS_FINISHED,
            f"{counts.completed}/{counts.planned} trials finished, {counts.errored} "
            f"error(s){shown}", now, generation, previous))
    if spec.suspend and not done:
        conditions.append(_condition("Suspended", "True", Reason.SUSPENDED,
                                     "spec.suspend: no new Trial is created", now, generation,
                                     previous))
    elif condition(previous, "Suspended", status=None):  # kept False, as a Job's
        conditions.append(_condition("Suspended", "False", Reason.RESUMED, "the sweep resumed",
                                     now, generation, previous))
    if bad:
        reason = Reason.TASK_INVALID if any(t.state == "invalid" for t in bad.values()) \
            else Reason.TASK_NOT_FOUND
        conditions.append(_condition(
            "TasksReady", "False", reason,
            f"{len(bad)} task(s) cannot run, their trials count as errors: "
            + _names(list(bad.values())), now, generation, previous))
    else:
        waiting = [t for t in tasks if t.state == "pending"]
        if waiting:
            conditions.append(_condition("TasksReady", "False", Reason.WAITING_FOR_TASKS,
                                         _names(waiting), now, generation, previous))
        elif tasks:
            conditions.append(_condition("TasksReady", "True", Reason.READY,
                                         f"{len(tasks)} task(s) ready", now, generation,
                                         previous))

    prior = sweep.get("status") or {}
    started = prior.get("startTime") or (iso(now) if counts.created else None)
    finished_at = (prior.get("completionTime") or iso(now)) if done else None
    return SweepStatus(
        observed_generation=generation,
        conditions=conditions,
        progress=f"{counts.completed}/{counts.planned}",
        mean=mean,
        counts=counts,
        completed_indexes=compress(completed),
        failed_indexes=compress(failed),
        evals=eval_list,
        n_input_tokens=totals[0], n_cache_tokens=totals[1], n_output_tokens=totals[2],
        cost_usd=totals[3],
        start_time=started,
        completion_time=finished_at,
    )


# ---------------------------------------------------------------- whether to go on


def is_settled(meta: Mapping[str, Any], status: Mapping[str, Any] | None) -> bool:
    """Complete for its current spec: a Sweep needs no reconciling (and the operator holds no
    daemon and no finalizer on it) until its spec changes (`sweep retry`, resume)."""
    status = status or {}
    return (condition(status.get("conditions"), "Complete") is not None
            and status.get("observedGeneration") == meta.get("generation"))


# ---------------------------------------------------------------- when to look again

PAUSE_MIN = 0.05
PAUSE_MAX = 0.5
PASS_SHARE = 0.1
"""A pass (expand, admit, status: O(slots), on the event loop) takes at most this share of the
time while Trial events keep coming."""


def pause_after(pass_sec: float) -> float:
    """Seconds to let Trial events gather after a wake-up before the next pass: short when a
    pass is cheap, so a finished Trial's slot is refilled at once (the refill delay adds to
    every Trial of a sweep), and long enough for a big plan that its passes stay
    PASS_SHARE of the event loop."""
    return min(PAUSE_MAX, max(PAUSE_MIN, pass_sec / PASS_SHARE))



# When to write it: `reconcile.write_policy` (re-exported for its readers).
