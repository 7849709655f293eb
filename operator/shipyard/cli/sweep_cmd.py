"""`shipyard sweep`: run a benchmark sweep over task directories, follow it live, retry its
unscored trials, suspend or resume it, and write its results in Harbor's job layout."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_args

import click
from rich.live import Live

from shipyard.api.models import GROUP, VERSION, AgentSpec
from shipyard.cli.common import NAMESPACE_OPTION, err, fail, namespace_or_default, out
from shipyard.cli.run_cmd import parse_env
from shipyard.cli.sweep_view import (
    finished,
    progress_line,
    state,
    sweep_body,
    sweep_view,
    usage,
)

AGENTS = get_args(AgentSpec.model_fields["name"].annotation)


@click.group("sweep")
def sweep() -> None:
    """Benchmark sweeps: attempts x tasks x agents as Trials, with Harbor's metrics."""


def task_dirs(target: Path) -> list[Path]:
    """A task directory, or a dataset directory of task directories (sorted)."""
    if (target / "task.toml").is_file():
        return [target]
    found = sorted(p for p in target.iterdir() if (p / "task.toml").is_file())
    if not found:
        fail(f"{target}: neither a task directory (no task.toml) nor a dataset directory "
             "(no subdirectory with a task.toml)")
    return found


def push_targets(targets: tuple[str, ...], namespace: str) -> list[str]:
    """Push every task directory (unchanged ones are left as they are: bundles are named by
    content); Task names pass through. Returns the Task names in order."""
    from shipyard.cli.pushing import push_directory
    from shipyard.kube.trials import get

    names: list[str] = []
    tally = {"created": 0, "updated": 0, "unchanged": 0}
    for target in targets:
        path = Path(target)
        if path.is_dir():
            for directory in task_dirs(path):
                name, result = push_directory(directory, namespace, None)
                verb = "created" if result.created else (
                    "updated" if result.changed else "unchanged")
                tally[verb] += 1
                names.append(name)
        elif "/" in target or path.exists():
            fail(f"{target}: not a directory (a task or dataset directory, or a Task name)")
        elif get("tasks", namespace, target) is None:
            fail(f"task {target} not found in namespace {namespace}")
        else:
            names.append(target)
    if not names:
        fail("no tasks to run")
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        fail(f"two task directories map to the same Task name: {', '.join(dupes)}")
    err().print(f"tasks in {namespace}: {tally['created']} created, {tally['updated']} "
                f"updated, {tally['unchanged']} unchanged"
                + (f", {len(names) - sum(tally.values())} by name"
                   if len(names) > sum(tally.values()) else ""))
    return names


def agent_specs(agents: tuple[str, ...], models: tuple[str, ...], command: str | None,
                env: dict[str, str]) -> list[dict[str, Any]]:
    """Harbor's CLI: every --agent with every --model (or no model)."""
    if command is not None and "command" not in agents:
        agents = (*agents, "command")
    out_specs = []
    for agent in agents or ("oracle",):
        for model in models or (None,):
            spec: dict[str, Any] = {"name": agent}
            if model:
                spec["model"] = model
            if agent == "command":
                if not command:
                    fail("--agent command needs --agent-command CMD")
                spec["command"] = command
            if env:
                spec["env"] = [{"name": k, "value": v} for k, v in env.items()]
            out_specs.append(spec)
    return out_specs


@sweep.command("run")
@click.argument("targets", nargs=-1, required=True)
@click.option("--agent", "-a", "agents", multiple=True, type=click.Choice(AGENTS),
              help="An agent (repeatable; default oracle).")
@click.option("--model", "-m", "models", multiple=True,
              help="A model (repeatable): every agent runs with every model.")
@click.option("--agent-command", default=None, help="The command agent's shell command.")
@click.option("--agent-env", multiple=True, metavar="NAME=VALUE",
              help="Environment variable for the agent phase (repeatable).")
@click.option("--attempts", "-k", type=click.IntRange(min=1), default=1, show_default=True,
              help="Trials per task and agent.")
@click.option("--parallelism", "-p", type=click.IntRange(min=1), default=4, show_default=True,
              help="Trials running at once.")
@click.option("--per-task-parallelism", type=click.IntRange(min=1), default=None,
              help="Trials of one task running at once (1 serializes its attempts).")
@click.option("--name", default=None, help="The Sweep's name (default: generated).")
@click.option("--dataset", default=None,
              help="Dataset name in the eval keys (default: the Sweep's name).")
@click.option("--image", default=None, help="Override every task's docker_image.")
@click.option("--timeout-multiplier", type=float, default=None)
@click.option("--retries", type=click.IntRange(0, 10), default=None,
              help="Infrastructure retries per trial.")
