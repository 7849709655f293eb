"""examples/compose, hello-world, multi-step and separate-verifier: each task.yaml is generated
from its task/ directory (hack/examples.py), and the Trial manifests plan as documented."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

from shipyard.api.models import TrialSpec
from shipyard.plan.phases import build_plan
from shipyard.taskformat import load_task_dir

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
NAMES = ["compose", "hello-world", "multi-step", "separate-verifier"]


def _generator():
    spec = importlib.util.spec_from_file_location("examples_gen", ROOT / "hack" / "examples.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generator_covers_these_examples():
    assert _generator().GENERATED == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_task_yaml_is_generated_from_the_task_directory(name: str) -> None:
    root = EXAMPLES / name
    assert (root / "task.yaml").read_text() == _generator().render(name), (
        f"examples/{name}/task.yaml is stale: run `.venv/bin/python hack/examples.py`")
    task = yaml.safe_load((root / "task.yaml").read_text())
    on_disk = {str(p.relative_to(root / "task")): p.read_text()
               for p in (root / "task").rglob("*") if p.is_file()}
    assert task["spec"]["source"]["inline"]["files"] == on_disk
    assert task["metadata"]["name"] == name


@pytest.mark.parametrize("name", NAMES)
def test_trial_manifests(name: str) -> None:
    root = EXAMPLES / name
    for agent in ("oracle", "nop"):
        trial = yaml.safe_load((root / f"trial-{agent}.yaml").read_text())
        assert trial["metadata"]["name"] == f"{name}-{agent}"
        assert trial["spec"]["taskRef"]["name"] == name
        assert trial["spec"]["agent"]["name"] == agent
        TrialSpec.model_validate(trial["spec"])


def _plan(name: str):
    trial = yaml.safe_load((EXAMPLES / name / "trial-oracle.yaml").read_text())
    return build_plan(load_task_dir(EXAMPLES / name / "task"),
                      TrialSpec.model_validate(trial["spec"]), {})


def test_multi_step_plans_two_steps_with_a_gate():
    task = load_task_dir(EXAMPLES / "multi-step" / "task")
    assert task.step_names() == ["scaffold", "greet-all"]
    assert task.config.steps[0].min_reward == 1.0
    assert task.workdir_files("greet-all") == {"names.txt": b"Ada\nGrace\nLinus\n"}
    assert set(task.test_files("scaffold")) == {"helpers.sh", "test.sh"}
    steps = [p.step for p in _plan("multi-step").phases if p.name == "agent"]
    assert steps == ["scaffold", "greet-all"]


def test_separate_verifier_plans_a_verifier_pod():
    task = load_task_dir(EXAMPLES / "separate-verifier" / "task")
    environment = task.verifier_environment()
    assert environment is not None and not environment.bundled_tests
    names = [p.name for p in _plan("separate-verifier").phases]
    assert "verifier-environment" in names
