"""Leader election over a coordination.k8s.io Lease, decided purely (the calls are in
`kube.lease`, the loop in `runtime.leader`).

A candidate judges expiry by its own clock, as client-go does: a lease has expired when its
record (holder, renewTime) has not changed for `leaseDurationSeconds` since this candidate first
saw it. The holder's renewTime is written by another machine's clock; comparing it with ours
would let clock skew hand over a lease that its holder still believes it holds. The holder, for
its part, stops driving once it has not renewed for its renew deadline, shorter than the lease
duration, counted from when it *sent* its last successful renewal: it is gone before any
candidate can decide that the lease expired.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Step(enum.Enum):
    CREATE = "create"
    """No Lease yet: create it, held by us."""
    RENEW = "renew"
    """We hold it (e.g. a restarted container with the same identity): renew it."""
    TAKE_OVER = "take-over"
    """Released or expired: write ourselves as holder (fails on conflict if another was faster)."""
    WAIT = "wait"
    """Another holder renews it: look again later."""


@dataclass(frozen=True)
class LeaseState:
    """What the Lease says (None fields: unset)."""

    holder: str | None
    renew_time: str | None  # as written; only compared for change
    duration_sec: float | None


@dataclass(frozen=True)
class Seen:
    """A record as a candidate first saw it, and when (its monotonic clock)."""

    holder: str | None
    renew_time: str | None
    since: float


@dataclass(frozen=True)
class Decision:
    step: Step
    seen: Seen | None
    wait_sec: float = 0.0
    """For WAIT: when the lease could expire at the earliest, from now."""


def decide(me: str, lease: LeaseState | None, now: float, seen: Seen | None,
           default_duration: float) -> Decision:
    """What a candidate `me` does with the Lease it just read at `now` (monotonic), given what it
    saw before (`seen`, None at first)."""
    if lease is None:
        return Decision(Step.CREATE, None)
    if lease.holder == me:
        return Decision(Step.RENEW, None)
    if not lease.holder:
        return Decision(Step.TAKE_OVER, None)
    if seen is None or (seen.holder, seen.renew_time) != (lease.holder, lease.renew_time):
        seen = Seen(lease.holder, lease.renew_time, now)
    duration = lease.duration_sec if lease.duration_sec and lease.duration_sec > 0 \
        else default_duration
    left = seen.since + duration - now
    if left <= 0:
        return Decision(Step.TAKE_OVER, seen)
    return Decision(Step.WAIT, seen, wait_sec=left)


def must_stop(last_renewed: float | None, now: float, renew_deadline: float) -> bool:
    """The holder stops (exits) once its last successful renewal, timed when the request was
    sent, is `renew_deadline` old: by then a candidate may be about to take over."""
    return last_renewed is None or now - last_renewed >= renew_deadline


def renew_timeout(last_renewed: float | None, now: float, renew_deadline: float,
                  least: float) -> float:
    """How long one renewal's request may take: until the renew deadline (as client-go's
    renew loop allows), at least `least`. A request cut at the retry period instead fails
    every time the apiserver answers slower than that (1,000 Trials created at once on two
    cores: the Lease's PUT took over 2 s, and the operator gave up its leadership and exited
    while the apiserver was still answering)."""
    if last_renewed is None:
        return least
    return max(least, renew_deadline - (now - last_renewed))
