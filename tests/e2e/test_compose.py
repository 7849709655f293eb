"""docker-compose tasks end to end (issue 25): what one pod cannot honour is refused at the
Task's Ready condition, by `shipyard task lint` and by `push`, and a trial of it fails at once
(never run without its services)."""

from __future__ import annotations

import time

from tests.e2e.conftest import condition, task_files
from tests.e2e.test_cli import shipyard_cli

PRIVILEGED_COMPOSE = """\
services:
  main:
    build: .
  db:
    image: localhost/shipyard/debian:bookworm
    privileged: true
"""


def _compose_task(compose: str) -> dict[str, str]:
    files = task_files("echo 1 > /logs/verifier/reward.txt\n", "true\n")
    files["environment/Dockerfile"] = "FROM localhost/shipyard/debian:bookworm\n"
    files["environment/docker-compose.yaml"] = compose
    return files


def test_refused_compose_task_is_not_ready_and_its_trial_fails_at_once(shipyard):
    shipyard.task("refused", _compose_task(PRIVILEGED_COMPOSE))
    ready = condition(shipyard.wait_task("refused"), "Ready")
    assert ready["status"] == "False" and ready["reason"] == "TaskInvalid", ready
    assert "environment/docker-compose.yaml" in ready["message"], ready
    began = time.monotonic()
    shipyard.trial("refused-oracle", "refused")
    trial = shipyard.wait("refused-oracle", timeout=30)
    assert time.monotonic() - began < 15
    failed = condition(trial, "Failed")
    assert failed["reason"] == "TaskInvalid", failed
    assert "environment/docker-compose.yaml" in failed["message"]
    assert not trial["status"].get("phases"), "a refused compose task must never run"


def test_lint_and_push_refuse_a_compose_task(cluster, shipyard, tmp_path):
    directory = tmp_path / "composed"
    for path, text in _compose_task(PRIVILEGED_COMPOSE).items():
        (directory / path).parent.mkdir(parents=True, exist_ok=True)
        (directory / path).write_text(text)
    lint = shipyard_cli(cluster, "task", "lint", str(directory))
    assert lint.returncode == 1 and "Traceback" not in lint.stderr, lint
    assert f"error: {directory}/environment/docker-compose.yaml: " in lint.stderr, lint.stderr
    assert "ok" not in lint.stdout
    push = shipyard_cli(cluster, "task", "push", str(directory), "-n", shipyard.namespace)
    assert push.returncode != 0 and "Traceback" not in push.stderr, push
    assert "environment/docker-compose.yaml" in push.stderr, push.stderr
    assert shipyard.api.list_namespaced_custom_object(
        "shipyard.dev", "v1alpha1", shipyard.namespace, "tasks")["items"] == []
