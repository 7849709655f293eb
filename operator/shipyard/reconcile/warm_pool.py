"""A warm pool's pods, decided (`docs/warm-pods.md`): which to create, which to delete, and the
pool's status. Pure: the handler lists the pool's unclaimed pods and counts its claimed ones.

Pods that died or were evicted before a claim are replaced (no trial saw them, so no trial's
retries count them); pods of another key (the task, its image or the operator changed) are
replaced as well; pods over the wanted number go, the least advanced first."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from shipyard.api.conventions import LABEL_WARM_KEY, iso
from shipyard.api.models import Condition, WarmPoolStatus
from shipyard.api.reasons import Reason
from shipyard.reconcile.pod_observation import observe_pod

WarmState = Literal["ready", "starting", "dead", "deleting"]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class WarmPod:
    name: str
    resource_version: str
    key: str | None
    state: WarmState
    created_at: datetime | None = None
    problem: str | None = None
    """What keeps it from running, or ended it (an image that does not pull, a config error)."""


def observe_warm_pod(pod: dict[str, Any]) -> WarmPod:
    seen = observe_pod(pod)
    meta = pod.get("metadata") or {}
    state: WarmState
    if seen.deleting:
        state = "deleting"
    elif (seen.lost or seen.image_pull_permanent or seen.config_error or seen.service_failure
          or seen.fence_failure):
        state = "dead"
    elif seen.running:
        state = "ready"
    else:
        state = "starting"
    problem = (seen.fence_failure or seen.lost or seen.image_pull_error or seen.config_error
               or seen.service_failure
               if state in ("dead", "starting") else None)
    return WarmPod(meta.get("name", ""), meta.get("resourceVersion", ""),
                   (meta.get("labels") or {}).get(LABEL_WARM_KEY), state, seen.created_at,
                   problem[:300] if problem else None)


def claimable(pods: list[WarmPod], key: str) -> list[WarmPod]:
    """The pods a trial of `key` may claim, the ready first (then the oldest: closest to
    running)."""
    fit = [p for p in pods if p.key == key and p.state in ("ready", "starting")]
    return sorted(fit, key=lambda p: (p.state != "ready", p.created_at or datetime.max))


@dataclass
class PoolDecision:
    create: int = 0
    delete: list[WarmPod] = field(default_factory=list)
    status: WarmPoolStatus = field(default_factory=WarmPoolStatus)


def decide(replicas: int, key: str | None, pods: list[WarmPod], claimed: int,
           generation: int | None, now: datetime, blocked: str | None = None,
           failed: str | None = None) -> PoolDecision:
    """What to do with a pool's unclaimed pods. `key` None (with `blocked` saying why: the task
    is not ready, its image not built) keeps nothing: no pod of an unknown fit. `failed`: why
    the last pod that died failed, while its replacement waits (`dead_hold`)."""
    live = [p for p in pods if p.state in ("ready", "starting") and key is not None
            and p.key == key]
    delete = [p for p in pods if p.state != "deleting" and p not in live]
    # The least advanced first: a starting pod before a ready one, the newest first (an older
    # starting pod is the closer to running; deleting it wastes the most of its start).
    ordered = sorted(live, key=lambda p: (p.state == "ready", -(p.created_at or EPOCH)
                                          .timestamp()))
    excess = max(0, len(live) - replicas)
    delete += ordered[:excess]
    kept = ordered[excess:]
    ready = sum(1 for p in kept if p.state == "ready")
    status = WarmPoolStatus(observed_generation=generation, ready=ready,
                            starting=len(kept) - ready, claimed=claimed, key=key)
    dead = next((p for p in pods if p.state == "dead" and p.problem), None)
    failed = f"pod {dead.name} failed: {dead.problem}" if dead is not None else failed
    stuck = next((p for p in kept if p.state == "starting" and p.problem), None)
    if blocked is not None:
        reason, message, value = Reason.POOL_NOT_READY, blocked, "False"
    elif ready >= replicas:
        reason, message, value = Reason.POOL_READY, f"{ready} of {replicas} pods ready", "True"
    elif failed is not None:  # replaced, after DEAD_BACKOFF_SEC (`dead_hold`)
        reason, message, value = (Reason.PODS_FAILING,
                                  f"{ready} of {replicas} pods ready; {failed}", "False")
    else:
        message = f"{ready} of {replicas} pods ready"
        if stuck is not None:
            message += f"; pod {stuck.name}: {stuck.problem}"
        reason, value = Reason.PODS_STARTING, "False"
    status.conditions = [Condition(type="Ready", status=value, reason=reason, message=message,
                                   last_transition_time=iso(now),
                                   observed_generation=generation)]
    return PoolDecision(create=0 if key is None else max(0, replicas - len(live)),
                        delete=delete, status=status)


DEAD_BACKOFF_SEC = 30.0
"""How long a pool waits before it replaces a pod that failed (an image that cannot be pulled,
a container that cannot start): a failing pool makes at most `replicas` pods this often, not
one a second, and its Ready condition says why (`PodsFailing`)."""


@dataclass(frozen=True)
class DeadWatch:
    """The last pod of a pool seen dead: when, and why (None: none lately)."""

    at: float | None = None
    why: str | None = None


def dead_hold(seen: DeadWatch, pods: list[WarmPod], now: float) -> tuple[float, DeadWatch]:
    """Seconds to hold back creating pods (0: none), and what to remember: a dead pod seen now
    starts the hold again. Why the last one failed is kept past the hold, while its
    replacements start (they may fail the same way a moment later), until a pod is ready."""
    dead = next((p for p in pods if p.state == "dead"), None)
    if dead is not None:
        seen = DeadWatch(now, f"pod {dead.name} failed: {dead.problem or 'it ended'}")
    if seen.at is not None and now - seen.at < DEAD_BACKOFF_SEC:
        return DEAD_BACKOFF_SEC - (now - seen.at), seen
    if any(p.state == "ready" for p in pods):
        return 0.0, DeadWatch()
    return 0.0, seen


CLAIM_SETTLE_SEC = 1.0
"""How long a Sweep's pool waits, after a claim, before it replaces the claimed pod: the
Sweep sizes it again first (near its end, one less per claim)."""


@dataclass(frozen=True)
class ClaimWatch:
    """What a pool's last pass saw: its claimed pods (by name), and since when a claim waits
    before its pod is replaced (None: none waits)."""

    claimed: frozenset[str] = frozenset()
    waiting_since: float | None = None


def refill_hold(seen: ClaimWatch, claimed: frozenset[str], sweeps: bool, now: float
                ) -> tuple[float, ClaimWatch]:
    """Seconds to hold back replacing claimed pods (0: none), and what to remember. A Sweep's
    pool (`sweeps`) is sized by its Sweep, which counts a trial holding a pod as started and
    writes the new size after the claim: a pool that replaced a claimed pod at once would
    make a pod it then deletes unclaimed near the Sweep's end. So a claim's replacement waits
    CLAIM_SETTLE_SEC, by when the Sweep's size holds (or still wants it, mid-sweep). A
    WarmPool of its own replaces at once."""
    since = seen.waiting_since
    if sweeps and since is None and claimed - seen.claimed:  # a pod claimed since
        since = now
    if since is not None and now - since < CLAIM_SETTLE_SEC:
        return CLAIM_SETTLE_SEC - (now - since), ClaimWatch(claimed, since)
    return 0.0, ClaimWatch(claimed)
