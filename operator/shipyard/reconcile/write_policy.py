"""The one write policy: when a resource's status (and the Events that explain it) is written.
Pure; every status writer asks it (`runtime.status_writer` writes).

- **Material changes go out soon**: a condition's transition (`material`: a type, status or
  reason came, went or changed), never a message alone.
- **Nothing unchanged is written** (`unchanged`): the same status and no new Event cost no
  request (ImageBuilds, Tasks' images, Sweeps).
- **Progress is coalesced**: a Sweep's counts at most every interval, and only after enough
  slots moved or a heartbeat (`write_delay`); a Trial's transitions with its next write before
  a wait, a pod's delete or its end, not one write each.
- **What a restart would redo stays small**: a trial driver writes before an exec once the
  execs since its last write took `UNSAVED_WORK_SEC` (`write_before_exec`), and a pod start
  that takes longer than `START_WRITE_DELAY_SEC` is written (`hold_start_write`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from shipyard.api.conditions import material

__all__ = ["hold_start_write", "material", "unchanged", "write_before_exec", "write_delay"]


def unchanged(written: Any, wanted: Any, events: int = 0) -> bool:
    """Nothing to write: the status is the one on record and no Event is pending."""
    return wanted == written and not events


# ---------------------------------------------------------------- Sweeps

CONDITION_DELAY = 2.0
"""A change of condition (Complete, Suspended, Failed, TasksReady) is written this soon."""
PROGRESS_STEP = 10
"""Finished slots between two writes of the progress alone (5 % of a smaller plan) ..."""
HEARTBEAT = 60.0
"""... or this many seconds, whichever comes first (running counts, mean)."""


def write_delay(written: Mapping[str, Any] | None, wanted: Mapping[str, Any], since: float,
                interval: float) -> float | None:
    """Seconds until the `wanted` status (API dicts) should replace the `written` one, `since`
    seconds after that write: None when there is nothing to write, 0 for now. A condition
    change goes out within CONDITION_DELAY; the progress alone at most every `interval`
    seconds and only once PROGRESS_STEP more slots finished or HEARTBEAT seconds passed: the
    writes stay a small fraction of the Trial creates however slow the Trials are."""
    if unchanged(written, wanted):
        return None
    if material((written or {}).get("conditions"), wanted.get("conditions")):
        return max(0.0, CONDITION_DELAY - since)
    counts, before = wanted.get("counts") or {}, (written or {}).get("counts") or {}
    moved = abs((counts.get("completed") or 0) - (before.get("completed") or 0))
    step = max(1, min(PROGRESS_STEP, (counts.get("planned") or 0) // 20))
    wait = interval if moved >= step else max(interval, HEARTBEAT)
    return max(0.0, wait - since)


# ---------------------------------------------------------------- Trials

UNSAVED_WORK_SEC = 5.0
"""A driver whose execs since its last write took this long writes what it has before its
next exec: coalesced writes must not leave more than this to redo after a restart, or an
operator restarted more often than a trial's execs take (a loaded node, kills every 10-25 s)
would redo the same steps forever without recording one. Quick execs cost no extra write."""


def write_before_exec(unsaved_sec: float, unsaved_execs: int) -> bool:
    """Whether the driver writes what it has before its next exec (`UNSAVED_WORK_SEC`). Never
    after a single exec: what a restart redoes is then that one exec, which answers at once
    (a launch never runs a phase twice), so a trivial trial's environment-and-agent launch,
    slow only because its node is busy, costs no write of its own before its verifier's."""
    return unsaved_execs >= 2 and unsaved_sec > UNSAVED_WORK_SEC

START_WRITE_DELAY_SEC = 10.0
"""While a trial's environment pod starts, the status (Running, the pod's name) is written only
once the start has taken this long: a pod that starts sooner costs no write of its own (what
changed goes with the next one; all of it is redone the same way after a restart)."""


def hold_start_write(dirty: bool, starting: bool, since: datetime | None, now: datetime,
                     timeout: float | None) -> tuple[float, datetime] | None:
    """While the environment pod starts (`starting`) with something unwritten (`dirty`): how
    long the driver may still wait before it writes (at most `timeout`), and since when it holds
    the write; None: write now."""
    if not (starting and dirty):
        return None
    since = since or now
    left = START_WRITE_DELAY_SEC - (now - since).total_seconds()
    if left <= 0:
        return None
    return (left if timeout is None else min(timeout, left)), since
