"""The one wake registry (runtime/wake.py): keyed by kind/namespace/name, with followers."""

from __future__ import annotations

import asyncio

from shipyard.runtime import wake


def test_a_wake_reaches_the_waiter_of_its_key_only() -> None:
    async def run() -> tuple[bool, bool]:
        trial = wake.waiter(wake.TRIAL, "ns", "t")
        other = wake.waiter(wake.TRIAL, "ns", "u")
        wake.wake(wake.TRIAL, "ns", "t")
        wake.wake(wake.SWEEP, "ns", "t")  # another kind, the same name: nobody
        return await trial.wait(0.01), await other.wait(0.01)

    try:
        assert asyncio.run(run()) == (True, False)
    finally:
        wake.forget(wake.TRIAL, "ns", "t")
        wake.forget(wake.TRIAL, "ns", "u")


def test_a_follower_is_woken_with_what_it_follows_until_it_stops_following() -> None:
    task, trial = (wake.TASK, "ns", "hello"), (wake.TRIAL, "ns", "t")

    async def run() -> tuple[bool, bool]:
        w = wake.waiter(*trial)
        wake.follow(task, trial)
        wake.wake(*task)  # e.g. the Task's ImageBuild changed
        first = await w.wait(0.01)
        wake.unfollow(task, trial)
        wake.wake(*task)
        return first, await w.wait(0.01)

    try:
        assert asyncio.run(run()) == (True, False)
    finally:
        wake.forget(*trial)


def test_forget_drops_the_waiter_and_what_it_followed() -> None:
    task, trial = (wake.TASK, "ns", "hello"), (wake.TRIAL, "ns", "t")
    wake.waiter(*trial)
    wake.follow(task, trial)
    assert wake.waiting(*trial)
    wake.forget(*trial)
    assert not wake.waiting(*trial)
    assert task not in wake._followers
    wake.wake(*task)  # nobody waits: a no-op


def test_wake_all_wakes_every_waiter_of_a_kind_in_a_namespace() -> None:
    async def run() -> tuple[bool, bool, bool]:
        a = wake.waiter(wake.SWEEP, "ns", "a")
        b = wake.waiter(wake.SWEEP, "ns", "b")
        c = wake.waiter(wake.SWEEP, "other", "c")
        wake.wake_all(wake.SWEEP, "ns")  # a Task of the namespace changed
        return await a.wait(0.01), await b.wait(0.01), await c.wait(0.01)

    try:
        assert asyncio.run(run()) == (True, True, False)
    finally:
        for ns, name in (("ns", "a"), ("ns", "b"), ("other", "c")):
            wake.forget(wake.SWEEP, ns, name)
