#!/usr/bin/env python3
"""Apply-to-reward of a two-service docker-compose task against the same task as one
container, on the local cluster (issue 25).

    python bench/compose.py [--runs 3]

The two-service task is examples/compose (main + the `notes` HTTP sidecar built from a `build:`
context, healthcheck, `depends_on: service_healthy`); the one-container task has the same image,
instruction shape and verifier, with the note kept in a file instead of the sidecar. The
sidecar's image is built once before timing (warm: a Task of the same context finds it in the
registry). Each run applies a Task and an oracle Trial in a fresh namespace and waits for the
reward. Prints the median and each run. The machine is shared, so figures vary.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hack" / "localcluster"))
from imagebuilds import BUILDKIT_ADDR, IMAGE_BUILDCTL, REGISTRY, client_tls_dir  # noqa: E402
from layout import Layout  # noqa: E402

GROUP, VERSION = "shipyard.dev", "v1alpha1"
EXAMPLE = ROOT / "examples" / "compose" / "task"
OPERATOR_ENV = {
    "SHIPYARD_BUILD_BACKEND": "buildkit",
    "SHIPYARD_BUILD_REGISTRY": f"{REGISTRY}/shipyard-bench",
    "SHIPYARD_BUILD_REGISTRY_INSECURE": "1",
    "SHIPYARD_BUILDKIT_ADDR": BUILDKIT_ADDR,
    "SHIPYARD_BUILDKIT_TLS_DIR": str(client_tls_dir(Layout.default())),
    "SHIPYARD_BUILDER_IMAGE": IMAGE_BUILDCTL,
    "SHIPYARD_BUILD_HOST_NETWORK": "1",
}


def compose_files() -> dict[str, str]:
    return {str(p.relative_to(EXAMPLE)): p.read_text() for p in EXAMPLE.rglob("*")
            if p.is_file()}


def one_container_files() -> dict[str, str]:
    files = {k: v for k, v in compose_files().items() if not k.startswith("environment/")}
    files["instruction.md"] = "Write `hello from main` to /app/notes/greeting.\n"
    files["solution/solve.sh"] = ("#!/bin/bash\nmkdir -p /app/notes\n"
                                  "printf 'hello from main' > /app/notes/greeting\n")
    files["tests/test.sh"] = ('#!/bin/bash\nif [ "$(cat /app/notes/greeting)" = '
                              '"hello from main" ]; then echo 1; else echo 0; fi '
                              "> /logs/verifier/reward.txt\n")
    return files


def apply_to_reward(api, core, prefix: str, files: dict[str, str]) -> float:
    ns = f"{prefix}-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    try:
        began = time.monotonic()
        api.create_namespaced_custom_object(GROUP, VERSION, ns, "tasks", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": {"name": "t"},
            "spec": {"source": {"inline": {"files": files}}}})
        api.create_namespaced_custom_object(GROUP, VERSION, ns, "trials", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Trial", "metadata": {"name": "t"},
            "spec": {"taskRef": {"name": "t"}, "agent": {"name": "oracle"}}})
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            status = api.get_namespaced_custom_object(GROUP, VERSION, ns, "trials",
                                                      "t").get("status") or {}
            if status.get("phase") in ("Completed", "Failed"):
                assert status.get("reward") == 1.0, status
                return time.monotonic() - began
            time.sleep(0.1)
        raise TimeoutError(f"trial in {ns} did not finish")
    finally:
        core.delete_namespace(ns)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    subprocess.run([sys.executable, str(ROOT / "hack/localcluster/localcluster.py"), "up"],
                   check=True, stdout=subprocess.DEVNULL)
    kubeconfig = str(Layout.default().kubeconfig)
    config.load_kube_config(config_file=kubeconfig)
    core, api = client.CoreV1Api(), client.CustomObjectsApi()
    prefix = f"bench-compose-{uuid.uuid4().hex[:4]}"
    subprocess.run([str(Layout.default().binary("kubectl")), "--kubeconfig", kubeconfig,
                    "apply", "-f", str(ROOT / "crds")], check=True, capture_output=True)
    log = open(Path(tempfile.mkdtemp()) / "operator.log", "wb")  # noqa: SIM115
    operator = subprocess.Popen(
        [sys.executable, "-m", "shipyard", "operator", "--liveness", "", "-n", f"{prefix}-*"],
        env=dict(os.environ, KUBECONFIG=kubeconfig, SHIPYARD_LEADER_LEASE_NAME=prefix,
                 **OPERATOR_ENV),
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        time.sleep(3)
        first = apply_to_reward(api, core, prefix, compose_files())  # builds the sidecar
        figures: dict[str, list[float]] = {"two services (compose)": [], "one container": []}
        for _ in range(args.runs):
            figures["one container"].append(apply_to_reward(api, core, prefix,
                                                             one_container_files()))
            figures["two services (compose)"].append(apply_to_reward(api, core, prefix,
                                                                     compose_files()))
    finally:
        operator.terminate()
        operator.wait(30)
    print(f"first compose run (sidecar image built): {first:.1f}s")
    for name, runs in figures.items():
        print(f"{name:24s} apply -> reward: median {statistics.median(runs):.1f}s  "
              f"runs {', '.join(f'{t:.1f}' for t in runs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
