"""What a trial pod's *spec* costs the node, without the operator's work per trial: N pods, P at
once, each made from the spec of a real trial pod (this checkout's operator runs one trivial
Trial with `keepPods` and the spec is read back), exec'd into once with the floor's work and
deleted, against a bare `sleep infinity` pod with `shareProcessNamespace` treated the same
(podcost.py's `exec-spn`). Each printed with its wall time and node CPU per pod (`cpuacct`).

    python bench/podspec.py [-n 60] [--parallelism 10] [--arms bare,trial,trial-novol,...]

- bare: podcost.py's `exec-spn` pod, in the same namespace (no labels: no policy selects it);
- trial: the trial pod's spec and labels (the namespace's baseline policies select it);
- a `trial-…` arm drops parts of it, any of: `novol` (the runner's volume and the fence: `main`
  runs the image's `sleep infinity`), `nofence` (the volume kept, the fence not run), `nosec`
  (the pod's and the containers' securityContext),
  `noseccomp` (the pod's: its seccomp profile), `nocaps` (the containers': user, capabilities,
  no privilege escalation), `nolabels` (no labels: no policy selects the pod);
- `-keep` (`bare-keep`, `trial-…-keep`): the pods are left running after their exec and deleted
  after the wall time (as the floor's pods are), their teardown still in the arm's CPU.

Wall time is to the last exec's end; CPU until the arm's pods are gone.
"""

from __future__ import annotations

import argparse
import copy
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.stream import stream

sys.path.insert(0, str(Path(__file__).resolve().parent))
from concurrent_trials import FLOOR_WORK, GROUP, VERSION, ensure_cluster
from cpuacct import format_spent, snapshot, spent
from warm import IMAGE, Operated

BARE: dict[str, Any] = {
    "shareProcessNamespace": True, "restartPolicy": "Never",
    "automountServiceAccountToken": False, "enableServiceLinks": False,
    "terminationGracePeriodSeconds": 0,
    "containers": [{"name": "main", "image": IMAGE, "command": ["sleep", "infinity"]}]}


def trial_pod(core, custom, namespace: str) -> dict[str, Any]:
    """The environment pod of one trivial oracle Trial, kept, read back and deleted."""
    op_spec = {"taskRef": {"name": "trivial"}, "agent": {"name": "oracle"}, "keepPods": True}
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "trials", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Trial", "metadata": {"name": "spec"},
        "spec": op_spec})
    while (custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "trials", "spec")
           .get("status", {}).get("reward")) is None:
        time.sleep(0.2)
    pod = client.ApiClient().sanitize_for_serialization(
        core.read_namespaced_pod("spec-env", namespace))
    core.delete_namespaced_pod("spec-env", namespace, grace_period_seconds=0)
    pod["spec"].pop("nodeName", None)
    return pod


def variant(arm: str, trial: dict[str, Any], name: str) -> dict[str, Any]:
    if arm.split("-")[0] == "bare":
        return {"metadata": {"name": name}, "spec": copy.deepcopy(BARE)}
    spec = copy.deepcopy(trial["spec"])
    main = spec["containers"][0]
    meta: dict[str, Any] = {"name": name, "labels": dict(trial["metadata"]["labels"])}
    meta["labels"]["shipyard.dev/trial"] = name
    parts = set(arm.split("-")[1:])
    if "novol" in parts:
        spec["volumes"] = [v for v in spec.get("volumes", []) if v["name"] != "runner"]
        main["volumeMounts"] = [v for v in main.get("volumeMounts", []) if v["name"] != "runner"]
    if parts & {"novol", "nofence"}:
        main.pop("command", None)
        main["args"] = ["sleep", "infinity"]
    if parts & {"nosec", "noseccomp"}:
        spec.pop("securityContext", None)
    if parts & {"nosec", "nocaps"}:
        for container in spec["containers"]:
            container.pop("securityContext", None)
    if "nolabels" in parts:
        meta.pop("labels")
    return {"metadata": meta, "spec": spec}


def run_arm(core, namespace: str, arm: str, trial: dict[str, Any], n: int, parallelism: int
            ) -> tuple[float, dict[str, float]]:
    slots = threading.Semaphore(parallelism)
    ends: list[float] = []
    wrong: list[str] = []  # pods whose exec did not print the floor's "1"

    def one(name: str) -> None:
        api = client.CoreV1Api(client.ApiClient())  # `stream` takes its client over
        try:
            api.create_namespaced_pod(namespace, variant(arm, trial, name))
            while api.read_namespaced_pod(name, namespace).status.phase != "Running":
                time.sleep(0.1)
            out = stream(api.connect_get_namespaced_pod_exec, name, namespace,
                         container="main", command=["/bin/sh", "-c", FLOOR_WORK], stderr=True,
                         stdin=False, stdout=True, tty=False)
            ends.append(time.monotonic())
            if out.strip() != "1":
                wrong.append(name)
            if "keep" not in arm.split("-"):
                client.CoreV1Api(client.ApiClient()).delete_namespaced_pod(
                    name, namespace, grace_period_seconds=0)
        finally:
            slots.release()

    began, before = time.monotonic(), snapshot()
    workers = []
    for i in range(n):
        slots.acquire()
        workers.append(threading.Thread(target=one, args=(f"{arm}-{i}",)))
        workers[-1].start()
    for worker in workers:
        worker.join()
    wall = max(ends) - began
    for pod in core.list_namespaced_pod(namespace).items:  # `keep`: after the wall time
        core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
    while core.list_namespaced_pod(namespace).items:
        time.sleep(0.5)  # the deleted pods' teardown is theirs
    time.sleep(3)
    if wrong or len(ends) < n:
        print(f"  {arm}: {n - len(ends)} execs failed, {len(wrong)} gave another answer",
              flush=True)
    return wall, spent(before, snapshot())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=60)
    parser.add_argument("--parallelism", type=int, default=10)
    parser.add_argument("--arms", default="bare,trial,bare,trial")
    args = parser.parse_args()
    kubeconfig = ensure_cluster()
    config.load_kube_config(kubeconfig)
    core, custom = client.CoreV1Api(), client.CustomObjectsApi()
    operated = Operated(kubeconfig, core, custom, "spec", {})
    try:
        trial = trial_pod(core, custom, operated.namespace)
        print(f"N = {args.n}, parallelism {args.parallelism}, image {IMAGE}", flush=True)
        for arm in args.arms.split(","):
            time.sleep(8)  # the last arm's teardown
            wall, cpu = run_arm(core, operated.namespace, arm, trial, args.n, args.parallelism)
            print(f"{arm:22s} {wall:5.1f} s  {format_spent(cpu, args.n)}", flush=True)
    finally:
        operated.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
