"""What each part of a trial pod costs the node, on bare pods without the operator: N pods, P
at once, in variants that add one part at a time to the floor's pod (`warm.py`'s), each
printed with its wall time and node CPU per pod (`cpuacct`).

    python bench/podcost.py [-n 30] [--parallelism 4] [--arms floor,spn,exec,exec-spn,...]

- floor: the floor's pod: `sh -c WORK`, ends by itself (deleted after the arm);
- spn: the same with `shareProcessNamespace`;
- delete: the floor's pod deleted as soon as it ends (a trial's pod is deleted by the operator);
- exec: `sleep infinity`, the work by one exec once it runs, then deleted (a trial's pod's
  life, without the operator); `exec2`: two execs;
- exec-spn: `exec` with `shareProcessNamespace` (a trial pod as made until round 3);
- exec-end: `exec-spn` whose exec then ends the pod's `sleep` (the pod ends by itself and, as
  the floor's, is deleted after the arm);
- attach-spn: `exec-spn` without the exec: the pod's own `sh` waits on its stdin, which one
  attach (the API's `attach`: no process started in the container) writes a line to; the
  work's output comes back over the attach, then the pod is deleted;
- volumes: `exec` with an emptyDir and a projected ConfigMap volume (as a trial pod mounts
  the runner).

Wall time is to the last pod's end; CPU until the arm's pods are torn down (`SETTLE_SEC`).
`--perf FILE` also prints each arm's CPU by program over that time (`bench/perfcomm.py`).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

from kubernetes import client, config
from kubernetes.stream import stream

sys.path.insert(0, str(Path(__file__).resolve().parent))
from concurrent_trials import (
    FLOOR_WORK,
    ensure_cluster,
    follow_until,
    make_namespace,
    namespace_name,
)
from cpuacct import format_spent, snapshot, spent
from perfcomm import print_windows, recording
from warm import IMAGE

SETTLE_SEC = 5.0
"""CPU is counted until this long after the last pod ended (deleted pods: after they are gone),
so that each arm's teardown is in it."""
ARMS = ("floor", "spn", "delete", "exec", "exec2", "exec-spn", "exec-end", "attach-spn",
        "volumes")


def pod_spec(arm: str) -> dict:
    execs = arm.startswith("exec") or arm == "volumes"
    container: dict = {"name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                       "command": ["sleep", "infinity"] if execs
                       else ["/bin/sh", "-c", FLOOR_WORK]}
    if arm == "attach-spn":
        container.update(stdin=True, command=[
            "/bin/sh", "-c", f"read -r go; {FLOOR_WORK}; exec sleep infinity"])
    spec: dict = {"restartPolicy": "Never", "automountServiceAccountToken": False,
                  "enableServiceLinks": False, "terminationGracePeriodSeconds": 0,
                  "containers": [container]}
    if arm in ("spn", "exec-spn", "exec-end", "attach-spn"):
        spec["shareProcessNamespace"] = True
    if arm == "volumes":
        spec["volumes"] = [{"name": "work", "emptyDir": {}},
                           {"name": "cm", "projected": {"defaultMode": 0o555, "sources": [
                               {"configMap": {"name": "podcost"}}]}}]
        container["volumeMounts"] = [{"name": "work", "mountPath": "/work"},
                                     {"name": "cm", "mountPath": "/cm", "readOnly": True}]
    return spec


def attach_once(core: client.CoreV1Api, name: str, namespace: str, timeout: float) -> bool:
    """Attach to the pod's `main`, write the line its `sh` waits for, read the work's answer."""
    session = stream(core.connect_get_namespaced_pod_attach, name, namespace, container="main",
                     stdin=True, stdout=True, stderr=False, tty=False,
                     _preload_content=False)
    try:
        session.write_stdin("go\n")
        out, deadline = "", time.monotonic() + timeout
        while "1" not in out and session.is_open() and time.monotonic() < deadline:
            session.update(timeout=1)
            out += session.read_stdout() if session.peek_stdout() else ""
        return out.strip() == "1"
    finally:
        session.close()


