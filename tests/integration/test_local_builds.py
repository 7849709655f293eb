"""The local cluster's registry and buildkitd (hack/localcluster/imagebuilds.py): the registry
answers and holds the labelled stand-ins, buildkitd builds through its mirrors, and the kubelet
pulls what was pushed over plain HTTP from 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from tests.conftest import buildkit_client

REGISTRY = "127.0.0.1:5055"
CACHE = Path(os.environ.get("SHIPYARD_CACHE", Path.home() / ".cache" / "shipyard"))
BUILDCTL = CACHE / "buildkit-v0.34.2" / "buildctl"
ACCEPT = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json"


@pytest.fixture(autouse=True)
def local_only(cluster) -> None:
    if not cluster.local:
        pytest.skip("the registry and buildkitd of hack/localcluster only")


def get_json(path: str, accept: str = ACCEPT) -> dict:
    request = urllib.request.Request(f"http://{REGISTRY}{path}", headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())


def image_labels(repo: str, tag: str) -> dict[str, str]:
    manifest = get_json(f"/v2/{repo}/manifests/{tag}")
    if "manifests" in manifest:  # an index: the linux/amd64 image
        digest = manifest["manifests"][0]["digest"]
        manifest = get_json(f"/v2/{repo}/manifests/{digest}")
    blob = get_json(f"/v2/{repo}/blobs/{manifest['config']['digest']}", "*/*")
    return blob.get("config", {}).get("Labels") or {}


@pytest.mark.parametrize("image", ["library/debian:bookworm", "library/ubuntu:24.04",
                                   "library/python:3.12-slim", "library/python:3.11-slim"])
def test_stand_ins_are_seeded_and_labelled(image):
    repo, tag = image.split(":")
    labels = image_labels(repo, tag)
    assert "stand-in" in labels.get("dev.shipyard.stand-in", ""), labels


def test_buildkitd_builds_through_the_mirror_and_the_kubelet_pulls_it(tmp_path, core_v1,
                                                                       namespace):
    nonce = uuid.uuid4().hex
    (tmp_path / "Dockerfile").write_text(
        "FROM python:3.12-slim\n"
        f"RUN python -c 'print(\"{nonce}\")' > /nonce && pip --version\n"
        'CMD ["cat", "/nonce"]\n')
    ref = f"{REGISTRY}/shipyard-tests/it:{nonce[:12]}"
    subprocess.run([str(BUILDCTL), *buildkit_client(), "build",
                    "--frontend", "dockerfile.v0", "--local", f"context={tmp_path}",
                    "--local", f"dockerfile={tmp_path}",
                    "--output", f"type=image,name={ref},push=true"],
                   check=True, capture_output=True, timeout=300)
    core_v1.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name="pulled"),
        spec=client.V1PodSpec(restart_policy="Never", containers=[
            client.V1Container(name="main", image=ref, image_pull_policy="Always")])))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pod = core_v1.read_namespaced_pod("pulled", namespace)
        if pod.status.phase in ("Succeeded", "Failed"):
            break
        time.sleep(0.5)
    assert pod.status.phase == "Succeeded", pod.status
    assert core_v1.read_namespaced_pod_log("pulled", namespace).strip() == nonce
