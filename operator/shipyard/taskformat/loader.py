"""Loading a whole task, from a directory or from a map of files (Harbor `Task.__init__`)."""

from __future__ import annotations

import hashlib
import os
import posixpath
from collections.abc import Mapping, Set
from dataclasses import dataclass
from pathlib import Path

from shipyard.taskformat.compose import ENVIRONMENT_COMPOSE, main_offline
from shipyard.taskformat.environment import TaskOS
from shipyard.taskformat.errors import TaskFormatError
from shipyard.taskformat.harborignore import apply_harborignore
from shipyard.taskformat.instructions import decode_text, strip_canary
from shipyard.taskformat.models import TaskConfig, load_task_config
from shipyard.taskformat.resolve import VerifierEnvironment, resolve_verifier_environment
from shipyard.taskformat.scripts import discover_script, script_name
from shipyard.taskformat.sources import read_task_dir, validate_file_map

CONFIG_FILE = "task.toml"
INSTRUCTION_FILE = "instruction.md"


def _read_text(files: Mapping[str, bytes], path: str) -> str:
    try:
        return decode_text(files[path])
    except UnicodeDecodeError:
        raise TaskFormatError("file is not valid UTF-8 text", file=path) from None


def _tree(files: Mapping[str, bytes], prefix: str) -> dict[str, bytes]:
    return {
        path[len(prefix) :]: content for path, content in files.items() if path.startswith(prefix)
    }


@dataclass(frozen=True)
class LoadedTask:
    """A validated task: its configuration and every file Harbor would use, in memory."""

    name: str
    """``[task].name``, else the directory name (or the name given with a file map)."""
    config: TaskConfig
    files: dict[str, bytes]
    """Relative POSIX path -> content, with ``.harborignore`` applied."""
    digest: str
    """``sha256:<hex>`` over the sorted files (see `files_digest`)."""
    instruction: str
    """The canary-stripped instruction of a single-step task; "" for a multi-step task."""

    @property
    def is_multi_step(self) -> bool:
        return self.config.is_multi_step

    @property
    def short_name(self) -> str:
        """The name without its ``org/`` part: Harbor's environment name."""
        return self.name.split("/")[-1]

    def step_names(self) -> list[str]:
        return [step.name for step in self.config.steps or []]

    def step_instruction(self, step: str) -> str:
        self.config.step(step)
        return strip_canary(_read_text(self.files, f"steps/{step}/{INSTRUCTION_FILE}"))

    def tree(self, prefix: str) -> dict[str, bytes]:
        """The files under ``prefix`` (e.g. ``"tests/"``; ``""``: all), relative to it."""
        return _tree(self.files, prefix.rstrip("/") + "/" if prefix else "")

    def verifier_environment(self, step: str | None = None) -> VerifierEnvironment | None:
        """The separate verifier's environment, None when the verifier is shared."""
        return resolve_verifier_environment(self.config, self.files, step)

    def _verifier_os(self, step: str | None) -> TaskOS:
        environment = self.verifier_environment(step)
        return (environment.config if environment else self.config.environment).os

    def test_files(self, step: str | None = None) -> dict[str, bytes]:
        """What is uploaded to ``/tests``: ``tests/``, overlaid by ``steps/<step>/tests/``.

        When `verifier_environment` has ``bundled_tests``, Harbor uploads nothing.
        """
        files = self.tree("tests/")
        if step is not None:
            self.config.step(step)
            files.update(self.tree(f"steps/{step}/tests/"))
        return files

    def test_script(self, step: str | None = None) -> str:
        """The script run as ``/tests/<name>`` (chosen by the verifier environment's OS)."""
        return script_name("test", self._verifier_os(step))

    def _solution_dir(self, step: str | None) -> str | None:
        os = self.config.environment.os
        if step is not None:
            self.config.step(step)
            directory = f"steps/{step}/solution/"
            if self.tree(directory):
                # Harbor's oracle fails rather than fall back when this has no script.
                return directory if discover_script(directory, "solve", os, self.files) else None
        return "solution/" if discover_script("solution/", "solve", os, self.files) else None

    def solution_files(self, step: str | None = None) -> dict[str, bytes] | None:
        """What the oracle uploads to ``/solution``: the step's solution, else the task's;
        None when there is no solve script to run."""
        directory = self._solution_dir(step)
        return None if directory is None else self.tree(directory)

    def solution_script(self, step: str | None = None) -> str | None:
        """The script the oracle runs as ``/solution/<name>``, e.g. ``solve.sh``."""
        directory = self._solution_dir(step)
        if directory is None:
            return None
        script = discover_script(directory, "solve", self.config.environment.os, self.files)
        return None if script is None else posixpath.basename(script)

    def workdir_files(self, step: str) -> dict[str, bytes]:
        """``steps/<step>/workdir/``: uploaded into the working directory before the step."""
        self.config.step(step)
        return self.tree(f"steps/{step}/workdir/")


