"""The trial wake-ups (handlers/pod_watch.py)."""

from __future__ import annotations

import asyncio

from shipyard.api.conventions import LABEL_COMPONENT, LABEL_TRIAL
from shipyard.handlers import pod_watch
from shipyard.runtime import pods, wake
from shipyard.runtime.wake import Waiter as TrialWaker


class SetWhileCancelled(asyncio.Event):
    """A wake that lands while a timed-out wait is being cancelled (wait_for yields to the loop
    then, and the pod watch may set the event meanwhile)."""

    async def wait(self) -> bool:
        try:
            return await super().wait()
        except asyncio.CancelledError:
            self.set()
            raise


def test_a_wake_during_a_timed_out_wait_is_not_lost() -> None:
    async def run() -> tuple[bool, bool]:
        waker = TrialWaker(event=SetWhileCancelled())
        return await waker.wait(0.01), waker.event.is_set()

    assert asyncio.run(run()) == (True, False)


def test_a_wait_times_out_without_a_wake_and_returns_at_once_after_one() -> None:
    async def run() -> tuple[bool, bool, bool]:
        waker = TrialWaker()
        quiet = await waker.wait(0.01)
        waker.event.set()
        woken = await waker.wait(5)
        return quiet, woken, waker.event.is_set()

    assert asyncio.run(run()) == (False, True, False)


def _pod_event(name: str, owner: str, deleting: bool = False, type_: str = "MODIFIED"
               ) -> dict:
    meta = {"name": name, "namespace": "ns",
            "labels": {LABEL_TRIAL: owner, LABEL_COMPONENT: "environment"},
            "ownerReferences": [{"kind": "Trial", "name": owner}]}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"type": type_, "object": {"metadata": meta}}


def _seen_pods(events: list[dict], trial_first: tuple[bool, bool] | None) -> list[str]:
    """Feed a finished Trial (finished, keepPods) and pod events in either order; the pods
    that are removed."""
    removed: list[str] = []

    async def run() -> None:
        original = pods.remove_left_behind
        pods.remove_left_behind = lambda ns, trial, names: removed.extend(names)
        try:
            if trial_first is not None:
                removed.extend(pods.trial_seen("ns", "t", *trial_first))
            for e in events:
                body = e["object"]
                await pod_watch.pod_changed(event=e, body=body, namespace="ns",
                                            name=body["metadata"]["name"])
        finally:
            pods.remove_left_behind = original

    asyncio.run(run())
    return removed


def test_a_finished_trial_s_pod_left_behind_goes_whichever_watch_tells_first() -> None:
    pods.trial_gone("ns", "t")
    # The pod first (kept aside), then the finished Trial: the pod is to go.
    assert _seen_pods([_pod_event("p", "t")], None) == []
    assert pods.trial_seen("ns", "t", True, False) == ["p"]
    pods.trial_gone("ns", "t")
    # The finished Trial first, then its pod: it goes; one being deleted is left alone.
    assert _seen_pods([_pod_event("p", "t"), _pod_event("q", "t", deleting=True)],
                      (True, False)) == ["p"]
    pods.trial_gone("ns", "t")


def test_pods_of_kept_unfinished_or_driven_trials_stay() -> None:
    pods.trial_gone("ns", "t")
    assert _seen_pods([_pod_event("p", "t")], (True, True)) == []  # keepPods
    pods.trial_gone("ns", "t")
    assert _seen_pods([_pod_event("p", "t")], None) == []
    assert pods.trial_seen("ns", "t", False, False) == []  # unfinished: its driver's
    assert _seen_pods([], (True, False)) == []  # the pod was handed to the driver's watch
    pods.trial_gone("ns", "t")
    waker = wake.waiter(wake.TRIAL, "ns", "t")  # a driver runs: its pods are its own
    try:
        assert _seen_pods([_pod_event("p", "t")], (True, False)) == []
        assert "p" in waker.pods
    finally:
        wake.forget(wake.TRIAL, "ns", "t")
        pods.trial_gone("ns", "t")
