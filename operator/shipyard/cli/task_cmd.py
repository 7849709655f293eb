"""``shipyard task``: read Harbor tasks the way Harbor 0.25 does, without a cluster."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from shipyard.taskformat import (
    LoadedTask,
    NetworkPolicy,
    TaskConfig,
    TaskFormatError,
    host_path,
    lint_config,
    lint_task,
    load_task_config,
    load_task_dir,
    resolve_network_plan,
    runnable,
    step_settings,
    task_config_json,
)
from shipyard.taskformat.compose import compose_refusals, load_compose

PATH_ARGUMENT = click.argument("path", type=click.Path(path_type=Path))


@click.group()
def task() -> None:
    """Inspect and check Harbor task directories."""


def _where(path: Path, file: str | None, field: str | None) -> str:
    """``<file>: <field>``, with task-relative files shown under the task directory."""
    if file is None:
        file = str(path)
    elif path.is_dir():
        file = str(path / file)
    return ": ".join(part for part in (file, field) if part)


@contextmanager
def _reported(path: Path) -> Iterator[None]:
    """Turn every failure into ``error:`` lines on stderr and exit status 1, never a traceback."""
    try:
        yield
    except TaskFormatError as exc:
        for error in exc.errors:
            click.echo(f"error: {_where(path, error.file, error.field)}: {error.reason}", err=True)
        raise SystemExit(1) from None
    except Exception as exc:  # a safety net: the CLI must never show a traceback
        click.echo(f"error: {path}: unexpected failure: {type(exc).__name__}: {exc}", err=True)
        raise SystemExit(1) from None


def _read_config_file(path: Path) -> str:
    if not path.is_file():
        raise TaskFormatError("no such task directory or file", file=str(path))
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise TaskFormatError("file is not valid UTF-8 text", file=str(path)) from None
    except OSError as exc:
        raise TaskFormatError(f"cannot read file: {exc.strerror}", file=str(path)) from None


@task.command()
@PATH_ARGUMENT
@click.option("--json", "as_json", is_flag=True, help="Print Harbor's resolved task.toml as JSON.")
def show(path: Path, as_json: bool) -> None:
    """Show the resolved configuration of a task directory or a single task.toml.

    A task.toml alone is validated as configuration only; a directory is loaded whole.
    """
    loaded: LoadedTask | None = None
    with _reported(path):
        if path.is_dir():
            loaded = load_task_dir(path)
            config = loaded.config
        else:
            config = load_task_config(_read_config_file(path), str(path))
        if as_json:
            click.echo(json.dumps(task_config_json(config), indent=2))
            return
        Console(highlight=False, soft_wrap=True).print(_render(config, loaded, path))


@task.command()
@PATH_ARGUMENT
def lint(path: Path) -> None:
    """Check a task like `show`, then warn about what Harbor silently ignores or mishandles."""
    with _reported(path):
        if path.is_dir():
            loaded = load_task_dir(path)
            refusals = compose_refusals(loaded)
            if refusals:
                raise TaskFormatError.combine(refusals)
            warnings = lint_task(loaded)
        else:
            warnings = lint_config(_read_config_file(path), str(path))
        verdicts = runnable.verdicts(load_task_dir(path)) if path.is_dir() else []
        for warning in warnings:
            click.echo(f"warning: {_where(path, warning.file, warning.field)}: {warning.message}")
        for v in verdicts:
            click.echo(f"{'refused' if v.refused else 'note'}: "
                       f"{_where(path, v.file, v.field)}: {v.message}")
        refused = [v for v in verdicts if v.refused]
        if refused:
            click.echo(f"error: {path}: valid, but Shipyard will not run it ({len(refused)} "
                       "reason(s) above): its Task is not Ready and its trials fail "
                       "TaskInvalid", err=True)
            raise SystemExit(1)
        notes = [v for v in verdicts if not v.refused]
        click.echo(f"{path}: ok, {len(warnings)} warning(s)"
                   + (f", {len(notes)} note(s) on how it will run" if notes else ""))


def _push_warnings(directory: Path) -> list:
    """What `lint` warns about (unknown keys above all), for `push` to print too."""
    try:
        return lint_task(load_task_dir(directory))
    except TaskFormatError:  # push_directory has reported the errors already
        return []


def _built_from(loaded: LoadedTask | None) -> str:
    """Where main's image is built from: environment/, or the compose file's build of main."""
    try:
        compose = load_compose(loaded) if loaded is not None else None
    except TaskFormatError:
        compose = None
    build = compose.main.build if compose is not None and compose.main else None
    if build is None:
        return "built from environment/"
    return f"built from {build.context or 'the task directory'} ({build.context}{build.dockerfile})"


def _seconds(value: float | None) -> str:
    return "none" if value is None else f"{value:g} s"


def _user(value: str | int | None) -> str:
    return "container default" if value is None else str(value)


def _policy(policy: NetworkPolicy | None) -> str:
    if policy is None:
        return "-"
    if policy.mode != "allowlist":
        return policy.mode
    return (
        f"allowlist [{', '.join(policy.allowed_hosts)}]"
        if policy.allowed_hosts
        else "allowlist (deny all)"
    )


def _section(title: str, rows: list[tuple[str, str]]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.title = Text(title, style="bold")
    table.title_justify = "left"
    table.add_column(style="cyan", no_wrap=True)
    table.add_column()
    for key, value in rows:
        table.add_row(Text(key), Text(value))
    return table


def _render(config: TaskConfig, loaded: LoadedTask | None, path: Path) -> Group:
    """The resolved configuration, for people; values are Text so that no markup is parsed."""
    if loaded:
        name = loaded.name
    else:
        name = config.task.name if config.task else path.resolve().parent.name
    kind = f"multi-step, {len(config.steps or [])} steps" if config.is_multi_step else "single-step"
    header = [("task", f"{name} ({kind})"), ("schema", config.schema_version)]
    if loaded:
        header.append(("digest", loaded.digest))
    env = config.environment
    resources = [
        f"cpus {env.cpus}" if env.cpus is not None else "",
        f"memory {env.memory_mb} MB" if env.memory_mb is not None else "",
        f"storage {env.storage_mb} MB" if env.storage_mb is not None else "",
        f"gpus {env.gpus}" + (f" ({', '.join(env.gpu_types)})" if env.gpu_types else "")
        if env.gpus
        else "",
        f"tpu {env.tpu.type} {env.tpu.topology} ({env.tpu.chip_count} chips)" if env.tpu else "",
    ]
    environment_rows = [
        ("image", env.docker_image or _built_from(loaded)),
        ("os", env.os),
        ("resources", ", ".join(r for r in resources if r) or "provider defaults"),
        ("workdir", env.workdir or "image default"),
        ("build timeout", _seconds(env.build_timeout_sec)),
    ]
    if env.healthcheck:
        environment_rows.append(("healthcheck", env.healthcheck.command))
    if env.env:
        environment_rows.append(("env", ", ".join(env.env)))
    for server in env.mcp_servers:
        environment_rows.append(("mcp server", f"{server.name} ({server.transport})"))
    parts: list[Table] = [_section("Task", header), _section("Environment", environment_rows)]
    steps: list[str | None] = [step.name for step in config.steps or []] or [None]
    parts += [_render_step(config, loaded, step) for step in steps]
    return Group(*parts)


def _render_step(config: TaskConfig, loaded: LoadedTask | None, step: str | None) -> Table:
    settings = step_settings(config, step)
    plan = resolve_network_plan(config, step)
    rows = [
        (
            "agent",
            f"timeout {_seconds(settings.agent_timeout_sec)}, user {_user(settings.agent_user)}",
        ),
        (
            "verifier",
            f"{settings.verifier_mode}, timeout {_seconds(settings.verifier_timeout_sec)}, "
            f"user {_user(settings.verifier_user)}",
        ),
    ]
    verifier_environment = loaded.verifier_environment(step) if loaded else None
    if verifier_environment:
        image = verifier_environment.config.docker_image or (
            f"built from {verifier_environment.context_dir}"
        )
        tests = "bundled in the image" if verifier_environment.bundled_tests else "uploaded"
        rows.append(
            ("verifier image", f"{image} ({verifier_environment.config.os}), tests {tests}")
        )
    if loaded:
        solution = loaded.solution_script(step)
        rows.append(("tests", f"/tests/{loaded.test_script(step)}"))
        rows.append(("solution", f"/solution/{solution}" if solution else "none"))
    if settings.verifier_env:
        rows.append(("verifier env", ", ".join(settings.verifier_env)))
    rows += [(f"collect ({hook.service})", hook.command) for hook in settings.collect]
    rows += [
        ("network", f"environment {_policy(plan.agent_env_baseline)}"),
        ("", f"agent phase {_policy(plan.agent_phase)}"),
        ("", f"verifier environment {_policy(plan.verifier_env_baseline)}"),
        ("", f"verifier phase {_policy(plan.verifier_phase)}"),
    ]
    rows += [("artifact", f"{a.source} -> {host_path(a)}") for a in settings.artifacts]
    if step is not None:
        if settings.healthcheck:
            rows.append(("healthcheck", settings.healthcheck.command))
        if settings.min_reward is not None:
            rows.append(("min reward", json.dumps(settings.min_reward)))
    return _section("Phases" if step is None else f"Step {step}", rows)


@task.command()
@click.argument("directory", type=click.Path(path_type=Path, file_okay=False))
@click.option("--name", default=None,
              help="Task resource name (default: [task].name without its org/, else the "
                   "directory name).")
@click.option("--namespace", "-n", default=None,
              help="Namespace (default: the kubeconfig context's, else default).")
@click.option("--wait/--no-wait", default=True, show_default=True,
              help="Wait until the operator has validated the task.")
@click.option("--timeout", default=60.0, show_default=True, help="Seconds to wait.")
def push(directory: Path, name: str | None, namespace: str | None, wait: bool,
         timeout: float) -> None:
    """Create or update the Task for a local Harbor task DIRECTORY.

    The files (.harborignore applied) go into a ConfigMap bundle named after their content;
    a bundle over the 1 MiB a ConfigMap can hold is refused.
    """
    from shipyard.cli.common import fail, namespace_or_default
    from shipyard.cli.pushing import push_directory, ready_condition, wait_ready

    ns = namespace_or_default(namespace)
    task_name, result = push_directory(directory, ns, name)
    for warning in _push_warnings(directory):
        click.echo(f"warning: {_where(directory, warning.file, warning.field)}: "
                   f"{warning.message}", err=True)
    verb = "created" if result.created else ("updated" if result.changed else "unchanged")
    click.echo(f"task {ns}/{task_name} {verb} (ConfigMap {result.configmap}, "
               f"{result.bundle_bytes:,} bytes compressed)")
    if not wait:
        return
    ready = ready_condition(wait_ready(ns, task_name, timeout))
    if ready is None or ready.get("status") != "True":
        reason = (ready or {}).get("reason", "Unknown")
        fail(f"task {task_name} is not Ready: {reason}: {(ready or {}).get('message', '')}")
    click.echo(f"task {task_name} Ready: {ready.get('message', '')}")
