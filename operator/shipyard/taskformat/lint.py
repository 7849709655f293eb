"""Warnings about tasks that load but probably do not do what their author meant.

Harbor ignores unknown task.toml keys; only `harbor lint` names them (`unknown-config-field`).
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

from shipyard.taskformat.artifacts import collection_set, overlap_warnings
from shipyard.taskformat.compose import load_compose
from shipyard.taskformat.environment import EnvironmentConfig
from shipyard.taskformat.errors import TaskFormatError
from shipyard.taskformat.loader import CONFIG_FILE, INSTRUCTION_FILE, LoadedTask
from shipyard.taskformat.models import TaskConfig, load_task_config, parse_toml

_DEPRECATED: dict[type[BaseModel], dict[str, str]] = {
    TaskConfig: {"version": "'version' is the legacy name of 'schema_version'."},
    EnvironmentConfig: {
        "allow_internet": "The 'allow_internet' field is deprecated. Use network_mode instead.",
        "memory": "The 'memory' field is deprecated. Use 'memory_mb' instead.",
        "storage": "The 'storage' field is deprecated. Use 'storage_mb' instead.",
    },
}


@dataclass(frozen=True)
class LintWarning:
    file: str | None
    field: str | None
    message: str

    def __str__(self) -> str:
        return ": ".join(part for part in (self.file, self.field, self.message) if part)


def _nested_model(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model a field's value is validated as, and whether the field is a list of them."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _nested_model(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        for member in get_args(annotation):
            model, is_list = _nested_model(member)
            if model is not None:
                return model, is_list
        return None, False
    if origin is list:
        return _nested_model(get_args(annotation)[0])[0], True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    return None, False


UNKNOWN_KEY = "unknown key, ignored by Harbor"


def _odd_keys(
    model: type[BaseModel], data: Mapping[str, Any], path: str = ""
) -> Iterator[tuple[str, str]]:
    """(dotted path, message) for each unknown or deprecated key, in document order."""
    deprecated = _DEPRECATED.get(model, {})
    for key, value in data.items():
        here = f"{path}.{key}" if path else key
        if key in deprecated:
            yield here, deprecated[key]
            continue
        if key not in model.model_fields:
            yield here, UNKNOWN_KEY
            continue
        nested, is_list = _nested_model(model.model_fields[key].annotation)
        if nested is None:
            continue
        if is_list and isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, dict):
                    yield from _odd_keys(nested, item, f"{here}[{index}]")
        elif isinstance(value, dict):
            yield from _odd_keys(nested, value, here)


def unknown_keys(data: Mapping[str, Any]) -> list[str]:
    """Dotted paths (``steps[0].agent.timeout_secs``) of parsed task.toml keys Harbor ignores."""
    return [path for path, message in _odd_keys(TaskConfig, data) if message == UNKNOWN_KEY]


def _key_warnings(data: Mapping[str, Any], file: str) -> list[LintWarning]:
    return [LintWarning(file, path, message) for path, message in _odd_keys(TaskConfig, data)]


def _config_warnings(config: TaskConfig, file: str) -> list[LintWarning]:
    warnings = [LintWarning(file, "artifacts", message) for message in _artifact_overlaps(config)]
    if config.multi_step_reward_strategy is not None and not config.is_multi_step:
        warnings.append(
            LintWarning(file, "multi_step_reward_strategy", "ignored: this is a single-step task")
        )
    task_timeout = config.verifier.timeout_sec
    if "timeout_sec" in config.verifier.model_fields_set:
        for index, step in enumerate(config.steps or []):
            if (
                "timeout_sec" not in step.verifier.model_fields_set
                and step.verifier.timeout_sec != task_timeout
            ):
                warnings.append(
                    LintWarning(
                        file,
                        f"steps[{index}].verifier.timeout_sec",
                        f"not set: Harbor gives this step's verifier "
                        f"{step.verifier.timeout_sec:g} s, not [verifier].timeout_sec = "
                        f"{task_timeout:g} s; set it on the step",
                    )
                )
    return warnings


def _artifact_overlaps(config: TaskConfig) -> list[str]:
    os = config.environment.os
    sets = [collection_set(config.artifacts, os)]
    sets += [
        collection_set([*config.artifacts, *step.artifacts], os) for step in config.steps or []
    ]
    messages: list[str] = []
    for artifacts in sets:
        messages += [m for m in overlap_warnings(artifacts) if m not in messages]
    return messages


def lint_config(text: str, file: str = CONFIG_FILE) -> list[LintWarning]:
    """Validate task.toml text (raising `TaskFormatError`) and return its warnings."""
    config = load_task_config(text, file)
    return _key_warnings(parse_toml(text, file), file) + _config_warnings(config, file)


_REWARDS_TYPO = re.compile(rb"\brewards\.json\b")
_TESTS = re.compile(r"^(?:steps/[^/]+/)?tests/")
_STEP_DIR = re.compile(r"^steps/([^/]+)/")


def lint_task(task: LoadedTask) -> list[LintWarning]:
    """All warnings about a loaded task: its task.toml, then its files."""
    config = task.config
    text = task.files[CONFIG_FILE].decode("utf-8")
    warnings = _key_warnings(parse_toml(text, CONFIG_FILE), CONFIG_FILE)
    warnings += _config_warnings(config, CONFIG_FILE)
    for path, content in sorted(task.files.items()):
        if _TESTS.match(path) and _REWARDS_TYPO.search(content):
            warnings.append(
                LintWarning(
                    path,
                    None,
                    "mentions 'rewards.json', but Harbor reads /logs/verifier/reward.json "
                    "(or reward.txt)",
                )
            )
    if not config.environment.docker_image and not task.tree("environment/"):
        warnings.append(
            LintWarning(
                "environment/",
                None,
                "missing, and [environment].docker_image is not set: there is nothing to "
                "build or run",
            )
        )
    warnings += _copies_from_beside_context(task)
    warnings += _piped_downloads(task)
    if not task.is_multi_step:
        if task.solution_script() is None:
            warnings.append(
                LintWarning("solution/", None, "no solve script: the oracle agent cannot run")
            )
        return warnings
    if INSTRUCTION_FILE in task.files:
        warnings.append(LintWarning(INSTRUCTION_FILE, None, "ignored by multi-step tasks"))
    names = task.step_names()
    for name in names:
        if task.solution_script(name) is None:
            warnings.append(
                LintWarning(
                    f"steps/{name}/solution/",
                    None,
                    "no solve script for this step: the oracle agent cannot run it",
                )
            )
    undeclared = sorted(
        {m.group(1) for path in task.files if (m := _STEP_DIR.match(path))} - set(names)
    )
    warnings += [
        LintWarning(f"steps/{name}/", None, "not declared in [[steps]], ignored")
        for name in undeclared
    ]
    return warnings


_COPY_LINE = re.compile(r"^[ \t]*(?:COPY|ADD)[ \t]+(.+)$", re.IGNORECASE | re.MULTILINE)


_ONLY_FORCED = ("only when the Task sets forceBuild ([environment].docker_image is run "
                "otherwise, as under Harbor): ")


def _builds(task: LoadedTask) -> list[tuple[str, str, str]]:
    """(context, Dockerfile path, qualifier) of each image the task builds for its environment;
    the qualifier says when the main image is built only with `forceBuild`, since a
    `docker_image` is run as it is otherwise (and its Dockerfile may not build at all)."""
    try:
        compose = load_compose(task)
    except TaskFormatError:
        compose = None  # refused on its own
    builds = []
    main = compose.main if compose is not None else None
    forced = _ONLY_FORCED if task.config.environment.docker_image else ""
    if main is not None and main.build is not None:
        builds.append((main.build.context, main.build.context + main.build.dockerfile, forced))
    elif "environment/Dockerfile" in task.files:
        builds.append(("environment/", "environment/Dockerfile", forced))
    for service in compose.sidecars if compose is not None else ():
        if service.build is not None:
            builds.append((service.build.context,
                           service.build.context + service.build.dockerfile, ""))
    return builds


def _sources(arguments: str) -> list[str]:
    """The local sources of a COPY/ADD line (none for `--from`, URLs and patterns)."""
    text = arguments.strip()
    if text.startswith("["):
        try:
            words = [str(w) for w in json.loads(text)]
        except (ValueError, RecursionError):
            return []
    else:
        try:
            words = shlex.split(text)
        except ValueError:
            return []
    if any(w.startswith("--from") for w in words):
        return []
    words = [w for w in words if not w.startswith("--")]
    return [w for w in words[:-1]
            if "://" not in w and not any(c in w for c in "*?[$") and not w.startswith("<<")]


def _copies_from_beside_context(task: LoadedTask) -> list[LintWarning]:
    """A COPY of a path the build context lacks (the task has it elsewhere, `app/` beside
    environment/, or nowhere): the build fails, under Harbor too, which builds from
    environment/ unless the task's compose file names another context."""
    files = task.files
    warnings = []
    for context, dockerfile, forced in _builds(task):
        text = files.get(dockerfile, b"").decode("utf-8", errors="replace")
        text = re.sub(r"\\\r?\n", " ", text)
        for arguments in _COPY_LINE.findall(text):
            for source in _sources(arguments):
                path = posixpath.normpath(source.lstrip("/"))
                if path in (".", "") or path.startswith(".."):
                    continue
                if any(f == context + path or f.startswith(f"{context}{path}/") for f in files):
                    continue
                beside = next((f"{d}{path}" + ("" if d + path in files else "/")
                               for d in ("", "environment/") if d != context
                               and any(f == d + path or f.startswith(f"{d}{path}/")
                                       for f in files)), None)
                where = context or "the task's directory"
                if beside is None:
                    warnings.append(LintWarning(
                        dockerfile, None,
                        f"{forced}COPY {source}: not in the build context ({where}), nor "
                        "anywhere else in the task: the build fails there, after the steps "
                        "before it, as it does under Harbor"))
                    continue
                warnings.append(LintWarning(
                    dockerfile, None,
                    f"{forced}COPY {source}: not in the build context ({where}), but the task has "
                    f"{beside}: the build fails, as it does under Harbor. Move it into "
                    f"{where}, or build from the task's directory (a docker-compose.yaml "
                    "whose main has context: ${CONTEXT_DIR}/.. and dockerfile: "
                    "${CONTEXT_DIR}/Dockerfile)"))
    return warnings


