"""docker-compose environments: what Shipyard can run of them (pure).

Harbor runs `environment/docker-compose.yaml` with Docker Compose. Shipyard runs a task in one
pod; until the compose translation supports a file, the task is refused at validation (the
Task's Ready condition, `shipyard task lint` and `push`), never run without its services.
"""

from __future__ import annotations

import re

from shipyard.taskformat.errors import TaskFormatError
from shipyard.taskformat.loader import LoadedTask

COMPOSE_FILE = "docker-compose.yaml"
_CONTEXTS = re.compile(r"^(?:environment/|tests/|steps/[^/]+/tests/)docker-compose\.yaml$")


def compose_files(task: LoadedTask) -> list[str]:
    """The task's docker-compose.yaml files, in an environment or verifier context."""
    return sorted(path for path in task.files if _CONTEXTS.match(path))


def compose_refusals(task: LoadedTask) -> list[TaskFormatError]:
    """Why this operator cannot run the task's compose environments (empty: it can)."""
    return [
        TaskFormatError(
            "docker-compose environments are not supported by this operator: the task would "
            "run without its services",
            file=path,
        )
        for path in compose_files(task)
    ]
