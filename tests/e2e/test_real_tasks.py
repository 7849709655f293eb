"""What real public tasks met on the local cluster (issue 23), each reproduced by a small task
of the project's own: a failed build that explains itself, ..."""

from __future__ import annotations

import uuid

import pytest

from tests.e2e.conftest import condition
from tests.e2e.test_cli import ok, shipyard_cli
from tests.e2e.test_image_builds import condition_any, simple_task, wait_images

FETCHING_STEP = """\
FROM python:3.12-slim
RUN echo {nonce} && python -c "\\
print('fetching the model weights'); \\
import urllib.request; \\
urllib.request.urlopen('https://weights.invalid/model.bin', timeout=5)"
RUN echo never-here
"""


@pytest.fixture(scope="module")
def local_builds(cluster) -> None:
    if not cluster.local:
        pytest.skip("needs the local cluster's registry and buildkitd")


@pytest.mark.usefixtures("local_builds")
def test_a_failed_run_step_shows_its_own_output_and_where_the_whole_log_is(
        shipyard, cluster, namespace):
    nonce = uuid.uuid4().hex
    shipyard.task("fetch", simple_task(nonce, dockerfile=FETCHING_STEP.format(nonce=nonce)))
    shipyard.trial("fetch-oracle", "fetch")
    task = wait_images(shipyard, "fetch", timeout=240)
    cond = condition_any(task, "ImagesReady")
    assert cond["status"] == "False" and cond["reason"] == "ImageBuildFailed", cond
    message = cond["message"]
    # The step's own words (the traceback's last line), not only buildkit's Dockerfile excerpt.
    assert "its last output lines:" in message, message
    assert "urllib.error.URLError" in message, message
    assert "fetching the model weights" in message, message
    job = task["status"]["images"]["environment"]["build"]
    assert f"kubectl logs -n {namespace} job/{job}" in message, message
    events = [e.message for e in shipyard.events("fetch") if e.reason == "ImageBuildFailed"]
    assert any("urllib.error.URLError" in m for m in events), events
    trial = shipyard.wait("fetch-oracle", timeout=120)
    failed = condition(trial, "Failed")
    assert failed["reason"] == "ImageBuildFailed" and "urllib.error.URLError" in failed["message"]
    watched = shipyard_cli(cluster, "watch", "fetch-oracle", "-n", namespace, "--timeout", "30")
    assert "urllib.error.URLError" in watched.stdout + watched.stderr, watched
    # The whole log, from its first line (the nonce the step echoed first).
    log = ok(shipyard_cli(cluster, "logs", "--build", job, "-n", namespace))
    assert nonce in log and "ERROR" in log
