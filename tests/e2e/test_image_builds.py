"""Task images built in the cluster: BuildKit + the registry, once per content hash (issue 12).

On the local cluster the registry (127.0.0.1:5055) and buildkitd are started by
`localcluster.py up`, with Debian stand-ins for the common base images (see
hack/localcluster/imagebuilds.py). Each test puts a fresh nonce into its build contexts, so its
images are new to the registry (a real build, not a cache hit) unless it says otherwise.
"""

from __future__ import annotations

import time
import urllib.request
import uuid
from typing import Any

import pytest

from tests.e2e.conftest import GROUP, LOCAL_REGISTRY, VERSION, condition

pytestmark = pytest.mark.usefixtures("local_builds")

DOCKERFILE = """\
ARG BASE=debian:bookworm
FROM ${BASE} AS tools
RUN echo built-in-stage-one > /stage1.txt
FROM ${BASE}
ARG GREETING=hello
WORKDIR /app
COPY --from=tools /stage1.txt /opt/stage1.txt
COPY data/seed.txt /opt/seed.txt
COPY nonce.txt /opt/nonce.txt
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends jq >/dev/null \\
    && rm -rf /var/lib/apt/lists/*
RUN echo "$GREETING" > /opt/greeting.txt
"""
TEST_SH = """#!/bin/bash
jq --version && grep -q built-in-stage-one /opt/stage1.txt && grep -q hello /opt/greeting.txt \\
  && [ "$(pwd)" = /app ] && [ "$(cat /app/answer.txt)" = "$(cat /opt/seed.txt)" ] \\
  && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
"""


@pytest.fixture(scope="module")
def local_builds(cluster) -> None:
    if not cluster.local:
        pytest.skip("needs the local cluster's registry and buildkitd (or SHIPYARD_BUILD_* "
                    "pointing at yours): not wired for other clusters yet")


def dockerfile_task(nonce: str, toml_extra: str = "", dockerfile: str = DOCKERFILE,
                    ) -> dict[str, str]:
    return {
        "task.toml": 'schema_version = "1.4"\n[agent]\ntimeout_sec = 60\n[verifier]\n'
                     f'timeout_sec = 60\n[environment]\nbuild_timeout_sec = 300\n{toml_extra}',
        "instruction.md": "Copy /opt/seed.txt to /app/answer.txt.\n",
        "environment/Dockerfile": dockerfile,
        "environment/data/seed.txt": "the seed\n",
        "environment/nonce.txt": nonce + "\n",
        "solution/solve.sh": "#!/bin/bash\ncp /opt/seed.txt /app/answer.txt\n",
        "tests/test.sh": TEST_SH,
    }


def wait_images(shipyard, task: str, timeout: float = 240) -> dict[str, Any]:
    """The Task once ImagesReady is decided (True, or False with a final reason)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = shipyard.get("tasks", task)
        cond = condition_any(body, "ImagesReady")
        if cond and (cond["status"] == "True" or cond["reason"] not in
                     ("Building", "Pending", "RegistryUnavailable")):
            return body
        time.sleep(0.5)
    raise AssertionError(f"task {task}: images not decided after {timeout}s: {body['status']}")


def condition_any(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if c["type"] == type_), None)


def build_jobs(batch_v1, namespace: str) -> list[Any]:
    return batch_v1.list_namespaced_job(
        namespace, label_selector="shipyard.dev/image-build").items


@pytest.fixture
def batch_v1(api_client):
    from kubernetes import client

    return client.BatchV1Api(api_client)


def test_dockerfile_only_task_builds_once_and_scores(shipyard, batch_v1, namespace):
    nonce = uuid.uuid4().hex
    shipyard.task("built", dockerfile_task(nonce))
    shipyard.trial("built-oracle", "built")
    shipyard.trial("built-nop", "built", {"name": "nop"})
    oracle = shipyard.wait("built-oracle", timeout=300)
    nop = shipyard.wait("built-nop", timeout=120)
    assert oracle["status"]["reward"] == 1.0, oracle["status"]
    assert nop["status"]["reward"] == 0.0, nop["status"]
    task = shipyard.get("tasks", "built")
    image = task["status"]["images"]["environment"]
    assert image["source"] == "built"
    assert image["ref"].startswith(f"{LOCAL_REGISTRY}/shipyard-tests/built:")
    assert image["ref"].endswith(":" + image["contextHash"])
    assert image["digest"].startswith("sha256:")
    assert condition(task, "ImagesReady")["status"] == "True"
    assert len(build_jobs(batch_v1, namespace)) == 1
    events = [e.reason for e in shipyard.events("built-oracle")]
    assert "WaitingForImage" in events, events
    pods = shipyard.core.list_namespaced_pod(namespace).items
    assert not pods or all(p.spec.containers[0].image == image["ref"] for p in pods
                           if p.metadata.labels.get("app.kubernetes.io/component")
                           == "environment")


def manifest_status(ref: str) -> int:
    host, _, rest = ref.partition("/")
    repo, _, tag = rest.rpartition(":")
    request = urllib.request.Request(
        f"http://{host}/v2/{repo}/manifests/{tag}", method="HEAD",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json, "
                           "application/vnd.oci.image.index.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


_ = (GROUP, VERSION)
