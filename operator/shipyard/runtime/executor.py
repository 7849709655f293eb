"""The thread pool behind every blocking Kubernetes call (asyncio.to_thread), measured.

The kubernetes client is blocking, so each call holds a thread while it waits for the apiserver
(an exec for as long as the runner's launch grace). asyncio's default pool has
min(32, cores + 4) threads: 6 on a 2-core node, a ceiling shared by every trial. This pool is
sized by `OperatorSettings.threads` (SHIPYARD_THREADS) and records how long calls waited for a
free thread and how many ran at once, so the size is chosen from numbers (the operator logs
them at exit and bench/ prints them).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

EXEC_THREADS = 2048
"""The pool of the runner's execs (launches, results, and `result` execs that wait for a
phase's end, `trial_machine.RESULT_WAIT_SEC`): an exec holds its thread for as long as it runs
(a minute for a wait; minutes for a launch on a node with 250 pods starting), so they run apart
from the short calls, and a thousand trials in execs never hold up one that creates a pod (in
one pool of 64, 1,000 concurrent trials waited up to 83 s for a thread, p95 37 s). Threads
start only when needed; an idle one costs little memory (bench/concurrent_trials.py)."""


class MeasuredExecutor(ThreadPoolExecutor):
    def __init__(self, max_workers: int, prefix: str = "kube") -> None:
        super().__init__(max_workers=max_workers, thread_name_prefix=prefix)
        self.size, self.prefix = max_workers, prefix
        self._lock = threading.Lock()
        self.busy = self.peak_busy = self.calls = 0
        self.waits: list[float] = []  # seconds each call waited for a thread (last 100,000)

    def submit(self, fn, /, *args: Any, **kwargs: Any) -> Future:
        queued = time.monotonic()

        def timed() -> Any:
            with self._lock:
                self.calls += 1
                self.busy += 1
                self.peak_busy = max(self.peak_busy, self.busy)
                self.waits.append(time.monotonic() - queued)
                if len(self.waits) > 100_000:
                    del self.waits[:50_000]
            try:
                return fn(*args, **kwargs)
            finally:
                with self._lock:
                    self.busy -= 1

        return super().submit(timed)

    def queued(self) -> int:
        """Calls waiting for a thread."""
        return self._work_queue.qsize()

    def summary(self) -> str:
        with self._lock:
            waits = sorted(self.waits)
        if not waits:
            return f"{self.prefix} thread pool: {self.size} threads, no calls"

        def pct(p: float) -> float:
            return waits[min(len(waits) - 1, round(p / 100 * (len(waits) - 1)))] * 1000

        return (f"{self.prefix} thread pool: {self.size} threads, {self.calls} calls, peak "
                f"{self.peak_busy} busy; waited for a thread p50 {pct(50):.1f} ms, "
                f"p95 {pct(95):.1f} ms, max {waits[-1] * 1000:.1f} ms")


execs = MeasuredExecutor(EXEC_THREADS, "exec")