@click.option("--watch", "-w", is_flag=True, help="Follow the sweep live until it finishes.")
@click.option("--timeout", type=float, default=None, help="With --watch: stop after SECONDS.")
@NAMESPACE_OPTION
def run_cmd(targets: tuple[str, ...], agents: tuple[str, ...], models: tuple[str, ...],
            agent_command: str | None, agent_env: tuple[str, ...], attempts: int,
            parallelism: int, per_task_parallelism: int | None, name: str | None,
            dataset: str | None, image: str | None, timeout_multiplier: float | None,
            retries: int | None, watch: bool, timeout: float | None,
            namespace: str | None) -> None:
    """Run a sweep over TARGETS: task directories, dataset directories (a directory of task
    directories) or Task names. The directories are pushed first."""
    from shipyard.kube.client import custom

    ns = namespace_or_default(namespace)
    specs = agent_specs(agents, models, agent_command, parse_env(agent_env))
    tasks = push_targets(targets, ns)
    template: dict[str, Any] = {}
    if image:
        template["environment"] = {"image": image}
    if timeout_multiplier is not None:
        template["timeoutMultiplier"] = timeout_multiplier
    if retries is not None:
        template["retries"] = retries
    first = Path(targets[0])
    prefix = dataset or (first.resolve().name if first.is_dir() else tasks[0]) or "sweep"
    body = sweep_body(tasks, specs, name=name, prefix=prefix.lower(), attempts=attempts,
                      parallelism=parallelism, per_task_parallelism=per_task_parallelism,
                      dataset=dataset, template=template)
    created = custom().create_namespaced_custom_object(GROUP, VERSION, ns, "sweeps", body)
    sweep_name = created["metadata"]["name"]
    total = len(tasks) * len(specs) * attempts
    if not watch:
        out().print(f"sweep {ns}/{sweep_name} created: {total} trials; follow it with: "
                    f"shipyard sweep watch {sweep_name} -n {ns}")
        return
    err().print(f"sweep {ns}/{sweep_name} created: {total} trials")
    report(follow_sweep(ns, sweep_name, timeout))


def follow_sweep(namespace: str, name: str, timeout: float | None) -> dict[str, Any]:
    from shipyard.kube.watch import ObjectGone, follow

    console = out()
    obj: dict[str, Any] = {}
    try:
        if console.is_terminal:
            with Live(console=console, refresh_per_second=2, transient=False) as live:
                for obj in follow("sweeps", namespace, name, timeout=timeout):
                    live.update(sweep_view(obj, datetime.now(UTC)))
                    if finished(obj):
                        break
        else:
            last = None
            for obj in follow("sweeps", namespace, name, timeout=timeout):
                line = progress_line(obj, datetime.now(UTC))
                if line != last:
                    console.print(line)
                    last = line
                if finished(obj):
                    break
    except ObjectGone as exc:
        fail(str(exc))
    except TimeoutError as exc:
        fail(f"{exc}; it goes on running: shipyard sweep watch {name} -n {namespace}")
    except KeyboardInterrupt:
        err().print(f"stopped following; the sweep goes on: shipyard sweep watch {name} "
                    f"-n {namespace}")
        sys.exit(130)
    return obj


def report(obj: dict[str, Any]) -> None:
    status = obj.get("status") or {}
    line = (f"sweep {obj['metadata']['name']}: {state(obj)}, {status.get('progress')} "
            f"finished, {(status.get('counts') or {}).get('errored', 0)} error(s), mean "
            f"{status.get('mean')}")
    if state(obj) == "Complete":
        out().print(line)
        return
    err().print(line, style="red")
    sys.exit(1)


@sweep.command("watch")
@click.argument("name")
@click.option("--timeout", type=float, default=None, help="Stop following after SECONDS.")
@NAMESPACE_OPTION
def watch_cmd(name: str, timeout: float | None, namespace: str | None) -> None:
    """Follow a sweep live: a bar per eval key, counts, mean, pass@k, ETA."""
    report(follow_sweep(namespace_or_default(namespace), name, timeout))


def _get_sweep(namespace: str, name: str) -> dict[str, Any]:
    from shipyard.kube.trials import get

    obj = get("sweeps", namespace, name)
    if obj is None:
        fail(f"sweep {name} not found in namespace {namespace}")
    return obj


@sweep.command("retry")
@click.argument("name")
@NAMESPACE_OPTION
def retry_cmd(name: str, namespace: str | None) -> None:
    """Run once more every plan slot whose Trial ended without a reward (new Trials; the old
    ones are kept and left out of the metrics)."""
    from shipyard.kube.sweeps import set_spec_fields

    ns = namespace_or_default(namespace)
    obj = _get_sweep(ns, name)
    rounds = int((obj.get("spec") or {}).get("retryUnscored", 0)) + 1
    if rounds > 10:
        fail(f"sweep {name} was retried 10 times already")
    set_spec_fields(ns, name, {"retryUnscored": rounds})
    unscored = ((obj.get("status") or {}).get("counts") or {}).get("failed", 0)
    click.echo(f"sweep {name}: retry round {rounds} requested ({unscored} unscored slot(s) "
               "at the last status)")


def _set_suspend(name: str, namespace: str | None, suspend: bool) -> None:
    from shipyard.kube.sweeps import set_spec_fields

    ns = namespace_or_default(namespace)
    _get_sweep(ns, name)
    set_spec_fields(ns, name, {"suspend": suspend})
    click.echo(f"sweep {name} {'suspended' if suspend else 'resumed'}")


