#!/usr/bin/env python3
"""Run one Sweep of N trivial Trials and print what it costs.

    python bench/sweep.py [-n 1000] [--tasks 20] [--parallelism 20]

Uses the cluster of KUBECONFIG when SHIPYARD_USE_EXISTING_CLUSTER=1, else the local cluster.
Starts its own operator (serving only the bench namespace) from this checkout, creates
`--tasks` busybox tasks and one Sweep over them with oracle and nop, `n / (2 x tasks)` attempts,
and prints: wall time, Trials/s, the most Trials running at once (from a watch), the
operator's peak RSS, the API requests per Trial the Sweep made (Trial creates, Trial and Task
lists, status writes; the Trials' own requests are counted apart) and the status size.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from shipyard.api.conventions import FINISHED_PHASES
from shipyard.api.models import GROUP, VERSION

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from concurrent_trials import (  # noqa: E402
    bench_namespace,
    follow_until,
    peak_rss_mib,
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=1000, help="trials (default 1000)")
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--parallelism", type=int, default=20)
    parser.add_argument("--image", default="localhost/shipyard/busybox:latest")
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args()
    attempts = max(1, args.n // (2 * args.tasks))
    planned = attempts * 2 * args.tasks

    kubeconfig, core, custom, namespace = bench_namespace("sweep")
    operator, log = start_operator(kubeconfig, namespace)
    phases: dict[str, str] = {}
    most = [0]
    finished: dict[str, tuple[float, bool]] = {}

    def seen(obj: dict) -> tuple[str, bool] | None:
        """Every Trial event: the most non-terminal Trials at once; (name, ok) when final."""
        name, status = obj["metadata"]["name"], obj.get("status") or {}
        phases[name] = status.get("phase") or "Pending"
        most[0] = max(most[0], sum(1 for p in phases.values() if p not in FINISHED_PHASES))
        if phases[name] in FINISHED_PHASES:
            return name, phases[name] == "Completed"
        return None

    sweep: dict = {}
    try:
        time.sleep(3)
        for i in range(args.tasks):
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "tasks",
                                                   task_body(f"triv-{i:03d}", args.image))
        follow_until(custom.list_namespaced_custom_object, (GROUP, VERSION, namespace, "trials"),
                     planned, args.timeout, seen, finished)
        time.sleep(1)
        began = time.monotonic()
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "sweeps", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Sweep", "metadata": {"name": "bench"},
            "spec": {"tasks": {"selector": {"matchLabels": {"dataset": "bench"}}},
                     "agents": [{"name": "oracle"}, {"name": "nop"}], "attempts": attempts,
                     "parallelism": args.parallelism}})
        while time.monotonic() - began < args.timeout:
            sweep = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "sweeps",
                                                        "bench")
            if any(c["type"] == "Complete" and c["status"] == "True"
                   for c in (sweep.get("status") or {}).get("conditions") or []):
                break
            time.sleep(2)
        wall = time.monotonic() - began
        rss = peak_rss_mib(operator.pid)
    finally:
        operator.send_signal(signal.SIGTERM)
        try:
            operator.wait(30)
        except subprocess.TimeoutExpired:
            operator.kill()
        for plural in ("sweeps", "trials", "tasks"):  # the operator is gone: no finalizers
            for obj in custom.list_namespaced_custom_object(GROUP, VERSION, namespace,
                                                            plural)["items"]:
                custom.patch_namespaced_custom_object(
                    GROUP, VERSION, namespace, plural, obj["metadata"]["name"],
                    {"metadata": {"finalizers": None}})
        core.delete_namespace(namespace)
    status = sweep.get("status") or {}
    text = log.read_text(errors="replace")
    total = re.search(r"shipyard api requests: (\d+)", text)
    swept = re.search(r"shipyard sweep api requests: (\d+) (\{.*\})", text)
    counts = status.get("counts") or {}
    print(f"trials planned:          {planned} ({args.tasks} tasks x 2 agents x {attempts})")
    print(f"finished / errors:       {counts.get('completed')} / {counts.get('errored')}, "
          f"mean {status.get('mean')}")
    print(f"wall time:               {wall:.1f} s ({planned / wall:.2f} trials/s)")
    print(f"most running at once:    {most[0]} (parallelism {args.parallelism})")
    print(f"operator peak RSS:       {rss:.0f} MiB")
    if swept:
        n = int(swept.group(1))
        kinds = ", ".join(f"{k} {v}" for k, v in json.loads(swept.group(2)).items())
        print(f"sweep API requests:      {n / planned:.2f} per trial ({n} in all: {kinds})")
    if total:
        n = int(total.group(1))
        print(f"all operator requests:   {n / planned:.1f} per trial ({n} in all)")
    print(f"status size:             {len(json.dumps(status))} bytes")
    return 0 if counts.get("completed") == planned else 1


if __name__ == "__main__":
    sys.exit(main())
