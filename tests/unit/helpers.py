"""Builders shared by the operator unit tests: tasks, Trial specs and bodies, pods, results."""

from __future__ import annotations

import base64
import json
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from shipyard.api.models import TrialSpec, TrialStatus
from shipyard.plan.phases import TrialPlan, build_plan
from shipyard.reconcile.runner_output import CollectedFile, PhaseStatus
from shipyard.taskformat import LoadedTask, load_task_dir, load_task_files

REPO = Path(__file__).resolve().parents[2]
HELLO_WORLD_DIR = REPO / "examples" / "hello-world" / "task"
T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
TRIAL_UID = "6c0ffee0-0000-4000-8000-000000000001"

HELLO_TOML = """\
[agent]
timeout_sec = 120.0

[verifier]
timeout_sec = 60.0

[environment]
docker_image = "python:3.12-slim"
workdir = "/app"
"""


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def task(toml: str = HELLO_TOML, extra: dict[str, str] | None = None,
         drop: tuple[str, ...] = ()) -> LoadedTask:
    """A valid single-step task (no environment/ dir: the image is prebuilt)."""
    files = {
        "task.toml": textwrap.dedent(toml),
        "instruction.md": "Write hello to /app/hello.txt\n",
        "solution/solve.sh": "#!/bin/bash\necho hello > /app/hello.txt\n",
        "tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
    }
    files.update(extra or {})
    for name in drop:
        files.pop(name)
    return load_task_files({k: v.encode() for k, v in files.items()}, name="hello")


def hello_world() -> LoadedTask:
    return load_task_dir(HELLO_WORLD_DIR)


def trial_spec(**spec: Any) -> TrialSpec:
    return TrialSpec.model_validate({"taskRef": {"name": "hello"}, **spec})


def plan_for(loaded: LoadedTask | None = None, environ: dict[str, str] | None = None,
             **spec: Any) -> TrialPlan:
    return build_plan(loaded or task(), trial_spec(**spec), environ or {})


def trial_body(name: str = "hello-oracle", task_name: str = "hello", **spec: Any
               ) -> dict[str, Any]:
    return {
        "apiVersion": "shipyard.dev/v1alpha1",
        "kind": "Trial",
        "metadata": {"name": name, "namespace": "ns", "uid": TRIAL_UID},
        "spec": {"taskRef": {"name": task_name}, **spec},
    }


# ---------------------------------------------------------------- pods


def pod(*, ready: bool = False, phase: str = "Running", created: datetime = T0,
        deleting: bool = False, conditions: list[dict[str, Any]] | None = None,
        container_state: dict[str, Any] | None = None,
        status: dict[str, Any] | None = None, probed: bool = False) -> dict[str, Any]:
    """A pod object as the API returns it (only the fields the operator reads). `probed`: with
    an older operator's exec readiness probe (Ready while no phase runs)."""
    meta: dict[str, Any] = {"name": "hello-oracle-env", "namespace": "ns",
                            "creationTimestamp": iso(created)}
    if deleting:
        meta["deletionTimestamp"] = iso(created + timedelta(seconds=1))
    conds = [{"type": "PodScheduled", "status": "True"},
             {"type": "Ready", "status": "True" if ready else "False"}]
    if conditions is not None:
        conds = conditions
    body: dict[str, Any] = {"phase": phase, "conditions": conds}
    if container_state is not None:
        body["containerStatuses"] = [{"name": "main", "image": "python:3.12-slim",
                                      "state": container_state}]
    if status is not None:
        body = status
    main: dict[str, Any] = {"name": "main"}
    if probed:
        main["readinessProbe"] = {"exec": {"command": ["/bin/sh", "/shipyard/bin/runner",
                                                       "ready"]}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [main]},
            "status": body}


def waiting(reason: str, message: str | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {"reason": reason}
    if message is not None:
        state["message"] = message
    return {"waiting": state}


def unschedulable_pod(created: datetime = T0) -> dict[str, Any]:
    return pod(phase="Pending", created=created, conditions=[{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/1 nodes are available: 1 Insufficient cpu.",
    }])


# ---------------------------------------------------------------- runner results


def running(started: datetime = T0) -> PhaseStatus:
    return PhaseStatus(state="running", started=iso(started))


def done(rc: int = 0, *, timed_out: bool = False, output: str = "",
         files: dict[str, bytes] | None = None, started: datetime = T0,
         finished: datetime | None = None) -> PhaseStatus:
    collected = {"output": CollectedFile(len(output.encode()), output.encode())}
    for path, content in (files or {}).items():
        collected[path] = CollectedFile(len(content), content)
    return PhaseStatus(state="done", exit_code=rc, timed_out=timed_out, started=iso(started),
                       finished=iso(finished or started + timedelta(seconds=1)),
                       files=collected)


def runner_text(status_line: str, files: dict[str, bytes] | None = None,
                wrap: int = 76) -> str:
    """What `runner result` prints: the status line, then `== NAME SIZE` + wrapped base64."""
    lines = [status_line]
    for name, content in (files or {}).items():
        lines.append(f"== {name} {len(content)}")
        encoded = base64.b64encode(content).decode()
        lines += [encoded[i:i + wrap] for i in range(0, len(encoded), wrap)]
    return "\n".join(lines) + "\n"


def read_back(status: TrialStatus) -> TrialStatus:
    """The status as a restarted operator reads it back from the API (a JSON round trip)."""
    return TrialStatus.model_validate(
        json.loads(json.dumps(status.model_dump(by_alias=True, mode="json"))))