_RUN_LINE = re.compile(r"^[ \t]*RUN[ \t]+(.+)$", re.IGNORECASE | re.MULTILINE)
_PIPED = re.compile(r"\b(?:curl|wget)\b[^|;&\n]*\|[ \t]*(?:sudo[ \t]+(?:-E[ \t]+)?)?"
                    r"(?:/(?:usr/)?bin/)?(?:ba|da|z)?sh\b")
_PIPEFAIL_SHELL = re.compile(r"^[ \t]*SHELL[ \t]+.*pipefail", re.IGNORECASE | re.MULTILINE)


def _piped_downloads(task: LoadedTask) -> list[LintWarning]:
    """A `RUN curl … | sh` without pipefail: a download that fails (no network, a URL that
    moved) pipes nothing into the shell, which succeeds, so the build is green without the
    tool, and the trial fails later (`cargo: command not found`). The same under Harbor."""
    warnings = []
    for _, dockerfile, forced in _builds(task):
        text = task.files.get(dockerfile, b"").decode("utf-8", errors="replace")
        if _PIPEFAIL_SHELL.search(text):
            continue
        text = re.sub(r"\\\r?\n", " ", text)
        for run in _RUN_LINE.findall(text):
            found = _PIPED.search(run)
            if found and "pipefail" not in run:
                warnings.append(LintWarning(
                    dockerfile, None,
                    f"{forced}RUN {found.group(0)}: a failed download pipes nothing into the "
                    "shell, which succeeds: the build passes without what it installs, and the "
                    "trial fails later (so under Harbor too). Download to a file first "
                    '(curl -fsSLo), or set SHELL ["/bin/bash", "-o", "pipefail", "-c"]'))
    return warnings
