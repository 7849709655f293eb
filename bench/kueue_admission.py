#!/usr/bin/env python3
"""Admission overhead of Kueue per trial: N trivial oracle trials without the queue label, then
N with it (a ClusterQueue whose quota never limits them), each arm in a namespace of its own
with an operator from this checkout; prints wall time and the per-trial latency (Trial created →
reward seen) for both, and their difference.

    python bench/kueue_admission.py [-n 30] [--image localhost/shipyard/debian:bookworm]

Uses the local cluster (`hack/localcluster/localcluster.py up`, which runs Kueue) or the
cluster of KUBECONFIG when SHIPYARD_USE_EXISTING_CLUSTER=1 (Kueue installed there).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from concurrent_trials import (  # noqa: E402
    GROUP,
    VERSION,
    bench_namespace,
    follow_until,
    percentile,
    settle,
    start_operator,
    task_files,
    wait_ready,
)

KUEUE = ("kueue.x-k8s.io", "v1beta2")


def queues(custom, namespace: str) -> list[tuple[str, str]]:
    """A flavor and a ClusterQueue with room for every trial, and the LocalQueue `bench`."""
    flavor, cq = f"{namespace}-flavor", f"{namespace}-cq"
    custom.create_cluster_custom_object(*KUEUE, "resourceflavors", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": flavor}})
    quota = [{"name": r, "nominalQuota": q} for r, q in
             (("cpu", "1000"), ("memory", "10Ti"), ("ephemeral-storage", "10Ti"))]
    custom.create_cluster_custom_object(*KUEUE, "clusterqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
        "metadata": {"name": cq},
        "spec": {"namespaceSelector": {"matchLabels": {
            "kubernetes.io/metadata.name": namespace}},
            "resourceGroups": [{"coveredResources": [q["name"] for q in quota],
                                "flavors": [{"name": flavor, "resources": quota}]}]}})
    custom.create_namespaced_custom_object(*KUEUE, namespace, "localqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
        "metadata": {"name": "bench"}, "spec": {"clusterQueue": cq}})
    return [("clusterqueues", cq), ("resourceflavors", flavor)]


def run(arm: str, n: int, image: str) -> dict[str, float]:
    kubeconfig, core, custom, namespace = bench_namespace(f"kueue-{arm}")
    made: list[tuple[str, str]] = []
    operator, log = start_operator(kubeconfig, namespace)
    try:
        if arm == "label":
            made = queues(custom, namespace)
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "tasks", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": {"name": "t"},
            "spec": {"source": {"inline": {"files": task_files(image)}}}})
        wait_ready(custom, namespace, "t")
        labels = {"kueue.x-k8s.io/queue-name": "bench"} if arm == "label" else {}
        created: dict[str, float] = {}
        done: dict[str, tuple[float, bool]] = {}

        def done_of(obj):
            status = obj.get("status") or {}
            if status.get("phase") in ("Completed", "Failed"):
                return obj["metadata"]["name"], status.get("reward") == 1.0
            return None

        finished = follow_until(custom.list_namespaced_custom_object,
                                (GROUP, VERSION, namespace, "trials"), n, 600, done_of, done)
        for i in range(n):
            name = f"t-{i}"
            created[name] = time.monotonic()
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "trials", {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "Trial",
                "metadata": {"name": name, "labels": labels},
                "spec": {"taskRef": {"name": "t"}, "agent": {"name": "oracle"}}})
        finished.wait(600)
        latencies = [done[k][0] - created[k] for k in done]
        return {"n": n, "rewarded": sum(ok for _, ok in done.values()),
                "wall": max(d for d, _ in done.values()) - min(created.values()),
                "p50": percentile(latencies, 50), "p95": percentile(latencies, 95),
                "mean": statistics.mean(latencies)}
    finally:
        operator.terminate()
        try:
            operator.wait(15)
        except subprocess.TimeoutExpired:
            operator.kill()
        core.delete_namespace(namespace)
        for plural, name in made:
            custom.delete_cluster_custom_object(*KUEUE, plural, name)
        print(f"  ({arm}: operator log {log})", file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=30)
    parser.add_argument("--image", default="localhost/shipyard/debian:bookworm")
    args = parser.parse_args()
    results = {}
    for arm in ("nolabel", "label"):
        results[arm] = run(arm, args.n, args.image)
        settle(__import__("kubernetes").client.CoreV1Api())
    print(f"{'arm':<8} {'n':>3} {'rewarded':>8} {'wall s':>7} {'p50 s':>6} {'p95 s':>6} "
          f"{'mean s':>7}")
    for arm, r in results.items():
        print(f"{arm:<8} {r['n']:>3} {r['rewarded']:>8} {r['wall']:>7.1f} {r['p50']:>6.1f} "
              f"{r['p95']:>6.1f} {r['mean']:>7.1f}")
    a, b = results["nolabel"], results["label"]
    print(f"admission overhead per trial: p50 {b['p50'] - a['p50']:+.1f} s, "
          f"mean {b['mean'] - a['mean']:+.1f} s; wall {b['wall'] - a['wall']:+.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
