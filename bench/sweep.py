#!/usr/bin/env python3
"""Run one Sweep of N trivial Trials and print what it costs.

    python bench/sweep.py [-n 1000] [--tasks 20] [--parallelism 16]

Uses the cluster of KUBECONFIG when SHIPYARD_USE_EXISTING_CLUSTER=1, else the local cluster.
Starts its own operator (serving only the bench namespace) from this checkout, creates
`--tasks` busybox tasks and one Sweep over them with oracle and nop, `n / (2 x tasks)` attempts,
and prints: wall time, Trials/s, the most Trials running at once (from a watch), the
operator's peak RSS, the API requests per Trial the Sweep made (Trial creates, Trial and Task
lists, status writes; the Trials' own requests are counted apart) and the status size.

And where the time goes: each Trial's latency (created → finished, seen by a watch) split at its
environment pod's creation and first readiness; how full the Sweep kept its `parallelism` while
slots were left to create; the refill delay (the k-th Trial to finish → the (parallelism+k)-th
Trial created: the controller's own share); and the operator's CPU time.

The default parallelism, 16, is about what the 2-core development node keeps busy: its Trials
are node-bound (pod start and teardown, execs), so more Trials at once only queue there and
lengthen each one (docs/sweeps.md, Cost).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client

from shipyard.api.conventions import FINISHED_PHASES
from shipyard.api.models import GROUP, VERSION

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from concurrent_trials import (  # noqa: E402
    bench_namespace,
    drop_finalizers,
    follow_until,
    peak_rss_mib,
    percentile,
    start_operator,
)


def task_body(name: str, image: str) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Task",
        "metadata": {"name": name, "labels": {"dataset": "bench"}},
        "spec": {"source": {"inline": {"files": {
            "task.toml": f'[agent]\ntimeout_sec = 60.0\n[environment]\ndocker_image = "{image}"\n',
            "instruction.md": "Write ok to /tmp/out.\n",
            "solution/solve.sh": "#!/bin/sh\necho ok > /tmp/out\n",
            "tests/test.sh": "#!/bin/sh\ngrep -q ok /tmp/out && echo 1 > /logs/verifier/reward.txt"
                             " || echo 0 > /logs/verifier/reward.txt\n",
        }}}},
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def occupancy(changes: list[tuple[float, int]], start: float, end: float) -> float:
    """Time-weighted mean of a count from its (time, new value) changes over [start, end]."""
    if end <= start:
        return float("nan")
    total, value, at = 0.0, 0, start
    for t, count in sorted(changes):
        if t > end:
            break
        if t > at:
            total += value * (t - at)
            at = t
        value = count
    return (total + value * (end - at)) / (end - start)


def refill_delays(created: list[float], finished: list[float], parallelism: int) -> list[float]:
    """The k-th Trial to finish frees the slot of the (parallelism + k)-th to be created: the
    time between the two is what the controller adds to the pipeline."""
    created, finished = sorted(created), sorted(finished)
    return [created[parallelism + k] - finished[k]
            for k in range(min(len(finished), len(created) - parallelism))]


def raw_pods(core: client.CoreV1Api) -> Callable[..., Any]:
    """`list_namespaced_pod` answering dicts, lists and watch events alike (the watch leaves
    an object as a dict when the function names no return type): deserializing thousands of
    pod events into models would cost the bench more CPU than the operator spends."""

    def list_pods(namespace: str, **kwargs: Any) -> Any:
        if kwargs.get("watch"):
            return core.list_namespaced_pod(namespace, **kwargs)
        return json.loads(core.list_namespaced_pod(namespace, _preload_content=False,
                                                   **kwargs).data)

    return list_pods


class Timeline:
    """When the bench's watches first saw each Trial, its finish, its pod and the pod Ready."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.phases: dict[str, str] = {}
        self.created: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        self.active: list[tuple[float, int]] = []  # (time, non-terminal Trials then)
        self.most = 0
        self.count = 0  # non-terminal Trials now
        self.pod_created: dict[str, float] = {}  # Trial name → its first pod seen
        self.pod_ready: dict[str, float] = {}

    def trial(self, obj: dict) -> tuple[str, bool] | None:
        """Every Trial event; (name, ok) once final."""
        now = time.monotonic()
        name, status = obj["metadata"]["name"], obj.get("status") or {}
        with self.lock:
            self.created.setdefault(name, now)
            before = self.phases.get(name)
            self.phases[name] = status.get("phase") or "Pending"
            was = before is not None and before not in FINISHED_PHASES
            now_active = self.phases[name] not in FINISHED_PHASES
            if was != now_active:
                self.count += 1 if now_active else -1
                self.active.append((now, self.count))
                self.most = max(self.most, self.count)
            if self.phases[name] in FINISHED_PHASES:
                self.finished.setdefault(name, now)
                return name, self.phases[name] == "Completed"
        return None

    def pod(self, pod: dict) -> None:
        """Every pod event of the namespace."""
        now = time.monotonic()
        owner = next((o["name"] for o in pod["metadata"].get("ownerReferences") or []
                      if o.get("kind") == "Trial"), None)
        if owner is None:
            return
        with self.lock:
            self.pod_created.setdefault(owner, now)
            if any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in (pod.get("status") or {}).get("conditions") or []):
                self.pod_ready.setdefault(owner, now)

    def report(self, began: float, parallelism: int, planned: int) -> list[str]:
        with self.lock:
            done = [n for n in self.finished if n in self.created]
            if not done:
                return []
            latency = [self.finished[n] - self.created[n] for n in done]
            split = [n for n in done if n in self.pod_created and n in self.pod_ready]
            last_created = max(self.created.values())
            refill = refill_delays(list(self.created.values()), list(self.finished.values()),
                                   parallelism)
            active = list(self.active)

        def mean(values: list[float]) -> float:
            return sum(values) / len(values) if values else float("nan")

        lines = [f"trial latency:           p50 {percentile(latency, 50):.1f} s, "
                 f"p95 {percentile(latency, 95):.1f} s, mean {mean(latency):.1f} s "
                 "(created → finished, as watched)"]
        if split:
            to_pod = mean([self.pod_created[n] - self.created[n] for n in split])
            to_ready = mean([self.pod_ready[n] - self.pod_created[n] for n in split])
            to_end = mean([self.finished[n] - self.pod_ready[n] for n in split])
            lines.append(f"  of which (means):      created → pod {to_pod:.1f} s, pod → Ready "
                         f"{to_ready:.1f} s, Ready → finished {to_end:.1f} s "
                         f"({len(split)} trials)")
        if planned > parallelism:
            lines.append(f"parallelism kept full:   {occupancy(active, began, last_created):.1f} "
                         f"non-terminal Trials on average while slots were left to create "
                         f"(parallelism {parallelism})")
        if refill:
            lines.append(f"refill delay:            p50 {percentile(refill, 50) * 1000:.0f} ms, "
                         f"p95 {percentile(refill, 95) * 1000:.0f} ms (a Trial finished → the "
                         "next one created)")
        return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=1000, help="trials (default 1000)")
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--parallelism", type=int, default=16)
    parser.add_argument("--image", default="localhost/shipyard/busybox:latest")
    parser.add_argument("--timeout", type=float, default=3600,
                        help="seconds; then (or on SIGUSR1) report what finished so far")
    args = parser.parse_args()
    attempts = max(1, args.n // (2 * args.tasks))
    planned = attempts * 2 * args.tasks

    kubeconfig, core, custom, namespace = bench_namespace("sweep")
    operator, log = start_operator(kubeconfig, namespace)
    timeline = Timeline()
    finished: dict[str, tuple[float, bool]] = {}
    began = time.monotonic()

    sweep: dict = {}
    try:
        time.sleep(3)
        for i in range(args.tasks):
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "tasks",
                                                   task_body(f"triv-{i:03d}", args.image))
        follow_until(custom.list_namespaced_custom_object, (GROUP, VERSION, namespace, "trials"),
                     planned, args.timeout, timeline.trial, finished)
        follow_until(raw_pods(core), (namespace,), planned + 1, args.timeout, timeline.pod, {})
        time.sleep(1)
        cpu_before = cpu_seconds(operator.pid)
        began = time.monotonic()
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "sweeps", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Sweep", "metadata": {"name": "bench"},
            "spec": {"tasks": {"selector": {"matchLabels": {"dataset": "bench"}}},
                     "agents": [{"name": "oracle"}, {"name": "nop"}], "attempts": attempts,
                     "parallelism": args.parallelism}})
        stop = threading.Event()  # `kill -USR1`: stop waiting, report what finished so far
        signal.signal(signal.SIGUSR1, lambda *_: stop.set())
        while time.monotonic() - began < args.timeout and not stop.is_set():
            sweep = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "sweeps",
                                                        "bench")
            if any(c["type"] == "Complete" and c["status"] == "True"
                   for c in (sweep.get("status") or {}).get("conditions") or []):
                break
            stop.wait(2)
        wall = time.monotonic() - began
        rss = peak_rss_mib(operator.pid)
        cpu = cpu_seconds(operator.pid) - cpu_before
        settle = time.monotonic() + 5  # the bench's own watch may be a moment behind
        while len(finished) < planned and time.monotonic() < settle:
            time.sleep(0.2)
    finally:
        operator.send_signal(signal.SIGTERM)
        try:
            operator.wait(30)
        except subprocess.TimeoutExpired:
            operator.kill()
        drop_finalizers(custom, namespace)  # the operator is gone
        core.delete_namespace(namespace)
    status = sweep.get("status") or {}
    text = log.read_text(errors="replace")
    total = re.search(r"shipyard api requests: (\d+)", text)
    swept = re.search(r"shipyard sweep api requests: (\d+) (\{.*\})", text)
    counts = status.get("counts") or {}
    print(f"trials planned:          {planned} ({args.tasks} tasks x 2 agents x {attempts})")
    print(f"finished / errors:       {counts.get('completed')} / {counts.get('errored')}, "
          f"mean {status.get('mean')}")
    created = max(1, len(timeline.created))  # all of the plan, unless stopped early
    if len(finished) < planned:  # --timeout: the rate of what finished, said so
        print(f"INCOMPLETE at --timeout: {len(finished)} of {planned} trials finished")
    print(f"wall time:               {wall:.1f} s ({len(finished) / wall:.2f} trials/s)")
    print(f"most running at once:    {timeline.most} (parallelism {args.parallelism})")
    for line in timeline.report(began, args.parallelism, planned):
        print(line)
    print(f"operator CPU:            {cpu:.0f} s ({100 * cpu / wall:.0f} % of one core)")
    print(f"operator peak RSS:       {rss:.0f} MiB")
    if swept:
        n = int(swept.group(1))
        kinds = ", ".join(f"{k} {v}" for k, v in json.loads(swept.group(2)).items())
        print(f"sweep API requests:      {n / created:.2f} per trial created ({n} in all: "
              f"{kinds})")
    if total:
        n = int(total.group(1))
        print(f"all operator requests:   {n / created:.1f} per trial created ({n} in all)")
    print(f"status size:             {len(json.dumps(status))} bytes")
    return 0 if counts.get("completed") == planned else 1


if __name__ == "__main__":
    sys.exit(main())