def run_arm(core: client.CoreV1Api, arm: str, n: int, parallelism: int, timeout: float
            ) -> tuple[float, dict[str, float], tuple[float, float]]:
    """Wall time; node CPU (`cpuacct`); the window the CPU was counted in (monotonic)."""
    namespace = namespace_name("pc")
    make_namespace(core, namespace)
    if arm == "volumes":
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "podcost"},
                                                      "data": {"file": "x" * 4096}})
    execs = (2 if arm == "exec2" else
             1 if arm.startswith(("exec", "attach")) or arm == "volumes" else 0)
    deletes = (execs > 0 and arm != "exec-end") or arm == "delete"
    done: dict[str, tuple[float, bool]] = {}
    running: dict[str, threading.Event] = {f"p{i:04d}": threading.Event() for i in range(n)}
    slots = threading.Semaphore(parallelism)
    freed: set[str] = set()
    lock = threading.Lock()

    def release(name: str) -> None:
        with lock:
            if name in freed:
                return
            freed.add(name)
        if deletes:
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        slots.release()

    def done_of(pod) -> tuple[str, bool] | None:
        name = pod.metadata.name
        if execs and pod.status and pod.status.phase == "Running":
            running[name].set()
        if not execs and pod.status and pod.status.phase in ("Succeeded", "Failed"):
            threading.Thread(target=release, args=(name,)).start()
            return name, pod.status.phase == "Succeeded"
        return None

    def work(name: str) -> None:
        ok = running[name].wait(timeout)
        execing = client.CoreV1Api(client.ApiClient())  # `stream` takes its client over
        script = FLOOR_WORK + ("; kill -TERM -1" if arm == "exec-end" else "")
        if arm == "attach-spn" and ok:
            ok = attach_once(execing, name, namespace, timeout)
        for _ in range(execs if ok and arm != "attach-spn" else 0):
            out = stream(execing.connect_get_namespaced_pod_exec, name, namespace,
                         command=["/bin/sh", "-c", script], stderr=True, stdin=False,
                         stdout=True, tty=False)
            ok = ok and out.strip() == "1"
        done[name] = (time.monotonic(), ok)
        release(name)

    try:
        follow_until(core.list_namespaced_pod, (namespace,), n if not execs else n + 1,
                     timeout, done_of, done if not execs else {})
        time.sleep(0.5)
        began, cpu = time.monotonic(), snapshot()
        workers = []
        for name in running:
            slots.acquire()
            core.create_namespaced_pod(namespace, {"metadata": {"name": name},
                                                   "spec": pod_spec(arm)})
            if execs:
                workers.append(threading.Thread(target=work, args=(name,)))
                workers[-1].start()
        deadline = time.monotonic() + timeout
        while len(done) < n and time.monotonic() < deadline:
            time.sleep(0.1)
        for _ in range(parallelism):  # the last deletes are part of the arm
            slots.acquire()
        wall = max(t for t, _ in done.values()) - began
        while deletes and core.list_namespaced_pod(namespace).items:
            time.sleep(0.5)  # the deleted pods' teardown is theirs
        while arm == "exec-end" and any(
                p.status.phase not in ("Succeeded", "Failed")
                for p in core.list_namespaced_pod(namespace).items):
            time.sleep(0.5)  # the ended pods' stop is theirs
        time.sleep(SETTLE_SEC)
        return wall, spent(cpu, snapshot()), (began, time.monotonic())
    finally:
        core.delete_namespace(namespace)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=30)
    parser.add_argument("--parallelism", type=int, default=4)
    parser.add_argument("--arms", default="floor,spn,delete,exec,exec-spn,volumes")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--perf", metavar="FILE", type=Path,
                        help="record the node with `perf` into FILE and print each arm's CPU "
                             "by program inside its window (bench/perfcomm.py)")
    args = parser.parse_args()
    ensure_cluster()
    config.load_kube_config()
    core = client.CoreV1Api()
    print(f"N = {args.n}, parallelism {args.parallelism}")
    for arm in args.arms.split(","):
        if arm not in ARMS:
            parser.error(f"unknown arm {arm} (of {', '.join(ARMS)})")
    windows: list[tuple[str, tuple[float, float]]] = []
    with recording(args.perf):
        for arm in args.arms.split(","):
            time.sleep(5)  # the last arm's pods torn down
            wall, cpu, window = run_arm(core, arm, args.n, args.parallelism, args.timeout)
            windows.append((arm, window))
            print(f"{arm:9s} {wall:5.1f} s  {format_spent(cpu, args.n)}", flush=True)
    print_windows(args.perf, windows, args.n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
