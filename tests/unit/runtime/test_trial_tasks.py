"""The per-trial driver tasks (runtime/trial_tasks.py), with stand-in drivers: no cluster."""

from __future__ import annotations

import asyncio
import logging

from shipyard.runtime import trial_tasks

LOG = logging.getLogger("test")


async def no_reread(namespace: str, name: str) -> dict | None:
    raise AssertionError("a driver that did not fail is not read again")


def trial(uid: str = "u1", phase: str = "Running", note: str = "") -> dict:
    return {"metadata": {"name": "t", "namespace": "ns", "uid": uid,
                         "annotations": {"note": note}}, "status": {"phase": phase}}


def test_a_task_sees_the_live_body_and_is_not_started_again_once_it_returns() -> None:
    seen: list[str] = []
    release = asyncio.Event()

    async def driver(body, logger) -> None:
        await release.wait()
        seen.append(body["metadata"]["annotations"]["note"])

    async def scenario() -> None:
        assert not trial_tasks.update("ns", "t", trial())
        trial_tasks.start("ns", "t", trial(), LOG, driver, no_reread)
        assert trial_tasks.update("ns", "t", trial(note="later"))
        release.set()
        await asyncio.sleep(0.01)
        assert seen == ["later"] and trial_tasks.running() == 0
        # A late event still showing it unfinished does not start it again.
        assert trial_tasks.update("ns", "t", trial(note="stale"))
        trial_tasks.stop("ns", "t", "u1")
        # A new Trial of the same name (another uid) is a new trial.
        assert not trial_tasks.update("ns", "t", trial(uid="u2"))

    asyncio.run(scenario())


def test_a_failing_driver_is_started_again_from_the_trial_read_afresh_and_deletion_cancels_it(
        monkeypatch) -> None:
    calls: list[str] = []
    cancelled = asyncio.Event()

    async def reread(namespace: str, name: str) -> dict | None:
        return trial(uid="u3", note="as written by the failed driver")

    async def driver(body, logger) -> None:
        calls.append(body["metadata"]["annotations"]["note"])
        if len(calls) == 1:
            raise RuntimeError("apiserver 503")
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    monkeypatch.setattr(trial_tasks, "FIRST_BACKOFF_SEC", 0.0)

    async def scenario() -> None:
        trial_tasks.start("ns", "t", trial(uid="u3", note="from the watch"), LOG, driver, reread)
        for _ in range(20):
            await asyncio.sleep(0)
        assert calls == ["from the watch", "as written by the failed driver"]
        assert trial_tasks.running() == 1
        trial_tasks.stop("ns", "t", "u3")
        await asyncio.wait_for(cancelled.wait(), 1)
        assert trial_tasks.running() == 0

    asyncio.run(scenario())


def test_stop_all_cancels_every_task() -> None:
    async def driver(body, logger) -> None:
        await asyncio.Event().wait()

    async def scenario() -> None:
        for i in range(3):
            trial_tasks.start("ns", f"t{i}", trial(uid=f"s{i}"), LOG, driver, no_reread)
        await asyncio.sleep(0)
        await trial_tasks.stop_all(timeout=1)
        assert trial_tasks.running() == 0

    asyncio.run(scenario())


def test_a_failing_driver_of_a_deleted_trial_is_not_started_again(monkeypatch) -> None:
    calls: list[int] = []

    async def gone(namespace: str, name: str) -> dict | None:
        return None

    async def driver(body, logger) -> None:
        calls.append(1)
        raise RuntimeError("apiserver 503")

    monkeypatch.setattr(trial_tasks, "FIRST_BACKOFF_SEC", 0.0)

    async def scenario() -> None:
        trial_tasks.start("ns", "t", trial(uid="u4"), LOG, driver, gone)
        for _ in range(20):
            await asyncio.sleep(0)
        assert calls == [1] and trial_tasks.running() == 0

    asyncio.run(scenario())


def test_a_driver_that_fails_the_same_way_again_and_again_ends_its_trial(monkeypatch) -> None:
    """Issue 22 (class 6): a repeatable driver error (here, an int too big for a float) ends
    the trial after MAX_REPEATED_FAILURES tries; the cluster's own failures (a 503, a broken
    connection) never count towards it."""
    from shipyard.kube.errors import ApiException

    monkeypatch.setattr(trial_tasks, "FIRST_BACKOFF_SEC", 0.0)
    errors = [ApiException(status=503), ConnectionResetError()] * 3 + [
        OverflowError("int too large to convert to float")] * 10
    calls, ended = [], []

    async def driver(body, logger) -> None:
        calls.append(1)
        raise errors[len(calls) - 1]

    async def reread(namespace: str, name: str) -> dict | None:
        return trial()

    async def give_up(body, logger, message: str) -> None:
        ended.append(message)

    async def scenario() -> None:
        trial_tasks.start("ns", "t", trial(), LOG, driver, reread, give_up)
        for _ in range(200):
            await asyncio.sleep(0.01)
            if ended:
                break
        trial_tasks.stop("ns", "t", "u1")

    asyncio.run(scenario())
    assert len(calls) == 6 + trial_tasks.MAX_REPEATED_FAILURES
    assert ended and "5 times in a row" in ended[0] and "OverflowError" in ended[0]
    assert trial_tasks.transient(ApiException(status=500))
    assert not trial_tasks.transient(ApiException(status=422))


def test_a_driver_refused_because_its_namespace_is_being_deleted_stops_without_retrying(
        caplog) -> None:
    import json

    from shipyard.kube.errors import ApiException

    calls: list[int] = []

    async def driver(body, logger) -> None:
        calls.append(1)
        e = ApiException(status=403, reason="Forbidden")
        e.body = json.dumps({"reason": "Forbidden", "details": {
            "causes": [{"reason": "NamespaceTerminating"}]}})
        raise e

    async def scenario() -> None:
        with caplog.at_level(logging.INFO):
            trial_tasks.start("ns", "t", trial(uid="u9"), LOG, driver, no_reread)
            for _ in range(20):
                await asyncio.sleep(0)
        assert calls == [1] and trial_tasks.running() == 0

    asyncio.run(scenario())
    assert "namespace is being deleted" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
