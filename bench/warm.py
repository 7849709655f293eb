#!/usr/bin/env python3
"""Warm pods (docs/warm-pods.md) against the floor, in one run on the same cluster.

    python bench/warm.py [-n 40] [--parallelism 4] [--runs 20] [--arms floor,cold,warm,apply]
                         [--image debian:bookworm]

- floor: N bare pods doing the trivial task's work, at most P at once (a pod is created as
  soon as one ends): what the cluster itself costs;
- cold: a Sweep of N trivial oracle trials at parallelism P, warm pods off
  (SHIPYARD_SWEEP_WARM_PODS=0), timed from the Sweep's creation to its last trial's end;
- warm: the same Sweep with warm pods (the pods it warms are created after the Sweep: they
  count); `warmK` with K warm pods per slot (SHIPYARD_SWEEP_WARM_AHEAD=K), else the
  operator's default; a `-init` suffix (`cold-init`, `warm-init`): the runner copied into each
  pod by an init container (SHIPYARD_RUNNER_FILES=none) instead of mounted from ConfigMaps;
- apply: `kubectl apply` of one Trial → its reward, p50 over `--runs`, with a WarmPool of one
  pod (each run waits for the pool to be ready again), and without (the cold figure beside it).

`--perf FILE` also records the node with `perf` and prints, per arm, its CPU by program
inside the arm's measured time (`bench/perfcomm.py`).

Each arm has a namespace and an operator of its own and starts on a quiet node
(`concurrent_trials.settle`). Prints one line per arm and the ratios to the floor, and under
each where the node's CPU went per pod or trial (`cpuacct`). Arms run
in the order given and may repeat (`floor,cold,warm,floor,warm,cold`: a later floor is
printed beside the first) to see the noise of a shared node; at the end each Sweep arm's runs
are also given against the floors measured around each (the one before and the one after).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import threading
import time
from pathlib import Path

from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from concurrent_trials import (  # noqa: E402
    FLOOR_WORK,
    GROUP,
    VERSION,
    apply_crds,
    drop_finalizers,
    ensure_cluster,
    follow_until,
    make_namespace,
    namespace_name,
    settle,
    start_operator,
    task_files,
    wait_ready,
)
from cpuacct import format_spent, snapshot, spent  # noqa: E402
from perfcomm import print_windows, recording  # noqa: E402

IMAGE = "debian:bookworm"
"""The trivial task's image and the floor's (`--image`): a registry's (the local cluster's
stand-in, through the nodes' mirrors), whose ENTRYPOINT the operator reads, so its pods start
behind the fence in their main container; an image only the node has, e.g.
localhost/shipyard/debian:bookworm, gets the fence init container instead
(docs/network-and-accelerators.md)."""


Window = tuple[float, float]
"""An arm's measured time, as `time.monotonic()` values (`--perf` reports inside it)."""


def floor(core: client.CoreV1Api, n: int, parallelism: int, timeout: float
          ) -> tuple[float, dict[str, float], Window]:
    """Seconds for N bare pods, P at once; the CPU they took (`cpuacct`); the window."""
    namespace = namespace_name("wfl")
    make_namespace(core, namespace)
    done: dict[str, tuple[float, bool]] = {}
    slots = threading.Semaphore(parallelism)
    freed: set[str] = set()

    def done_of(pod) -> tuple[str, bool] | None:
        if pod.status and pod.status.phase in ("Succeeded", "Failed"):
            if pod.metadata.name not in freed:
                freed.add(pod.metadata.name)
                slots.release()
            return pod.metadata.name, pod.status.phase == "Succeeded"
        return None

    try:
        finished = follow_until(core.list_namespaced_pod, (namespace,), n, timeout, done_of, done)
        time.sleep(0.5)
        began, cpu = time.monotonic(), snapshot()
        for i in range(n):
            slots.acquire()
            core.create_namespaced_pod(namespace, {
                "metadata": {"name": f"p{i:04d}"},
                "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                         "enableServiceLinks": False, "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "main", "image": IMAGE,
                                         "imagePullPolicy": "IfNotPresent",
                                         "command": ["/bin/sh", "-c", FLOOR_WORK]}]}})
        finished.wait(timeout)
        ended = max(t for t, _ in done.values())
        return ended - began, spent(cpu, snapshot()), (began, ended)
    finally:
        core.delete_namespace(namespace)