@sweep.command("suspend")
@click.argument("name")
@NAMESPACE_OPTION
def suspend_cmd(name: str, namespace: str | None) -> None:
    """Create no new Trial; running ones finish (spec.suspend)."""
    _set_suspend(name, namespace, True)


@sweep.command("resume")
@click.argument("name")
@NAMESPACE_OPTION
def resume_cmd(name: str, namespace: str | None) -> None:
    """Go on creating Trials after `suspend`."""
    _set_suspend(name, namespace, False)


@sweep.command("results")
@click.argument("name")
@click.option("--output-dir", "-o", type=click.Path(path_type=Path, file_okay=False),
              default=None, help="Write Harbor's job directory into DIR/NAME (Harbor's jobs "
              "directory layout: `harbor view DIR` opens it).")
@click.option("--json", "as_json", is_flag=True, help="Print Harbor's JobResult JSON.")
@NAMESPACE_OPTION
def results_cmd(name: str, output_dir: Path | None, as_json: bool,
                namespace: str | None) -> None:
    """A sweep's results: Harbor's JobResult (stats, metrics, pass@k per eval key) over the
    current Trial of each plan slot (a slot whose Task cannot run counts as an error); with -o,
    DIR/NAME/config.json, result.json and a directory per trial (result.json, config.json,
    rewards and logs), as Harbor writes a job."""
    from shipyard.api.conventions import selector_string, sweep_selector
    from shipyard.cli.get_cmd import trial_artifacts, trial_logs, write_job_dir
    from shipyard.cli.harbor_results import sweep_job
    from shipyard.kube.trials import list_objects

    ns = namespace_or_default(namespace)
    obj = _get_sweep(ns, name)
    trials = list_objects("trials", ns, selector_string(sweep_selector(name)))
    job, kept, config = sweep_job(obj, trials, list_objects("tasks", ns), datetime.now(UTC))
    if output_dir is not None:
        job_dir = output_dir / name
        write_job_dir(job_dir, job, trial_logs(kept), {**config, "jobs_dir": str(output_dir)},
                      trial_artifacts(kept))
        err().print(f"wrote {job_dir}/ (config.json, result.json and "
                    f"{len(job['trial_results'])} trial directories); open it with: harbor "
                    f"view {output_dir}")
    if as_json:
        click.echo(json.dumps(job, indent=2))
        return
    click.echo(progress_line(obj, datetime.now(UTC)))
    for key, stats in job["stats"]["evals"].items():
        metric = ", ".join(f"{k} {v:.4g}" for k, v in stats["metrics"][0].items())
        passes = ", ".join(f"pass@{k} {v:.4g}" for k, v in stats["pass_at_k"].items())
        spent = usage(stats["n_input_tokens"], stats["n_cache_tokens"],
                      stats["n_output_tokens"], stats["cost_usd"])
        click.echo(f"{key}: {stats['n_trials']} trial(s) with rewards, {stats['n_errors']} "
                   f"error(s), {metric}" + (f", {passes}" if passes else "")
                   + (f", {spent}" if spent else ""))


@sweep.command("report")
@click.argument("name")
@click.option("--output", "-o", type=click.Path(path_type=Path, dir_okay=False),
              default=Path("report.html"), show_default=True, help="The HTML page to write.")
@click.option("--jobs-dir", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Where the job is exported for the page's links to each trial's logs "
              "(as `sweep results -o`; default: a `jobs` directory beside the page).")
@NAMESPACE_OPTION
def report_cmd(name: str, output: Path, jobs_dir: Path | None, namespace: str | None) -> None:
    """One self-contained HTML page of a sweep's results (it renders offline): the leaderboard
    (the numbers of `sweep results`), a task x agent heat map of rewards, cost and token bars,
    phase-duration distributions and failure reasons; marks and rows link to each trial's
    logs in the exported job."""
    import os

    from shipyard.api.conventions import selector_string, sweep_selector
    from shipyard.cli.get_cmd import trial_artifacts, trial_logs, write_job_dir
    from shipyard.cli.harbor_results import sweep_job
    from shipyard.cli.sweep_report import report_html, runtime
    from shipyard.kube.trials import list_objects

    ns = namespace_or_default(namespace)
    obj = _get_sweep(ns, name)
    trials = list_objects("trials", ns, selector_string(sweep_selector(name)))
    job, kept, config = sweep_job(obj, trials, list_objects("tasks", ns), datetime.now(UTC))
    jobs_dir = jobs_dir or output.parent / "jobs"
    write_job_dir(jobs_dir / name, job, trial_logs(kept), {**config, "jobs_dir": str(jobs_dir)},
                  trial_artifacts(kept))
    try:
        script = runtime()
    except RuntimeError as exc:
        fail(str(exc))
    href = os.path.relpath(jobs_dir.resolve(), output.resolve().parent)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(report_html(job, config, f"Sweep {ns}/{name}", href, script))
    err().print(f"wrote {output} (the job in {jobs_dir / name})")
