#!/usr/bin/env python3
"""Image build times on the local cluster (issue 12): BuildKit + the local registry.

    python bench/image_build.py [--runs 3]

Prints, for a trivial Dockerfile (`FROM debian:bookworm` + one RUN, a fresh nonce each run):
- cold build: buildctl against the cluster's buildkitd, content never built before (base image
  already in buildkitd's cache), pushed to the registry with a registry cache export;
- warm rebuild: the same context after its image was deleted from the registry and buildkitd's
  local cache pruned, so only the registry cache serves it;
- apply-to-reward: a Task with only environment/Dockerfile + an oracle Trial applied together,
  through this checkout's operator (registry HEAD, build Job, pull, trial), until the reward;
- cached Task: a second Task with the same context in a new namespace (the registry has the tag:
  no build) from apply to ImagesReady.
Needs the local cluster (`localcluster.py up`); the machine is shared, so figures vary.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hack" / "localcluster"))
from imagebuilds import REGISTRY, buildctl, tcp_client_args  # noqa: E402
from layout import Layout  # noqa: E402
from operator_defaults import DEFAULTS  # noqa: E402

GROUP, VERSION = "shipyard.dev", "v1alpha1"
OPERATOR_ENV = {**DEFAULTS, "SHIPYARD_BUILD_REGISTRY": f"{REGISTRY}/shipyard-bench"}


def dockerfile(nonce: str) -> str:
    return f"FROM debian:bookworm\nRUN echo {nonce} > /nonce\n"


def build(ctx: Path, ref: str) -> float:
    cache = ref.rsplit(":", 1)[0] + ":buildcache"
    began = time.monotonic()
    subprocess.run(
        [buildctl(Layout.default()), *tcp_client_args(Layout.default()), "build",
         "--frontend", "dockerfile.v0", "--local", f"context={ctx}",
         "--local", f"dockerfile={ctx}", "--output", f"type=image,name={ref},push=true",
         "--export-cache", f"type=registry,ref={cache},mode=max",
         "--import-cache", f"type=registry,ref={cache}"],
        check=True, capture_output=True)
    return time.monotonic() - began


def delete_image(ref: str) -> None:
    repo, tag = ref.split("/", 1)[1].rsplit(":", 1)
    accept = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json"
    head = urllib.request.Request(f"http://{REGISTRY}/v2/{repo}/manifests/{tag}",
                                  method="HEAD", headers={"Accept": accept})
    with urllib.request.urlopen(head) as resp:
        digest = resp.headers["Docker-Content-Digest"]
    urllib.request.urlopen(urllib.request.Request(
        f"http://{REGISTRY}/v2/{repo}/manifests/{digest}", method="DELETE")).close()


def buildctl_figures(runs: int) -> tuple[list[float], list[float]]:
    cold, warm = [], []
    for _ in range(runs):
        nonce = uuid.uuid4().hex
        with tempfile.TemporaryDirectory() as tmp:
            ctx = Path(tmp)
            (ctx / "Dockerfile").write_text(dockerfile(nonce))
            ref = f"{REGISTRY}/shipyard-bench/trivial:{nonce[:16]}"
            cold.append(build(ctx, ref))
            delete_image(ref)
            subprocess.run([buildctl(Layout.default()), *tcp_client_args(Layout.default()),
                            "prune", "--all"], check=True, capture_output=True)
            warm.append(build(ctx, ref))
    return cold, warm


def task_body(name: str, nonce: str) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": {"name": name},
        "spec": {"source": {"inline": {"files": {
            "task.toml": '[agent]\ntimeout_sec = 60.0\n[environment]\nbuild_timeout_sec = 300\n',
            "instruction.md": "Write ok to /tmp/out.\n",
            "environment/Dockerfile": dockerfile(nonce),
            "solution/solve.sh": "#!/bin/sh\necho ok > /tmp/out\n",
            "tests/test.sh": "#!/bin/sh\ngrep -q ok /tmp/out && echo 1 > /logs/verifier/reward.txt"
                             " || echo 0 > /logs/verifier/reward.txt\n",
        }}}},
    }


def wait(fn, timeout: float = 600):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value is not None:
            return value
        time.sleep(0.1)
    raise TimeoutError("gave up")


def operator_figures(kubeconfig: str) -> tuple[float, float]:
    config.load_kube_config(config_file=kubeconfig)
    core, api = client.CoreV1Api(), client.CustomObjectsApi()
    prefix = f"bench-{uuid.uuid4().hex[:6]}"
    namespaces = [f"{prefix}-a", f"{prefix}-b"]
    for ns in namespaces:
        core.create_namespace({"metadata": {"name": ns}})
    subprocess.run([str(Layout.default().binary("kubectl")), "--kubeconfig", kubeconfig,
                    "apply", "-f", str(ROOT / "crds")], check=True, capture_output=True)
    log = open(Path(tempfile.mkdtemp()) / "operator.log", "wb")  # noqa: SIM115
    operator = subprocess.Popen(
        [sys.executable, "-m", "shipyard", "operator", "--liveness", "", "-n", f"{prefix}-*"],
        env=dict(os.environ, KUBECONFIG=kubeconfig, **OPERATOR_ENV), stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True)
    try:
        time.sleep(3)
        nonce = uuid.uuid4().hex
        began = time.monotonic()
        api.create_namespaced_custom_object(GROUP, VERSION, namespaces[0], "tasks",
                                            task_body("trivial", nonce))
        api.create_namespaced_custom_object(GROUP, VERSION, namespaces[0], "trials", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Trial", "metadata": {"name": "t"},
            "spec": {"taskRef": {"name": "trivial"}, "agent": {"name": "oracle"}}})

        def rewarded():
            status = api.get_namespaced_custom_object(GROUP, VERSION, namespaces[0], "trials",
                                                      "t").get("status") or {}
            return status.get("reward") if status.get("phase") in ("Completed",
                                                                   "Failed") else None

        reward = wait(rewarded)
        apply_to_reward = time.monotonic() - began
        assert reward == 1.0, f"reward {reward}"
        began = time.monotonic()
        api.create_namespaced_custom_object(GROUP, VERSION, namespaces[1], "tasks",
                                            task_body("trivial", nonce))

        def ready():
            task = api.get_namespaced_custom_object(GROUP, VERSION, namespaces[1], "tasks",
                                                    "trivial")
            conds = (task.get("status") or {}).get("conditions") or []
            return True if any(c["type"] == "ImagesReady" and c["status"] == "True"
                               for c in conds) else None

        wait(ready)
        cached = time.monotonic() - began
    finally:
        operator.terminate()
        operator.wait(30)
        for ns in namespaces:
            core.delete_namespace(ns)
    return apply_to_reward, cached


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    subprocess.run([sys.executable, str(ROOT / "hack/localcluster/localcluster.py"), "up"],
                   check=True, stdout=subprocess.DEVNULL)
    kubeconfig = str(Layout.default().kubeconfig)
    cold, warm = buildctl_figures(args.runs)
    apply_to_reward, cached = operator_figures(kubeconfig)
    print(f"cold trivial build (buildctl, push, cache export): median "
          f"{statistics.median(cold):.2f}s  runs {', '.join(f'{t:.2f}' for t in cold)}")
    print(f"warm rebuild (registry cache only):                median "
          f"{statistics.median(warm):.2f}s  runs {', '.join(f'{t:.2f}' for t in warm)}")
    print(f"apply unbuilt Task + oracle Trial -> reward:       {apply_to_reward:.1f}s")
    print(f"apply Task whose image exists -> ImagesReady:       {cached:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