class Operated:
    """A namespace with this checkout's operator (environment `env`) and the trivial Task."""

    def __init__(self, kubeconfig: str, core, custom, kind: str, env: dict[str, str]) -> None:
        self.core, self.custom = core, custom
        apply_crds(kubeconfig)  # another checkout's may have been applied since (shared cluster)
        self.namespace = namespace_name(kind)
        make_namespace(core, self.namespace)
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            self.operator, self.log = start_operator(kubeconfig, self.namespace)
        finally:
            for k, v in saved.items():
                os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
        time.sleep(3)
        self.create("tasks", "trivial", {"source": {"inline": {"files": task_files(IMAGE)}}})
        wait_ready(custom, self.namespace, "trivial")

    def create(self, plural: str, name: str, spec: dict) -> None:
        kind = {"tasks": "Task", "trials": "Trial", "sweeps": "Sweep", "warmpools": "WarmPool"}
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": kind[plural],
            "metadata": {"name": name}, "spec": spec})

    def claims(self) -> int:
        """Trials that claimed a warm pod (their WarmPodClaimed Events: status.warmPod may be
        dropped by another checkout's CRD on a shared cluster)."""
        return sum(1 for e in self.core.list_namespaced_event(self.namespace).items
                   if e.reason == "WarmPodClaimed")

    def close(self) -> None:
        self.operator.send_signal(signal.SIGTERM)
        self.operator.wait(30)
        drop_finalizers(self.custom, self.namespace, ("sweeps", "trials", "tasks", "warmpools"))
        self.core.delete_namespace(self.namespace)


def sweep(kubeconfig: str, core, custom, n: int, parallelism: int, warm: bool,
          timeout: float, ahead: int | None = None, init: bool = False
          ) -> tuple[float, int, int, dict[str, float], Window]:
    """Seconds from the Sweep's creation to its last trial's end; trials rewarded 1; trials
    that ran in a warm pod; the CPU they took (`cpuacct`); the window. `ahead`: warm pods per slot
    (SHIPYARD_SWEEP_WARM_AHEAD; None: the operator's default); `init`: the runner copied by
    an init container (SHIPYARD_RUNNER_FILES=none) rather than mounted from ConfigMaps."""
    env = {"SHIPYARD_SWEEP_WARM_PODS": "100" if warm else "0"}
    if init:
        env["SHIPYARD_RUNNER_FILES"] = "none"
    if warm and ahead is not None:
        env["SHIPYARD_SWEEP_WARM_AHEAD"] = str(ahead)
    run = Operated(kubeconfig, core, custom, "wsw" if warm else "csw", env)
    done: dict[str, tuple[float, bool]] = {}

    def done_of(trial: dict) -> tuple[str, bool] | None:
        status = trial.get("status") or {}
        if status.get("phase") in ("Completed", "Failed"):
            return trial["metadata"]["name"], status.get("reward") == 1
        return None

    try:
        finished = follow_until(custom.list_namespaced_custom_object,
                                (GROUP, VERSION, run.namespace, "trials"), n, timeout,
                                done_of, done)
        time.sleep(0.5)
        began, cpu = time.monotonic(), snapshot(run.operator.pid)
        run.create("sweeps", "bench", {"tasks": {"names": ["trivial"]},
                                       "agents": [{"name": "oracle"}], "attempts": n,
                                       "parallelism": parallelism})
        finished.wait(timeout)
        wall = max((t for t, _ in done.values()), default=time.monotonic()) - began
        cpu = spent(cpu, snapshot(run.operator.pid))
        return (wall, sum(1 for _, ok in done.values() if ok), run.claims(), cpu,
                (began, began + wall))
    finally:
        run.close()


def apply_to_reward(kubeconfig: str, core, custom, runs: int, warm: bool,
                    timeout: float) -> tuple[list[float], int]:
    """Seconds from a Trial's creation to its reward, `runs` times one after the other; how
    many ran in a warm pod."""
    run = Operated(kubeconfig, core, custom, "wap" if warm else "cap", {})
    times: list[float] = []
    try:
        if warm:
            run.create("warmpools", "pool", {"taskRef": {"name": "trivial"}, "replicas": 1})
        for i in range(runs):
            deadline = time.monotonic() + timeout
            while warm and (custom.get_namespaced_custom_object(
                    GROUP, VERSION, run.namespace, "warmpools", "pool").get("status")
                    or {}).get("ready", 0) < 1:
                assert time.monotonic() < deadline, "the pool never got ready"
                time.sleep(0.1)
            time.sleep(0.5)  # the pod's start is over
            began = time.monotonic()
            run.create("trials", f"t{i:03d}", {"taskRef": {"name": "trivial"},
                                                "agent": {"name": "oracle"}})
            while True:
                status = custom.get_namespaced_custom_object(
                    GROUP, VERSION, run.namespace, "trials", f"t{i:03d}").get("status") or {}
                if status.get("reward") is not None or status.get("phase") == "Failed":
                    times.append(time.monotonic() - began)
                    break
                assert time.monotonic() < deadline, f"trial t{i:03d}: {status}"
                time.sleep(0.05)
        return times, run.claims()
    finally:
        run.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=40)
    parser.add_argument("--parallelism", type=int, default=4)
    parser.add_argument("--runs", type=int, default=20, help="apply → reward runs")
    parser.add_argument("--arms", default="floor,cold,warm,apply")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--image", default=IMAGE, help="the task's image and the floor's")
    parser.add_argument("--perf", metavar="FILE", type=Path,
                        help="record the node with `perf` into FILE and print each arm's CPU "
                             "by program inside its measured time (bench/perfcomm.py)")
    args = parser.parse_args()
    globals()["IMAGE"] = args.image
    arms = {a.strip() for a in args.arms.split(",")}
    kubeconfig = ensure_cluster()
    apply_crds(kubeconfig)
    config.load_kube_config(kubeconfig)
    core, custom = client.CoreV1Api(), client.CustomObjectsApi()
    out: dict[str, float] = {}
    windows: list[tuple[str, Window]] = []
    with recording(args.perf):
        run_arms(args, arms, kubeconfig, core, custom, out, windows)
    print_windows(args.perf, windows, args.n)
    return 0