def files_digest(files: Mapping[str, bytes]) -> str:
    """A stable digest: each file contributes its path, NUL, its length and its content."""
    digest = hashlib.sha256()
    for path in sorted(files):
        content = files[path]
        digest.update(path.encode("utf-8") + b"\0" + len(content).to_bytes(8, "big") + content)
    return f"sha256:{digest.hexdigest()}"


def load_task_dir(path: str | os.PathLike[str]) -> LoadedTask:
    """Load and validate a task directory."""
    root = Path(path)
    if not root.is_dir():
        raise TaskFormatError("not a task directory", file=str(root))
    return _load(read_task_dir(root), root.resolve().name)


def load_task_files(files: Mapping[str, bytes], name: str) -> LoadedTask:
    """Load and validate a task given as relative POSIX path -> content.

    ``name`` stands in for the directory name when task.toml has no ``[task].name``.
    """
    return _load(validate_file_map(files), name)


def _load(raw: Mapping[str, bytes], fallback_name: str) -> LoadedTask:
    if CONFIG_FILE not in raw:
        raise TaskFormatError("task configuration not found", file=CONFIG_FILE)
    config = load_task_config(_read_text(raw, CONFIG_FILE), CONFIG_FILE)
    files, excluded = apply_harborignore(raw)
    config = offline_main_baseline(config, files)
    errors = _layout_errors(config, files, excluded)
    if errors:
        raise TaskFormatError.combine(errors)
    if config.is_multi_step:
        instruction = ""
        for step in config.steps or []:
            _read_text(files, f"steps/{step.name}/{INSTRUCTION_FILE}")
    else:
        instruction = strip_canary(_read_text(files, INSTRUCTION_FILE))
    return LoadedTask(
        name=config.task.name if config.task else fallback_name,
        config=config,
        files=files,
        digest=files_digest(files),
        instruction=instruction,
    )


def offline_main_baseline(config: TaskConfig, files: Mapping[str, bytes]) -> TaskConfig:
    """``network_mode: none`` on the compose service `main` keeps Harbor's agent container
    offline for the whole trial (its verifier too): in one trial pod that is the baseline
    ``no-network`` (every service shares the pod's network). An allowlist baseline beside it is
    contradictory and refused."""
    text = files.get(ENVIRONMENT_COMPOSE)
    if text is None or not main_offline(text, config.environment.env):
        return config
    environment = config.environment
    if environment.network_mode == "allowlist":
        raise TaskFormatError(
            "network_mode 'none' on main contradicts [environment].network_mode = 'allowlist': "
            "drop one of them", file=ENVIRONMENT_COMPOSE, field="services.main.network_mode")
    return config.model_copy(
        update={"environment": environment.model_copy(update={"network_mode": "no-network"})})


def _excluded_error(path: str) -> TaskFormatError:
    return TaskFormatError(f"Required task input is excluded by .harborignore: {path}", file=path)


def _layout_errors(
    config: TaskConfig, files: Mapping[str, bytes], excluded: Set[str]
) -> list[TaskFormatError]:
    """Harbor's `_validate_tests` checks plus the solution scripts .harborignore must not hide."""
    present = files.keys() | excluded
    errors = []
    solution_dirs = ["solution/"]
    if not config.is_multi_step:
        if INSTRUCTION_FILE not in files:
            errors.append(TaskFormatError("instruction file not found", file=INSTRUCTION_FILE))
        errors += _test_errors(config, files, present, excluded, None)
    for index, step in enumerate(config.steps or []):
        directory = f"steps/{step.name}/"
        field = f"steps[{index}].name"
        if not any(path.startswith(directory) for path in present):
            errors.append(
                TaskFormatError(
                    f"step directory not found: {directory}", file=directory, field=field
                )
            )
            continue
        if f"{directory}{INSTRUCTION_FILE}" not in files:
            errors.append(
                TaskFormatError(
                    "step instruction not found", file=f"{directory}{INSTRUCTION_FILE}", field=field
                )
            )
        errors += _test_errors(config, files, present, excluded, step.name)
        solution_dirs.append(f"{directory}solution/")
    for directory in solution_dirs:
        script = discover_script(directory, "solve", config.environment.os, present)
        if script in excluded:
            errors.append(_excluded_error(script))
    return errors


def _test_errors(
    config: TaskConfig,
    files: Mapping[str, bytes],
    present: Set[str],
    excluded: Set[str],
    step: str | None,
) -> list[TaskFormatError]:
    """A test script for the verifier's OS must exist, unless the verifier image bundles it."""
    environment = resolve_verifier_environment(config, files, step)
    if environment is not None and environment.bundled_tests:
        return []
    os = (environment.config if environment else config.environment).os
    directories = ["tests/"] if step is None else [f"steps/{step}/tests/", "tests/"]
    for directory in directories:
        script = discover_script(directory, "test", os, present)
        if script is not None:
            return [_excluded_error(script)] if script in excluded else []
    expected = [directory + script_name("test", os) for directory in directories]
    where = "" if step is None else f" for step '{step}'"
    reason = f"No {os} test script found{where}: expected {' or '.join(expected)}"
    return [TaskFormatError(reason, file=expected[0])]
