"""The trial wake-ups (handlers/pod_watch.py)."""

from __future__ import annotations

import asyncio

from shipyard.handlers.pod_watch import TrialWaker


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