def bracketed_ratios(runs: list[tuple[str, float]]) -> dict[str, list[float]]:
    """Each Sweep arm's wall time over the floor measured around it (the mean of the floor
    run just before and the one just after, whichever there are), by arm name in the order
    run: on a node whose speed drifts between runs this is the fairer pairing than the first
    floor alone."""
    ratios: dict[str, list[float]] = {}
    for i, (name, wall) in enumerate(runs):
        if name == "floor":
            continue
        before = next((w for n, w in reversed(runs[:i]) if n == "floor"), None)
        after = next((w for n, w in runs[i + 1:] if n == "floor"), None)
        around = [w for w in (before, after) if w is not None]
        if around:
            ratios.setdefault(name, []).append(wall / statistics.mean(around))
    return ratios


def run_arms(args: argparse.Namespace, arms: set[str], kubeconfig: str, core, custom,
             out: dict[str, float], windows: list[tuple[str, Window]]) -> None:
    runs: list[tuple[str, float]] = []  # (arm, wall) in the order run
    print(f"N = {args.n}, parallelism {args.parallelism}, {os.cpu_count()} cores, "
          f"image {args.image}", flush=True)
    if "floor" in arms:
        settle(core)
        out["floor"], cpu, window = floor(core, args.n, args.parallelism, args.timeout)
        windows.append(("floor", window))
        runs.append(("floor", out["floor"]))
        print(f"floor (bare pods, {args.parallelism} at once): {out['floor']:.1f} s "
              f"(load {os.getloadavg()[0]:.1f})\n  {format_spent(cpu, args.n)}", flush=True)
    floors = 0
    for name in args.arms.split(","):  # in the order given (repeat arms to see the noise)
        name = name.strip()
        floors += name == "floor"
        if name == "floor" and floors > 1:
            settle(core)
            again, cpu, window = floor(core, args.n, args.parallelism, args.timeout)
            windows.append(("floor again", window))
            runs.append(("floor", again))
            print(f"floor again: {again:.1f} s\n  {format_spent(cpu, args.n)}")
        base, init = name.removesuffix("-init"), name.endswith("-init")
        if base != "cold" and not base.startswith("warm"):
            continue
        settle(core)
        ahead = int(base[4:]) if base[4:].isdigit() else None  # warmK: K pods per slot
        wall, ok, warmed, cpu, window = sweep(kubeconfig, core, custom, args.n,
                                              args.parallelism, base != "cold", args.timeout,
                                              ahead, init)
        windows.append((name, window))
        runs.append((name, wall))
        ratio = f", {wall / out['floor']:.2f}x the floor" if "floor" in out else ""
        what = "off" if base == "cold" else "on" + (f", {ahead} per slot" if ahead else "")
        what += ", runner by init container" if init else ""
        print(f"sweep, warm pods {what}: {wall:.1f} s{ratio} "
              f"({ok}/{args.n} rewarded 1, {warmed} in a warm pod; load "
              f"{os.getloadavg()[0]:.1f})\n  {format_spent(cpu, args.n)}", flush=True)
    for name, ratios in bracketed_ratios(runs).items():
        print(f"{name}: {', '.join(f'{r:.2f}x' for r in ratios)} the floors around each run "
              f"(median {statistics.median(ratios):.2f}x)", flush=True)
    if "apply" in arms:
        for warm in (True, False):
            settle(core)
            times, warmed = apply_to_reward(kubeconfig, core, custom, args.runs, warm,
                                            args.timeout)
            print(f"apply → reward, {'warm pool' if warm else 'cold'}: p50 "
                  f"{statistics.median(times):.2f} s, min {min(times):.2f}, max "
                  f"{max(times):.2f} over {len(times)} runs ({warmed} in a warm pod)")


if __name__ == "__main__":
    sys.exit(main())
