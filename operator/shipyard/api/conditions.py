"""Status conditions, the one way every resource sets them, and the one rule that says which
of them changed (what an Event announces and what makes a status write urgent).

`set_condition` has Kubernetes' `meta.SetStatusCondition` semantics: a condition's
`lastTransitionTime` changes only when its status does; its reason, message and observed
generation always follow. Pure; times are given, as API strings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from shipyard.api.conventions import condition
from shipyard.api.models import Condition

ANNOUNCED = ("type", "status", "reason", "message")
"""What a change of makes a condition worth an Event (by default)."""


def _get(c: Any, key: str) -> Any:
    if isinstance(c, Mapping):
        camel = {"last_transition_time": "lastTransitionTime",
                 "observed_generation": "observedGeneration"}.get(key, key)
        return c.get(camel)
    return getattr(c, key, None)


def transition_time(before: Any | None, status: str, now: str) -> str:
    """The rule: the previous condition's transition time while its status is unchanged,
    `now` when the status changes (or the condition is new)."""
    if before is not None and _get(before, "status") == status:
        return _get(before, "last_transition_time") or now
    return now


def set_condition(conditions: list[Condition], new: Condition, now: str) -> bool:
    """Set `new` in `conditions` (in place: the condition of its type is updated, or `new` is
    appended), with `new.last_transition_time`, when given, as the time of a transition;
    True when anything changed."""
    for c in conditions:
        if c.type != new.type:
            continue
        before = c.model_copy()
        c.last_transition_time = transition_time(
            before, new.status, new.last_transition_time or now)
        c.status, c.reason, c.message = new.status, new.reason, new.message
        c.observed_generation = new.observed_generation
        return c != before
    conditions.append(new.model_copy(update={
        "last_transition_time": new.last_transition_time or now}))
    return True


def carried(previous: Iterable[Any] | None, new: Condition, now: str) -> Condition:
    """`new`, with its transition time carried over from the condition of its type among
    `previous` (API dicts or Conditions) as `set_condition` would: for a status built afresh."""
    before = condition(previous, new.type, status=None)
    return new.model_copy(update={"last_transition_time": transition_time(
        before, new.status, new.last_transition_time or now)})


def changed(before: Iterable[Any] | None, after: Iterable[Any],
            fields: Sequence[str] = ANNOUNCED) -> list[Any]:
    """The conditions of `after` that are new or differ from `before` in `fields` (API dicts
    or Conditions): what an Event announces, before the status that records it."""
    seen = {tuple(_get(c, f) for f in fields) for c in before or ()}
    return [c for c in after if tuple(_get(c, f) for f in fields) not in seen]


TRANSITION = ("type", "status", "reason")
"""What a reader waits for in a condition (its message may change with any progress)."""


def material(before: Iterable[Any] | None, after: Iterable[Any] | None) -> bool:
    """The write policy's test: the conditions made a transition (a type, status or reason
    came, went or changed), so the status is written soon rather than with the next batch."""
    def keys(conditions: Iterable[Any] | None) -> list[tuple[Any, ...]]:
        return [tuple(_get(c, f) for f in TRANSITION) for c in conditions or ()]
    return keys(before) != keys(after)


def event_key(c: Any) -> str:
    """The name an Event about a condition change is posted under (once, however often the
    same change is written): its type, status, reason and transition time."""
    return (f"{_get(c, 'type')}/{_get(c, 'status')}/{_get(c, 'reason')}/"
            f"{_get(c, 'last_transition_time')}")
