"""The measured thread pool (runtime/executor.py)."""

from __future__ import annotations

import threading

from shipyard.plan.settings import THREADS, OperatorSettings
from shipyard.runtime.executor import MeasuredExecutor


def test_size_from_the_settings() -> None:
    assert OperatorSettings.from_env({"SHIPYARD_THREADS": "12"}).threads == 12
    assert OperatorSettings.from_env({"SHIPYARD_THREADS": "nonsense"}).threads == THREADS


def test_calls_beyond_the_pool_wait_and_the_wait_is_measured() -> None:
    pool = MeasuredExecutor(2)
    gate = threading.Event()
    futures = [pool.submit(gate.wait, 5) for _ in range(3)]
    gate.set()
    assert all(f.result(5) for f in futures)
    pool.shutdown()
    assert (pool.calls, pool.peak_busy, pool.busy) == (3, 2, 0)
    assert "kube thread pool: 2 threads, 3 calls, peak 2 busy" in pool.summary()
