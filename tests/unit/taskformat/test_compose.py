"""The compose refusals of a loaded task (issue 25)."""

from __future__ import annotations

from shipyard.taskformat import load_task_files
from shipyard.taskformat.compose import compose_files, compose_refusals

BASE = {
    "task.toml": 'schema_version = "1.4"\n[environment]\ndocker_image = "x"\n',
    "instruction.md": "Do it.\n",
    "tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
}


def _task(**extra: str):
    files = {k: v.encode() for k, v in {**BASE, **extra}.items()}
    return load_task_files(files, name="t")


def test_a_task_without_compose_has_no_refusal():
    assert compose_refusals(_task()) == []


def test_compose_with_a_dockerfile_is_refused_naming_the_file():
    task = _task(**{"environment/Dockerfile": "FROM x\n",
                    "environment/docker-compose.yaml": "services: {main: {build: .}}\n"})
    assert compose_files(task) == ["environment/docker-compose.yaml"]
    [refusal] = compose_refusals(task)
    assert refusal.file == "environment/docker-compose.yaml"
    assert "without its services" in str(refusal)
