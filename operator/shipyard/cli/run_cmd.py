"""`shipyard run` (create a Trial, optionally follow it) and `shipyard watch` (follow one)."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from rich.live import Live

from shipyard.api.conventions import LABEL_MANAGED_BY, is_finished_phase, parse_time
from shipyard.api.models import API_VERSION
from shipyard.cli.common import NAMESPACE_OPTION, err, fail, namespace_or_default, out
from shipyard.cli.formatting import (
    TrialView,
    condition,
    outcome_line,
    phase_event,
    phase_label,
    waiting_note,
)
from shipyard.cli.serving import (
    DEFAULT_OPERATOR_GRACE,
    DEFAULT_WATCH_TIMEOUT,
    invalid_task_message,
    ready_server,
    silent_seconds,
    slow_operator_message,
    task_state,
    timeout_message,
    trial_silence,
    unvalidated_task_message,
)

AGENTS = ("oracle", "nop", "command")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# While a followed trial has no status, look again at least this often (seconds).
SILENCE_CHECK_SECONDS = 3

TIMEOUT_OPTION = click.option(
    "--timeout", type=click.FloatRange(min=0), default=DEFAULT_WATCH_TIMEOUT, show_default=True,
    help="Stop following after SECONDS and exit 1 naming the trial's last phase (the trial "
         "goes on running); 0: no limit.")
GRACE_OPTION = click.option(
    "--operator-grace", type=click.FloatRange(min=0), default=DEFAULT_OPERATOR_GRACE,
    show_default=True, envvar="SHIPYARD_OPERATOR_GRACE",
    help="Seconds after which a Task no operator has validated, or a Trial with no status, "
         "means that no operator serves the namespace: say so with the fix and exit 1 "
         "(0: never judge). Env: SHIPYARD_OPERATOR_GRACE.")


def trial_body(task: str, agent: str, *, name: str | None, command: str | None,
               env: dict[str, str], image: str | None, pull_policy: str | None,
               keep_pods: bool, timeout_multiplier: float | None,
               keep_agent_processes: bool = False) -> dict[str, Any]:
    """The Trial manifest `shipyard run` creates (pure; unit-tested)."""
    agent_spec: dict[str, Any] = {"name": agent}
    if command is not None:
        agent_spec["command"] = command
    if env:
        agent_spec["env"] = [{"name": k, "value": v} for k, v in env.items()]
    spec: dict[str, Any] = {"taskRef": {"name": task}, "agent": agent_spec}
    environment: dict[str, Any] = {}
    if image:
        environment["image"] = image
    if pull_policy:
        environment["imagePullPolicy"] = pull_policy
    if environment:
        spec["environment"] = environment
    if keep_pods:
        spec["keepPods"] = True
    if keep_agent_processes:
        spec["verifier"] = {"agentProcesses": "Keep"}
    if timeout_multiplier is not None:
        spec["timeoutMultiplier"] = timeout_multiplier
    metadata: dict[str, Any] = {"labels": {LABEL_MANAGED_BY: "shipyard"}}
    if name:
        metadata["name"] = name
    else:
        metadata["generateName"] = f"{task[:40]}-{agent}-"
    return {"apiVersion": API_VERSION, "kind": "Trial", "metadata": metadata, "spec": spec}


def parse_env(pairs: tuple[str, ...]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not ENV_NAME.match(key):
            fail(f"--agent-env {pair!r}: expected NAME=VALUE")
        env[key] = value
    return env


def follow_trial(namespace: str, name: str, timeout: float, grace: float) -> dict[str, Any]:
    """Follow the trial until it finishes, live on a terminal, line by line otherwise.
    Returns the finished trial. Ends with an error when no operator serves the namespace
    (`grace`, see cli.serving) or after `timeout` seconds (0: none)."""
    from shipyard.kube.watch import ObjectGone, follow

    console = out()
    trial: dict[str, Any] = {}
    silence = SilenceWatch(namespace, grace)
    trials = _updates(follow, namespace, name, timeout or None, grace)
    try:
        if console.is_terminal:
            view = TrialView()
            with Live(view, console=console, refresh_per_second=4, transient=False):
                for trial in trials:
                    view.update(trial)
                    silence.check(trial, console)
                    if _finished(trial):
                        break
        else:
            seen: dict[str, str] = {}
            phase = note = None
            for trial in trials:
                status = trial.get("status") or {}
                if status.get("phase") != phase:
                    phase = status.get("phase")
                    if phase and not is_finished_phase(phase):
                        console.print(f"trial {name}: {phase}")
                waiting = waiting_note(status)
                if waiting is not None and waiting != note:
                    note = waiting
                    console.print(f"trial {name}: {note}")
                now = datetime.now(UTC)
                for record in status.get("phases") or []:
                    key = record.get("id") or phase_label(record)
                    state = record.get("state", "Pending")
                    if seen.get(key) != state and state != "Pending":
                        seen[key] = state
                        console.print(phase_event(record, now))
                silence.check(trial, console)
                if _finished(trial):
                    break
    except ObjectGone as exc:
        fail(str(exc))
    except TimeoutError:
        fail(timeout_message(trial, name, namespace, timeout))
    except KeyboardInterrupt:
        err().print(f"stopped following; the trial goes on: shipyard watch {name} -n {namespace}")
        sys.exit(130)
    return trial


def _updates(follow: Any, namespace: str, name: str, timeout: float | None,
             grace: float) -> Iterator[dict[str, Any]]:
    """The trial's versions; while it has no status (and grace is on), also every few seconds
    unchanged, so that its silence can be judged; plain changes once an operator wrote one."""
    deadline = None if timeout is None else time.monotonic() + timeout
    if grace > 0:
        for trial in follow("trials", namespace, name, timeout=timeout,
                            heartbeat=SILENCE_CHECK_SECONDS):
            yield trial
            if trial.get("status"):
                break
    remaining = None if deadline is None else deadline - time.monotonic()
    if remaining is not None and remaining <= 0:
        raise TimeoutError(name)
    yield from follow("trials", namespace, name, timeout=remaining)


class SilenceWatch:
    """Judges a followed trial that has no status yet (cli.serving.trial_silence): a fatal
    verdict ends the command, a warning is printed once."""

    def __init__(self, namespace: str, grace: float) -> None:
        self.namespace = namespace
        self.grace = grace
        self.began = time.monotonic()
        self.warned = False

    def check(self, trial: dict[str, Any], console: Any) -> None:
        if trial.get("status") or self.grace <= 0 or self.warned:
            return
        created = parse_time((trial.get("metadata") or {}).get("creationTimestamp"))
        age = None if created is None else (datetime.now(UTC) - created).total_seconds()
        silent = silent_seconds(trial, time.monotonic() - self.began, age)
        if silent < self.grace:
            return
        from shipyard.cli.pushing import installed_operators
        from shipyard.kube.trials import get

        task_name = ((trial.get("spec") or {}).get("taskRef") or {}).get("name", "")
        task = get("tasks", self.namespace, task_name) if task_name else None
        verdict = trial_silence(trial, task, namespace=self.namespace, silent_for=silent,
                                grace=self.grace, operators=[])
        if verdict is None:
            return
        if verdict.fatal:  # unless an installed operator serves the namespace and runs
            verdict = trial_silence(trial, task, namespace=self.namespace, silent_for=silent,
                                    grace=self.grace, operators=installed_operators())
            if verdict is not None and verdict.fatal:
                fail(verdict.message)
            if verdict is None:
                return
        self.warned = True
        console.print(f"warning: {verdict.message}", style="yellow")


def _finished(trial: dict[str, Any]) -> bool:
    return is_finished_phase((trial.get("status") or {}).get("phase"))


def report(trial: dict[str, Any]) -> None:
    line = outcome_line(trial)
    if condition(trial, "Complete") is not None or (trial.get("status") or {}).get(
        "phase"
    ) == "Completed":
        out().print(line)
        return
    err().print(line, style="red")
    sys.exit(1)


@click.command("run")
@click.argument("target")
@click.option("--agent", "-a", type=click.Choice(AGENTS), default=None,
              help="The agent (default: oracle; command when --agent-command is given).")
@click.option("--agent-command", default=None,
              help="Shell command run as the agent (implies --agent command).")
@click.option("--agent-env", multiple=True, metavar="NAME=VALUE",
              help="Environment variable for the agent phase (repeatable).")
@click.option("--name", default=None, help="Trial name (default: generated).")
@click.option("--task-name", default=None, help="With a DIRECTORY: the Task name to push as.")
@click.option("--image", default=None, help="Override the task's docker_image.")
@click.option("--image-pull-policy", type=click.Choice(["Always", "IfNotPresent", "Never"]),
              default=None)
@click.option("--keep-pods", is_flag=True, help="Keep the trial's pods after it ends.")
@click.option("--keep-agent-processes", is_flag=True,
              help="Leave what the agent started running for the tests, as Harbor does "
                   "(verifier.agentProcesses Keep; by default the tests never run beside "
                   "the agent's processes).")
@click.option("--timeout-multiplier", type=float, default=None)
@click.option("--watch", "-w", is_flag=True,
              help="Follow the trial's phases live and end with its reward; exit status 0 "
                   "when the trial completed, 1 when it failed.")
@TIMEOUT_OPTION
@GRACE_OPTION
@NAMESPACE_OPTION
def run(target: str, agent: str | None, agent_command: str | None, agent_env: tuple[str, ...],
        name: str | None, task_name: str | None, image: str | None,
        image_pull_policy: str | None, keep_pods: bool, keep_agent_processes: bool,
        timeout_multiplier: float | None, watch: bool, timeout: float, operator_grace: float,
        namespace: str | None) -> None:
    """Run a trial of TARGET: a local Harbor task DIRECTORY (pushed first, like `shipyard task
    push`) or the name of a Task in the namespace.

    The Trial is created only once an operator has validated the Task: a Task that is not
    valid, or that no operator validates within --operator-grace seconds (no operator serves
    the namespace), is refused with the reason and the fix."""
    from shipyard.kube.trials import create_trial, get

    if agent_command is not None and agent not in (None, "command"):
        fail(f"--agent-command needs --agent command (got --agent {agent})")
    agent = agent or ("command" if agent_command is not None else "oracle")
    if agent == "command" and not agent_command:
        fail("--agent command needs --agent-command CMD")
    env = parse_env(agent_env)
    ns = namespace_or_default(namespace)

    path = Path(target)
    if path.is_dir():
        from shipyard.cli.pushing import push_directory

        task, result = push_directory(path, ns, task_name)
        verb = "created" if result.created else ("updated" if result.changed else "unchanged")
        err().print(f"task {ns}/{task} {verb} from {path}")
    else:
        if task_name:
            fail("--task-name is only for a DIRECTORY target")
        if "/" in target or target.endswith(".toml") or path.exists():
            fail(f"{target}: not a task directory (a Task name or a directory is expected)")
        task = target
        if get("tasks", ns, task) is None:
            fail(f"task {task} not found in namespace {ns}; push a task directory with "
                 "`shipyard task push DIR` or pass the directory")
    if operator_grace > 0:
        from shipyard.cli.pushing import installed_operators, wait_validated

        validated = wait_validated(ns, task, operator_grace)
        if validated is None:
            operators = installed_operators()
            server = ready_server(operators, ns)
            if server is None:
                fail(unvalidated_task_message(ns, task, operator_grace, operators))
            err().print("warning: " + slow_operator_message(
                server, ns, f"task {task} is still not validated", operator_grace),
                style="yellow")
            validated = wait_validated(ns, task, timeout or 1e9)
            if validated is None:
                fail(f"task {task} was not validated within {operator_grace + timeout:g}s")
        if task_state(validated) == "invalid":
            fail(invalid_task_message(validated))
    body = trial_body(task, agent, name=name, command=agent_command, env=env, image=image,
                      pull_policy=image_pull_policy, keep_pods=keep_pods,
                      timeout_multiplier=timeout_multiplier,
                      keep_agent_processes=keep_agent_processes)
    created = create_trial(ns, body)
    trial_name = created["metadata"]["name"]
    if not watch:
        out().print(f"trial {ns}/{trial_name} created; follow it with: "
                    f"shipyard watch {trial_name} -n {ns}")
        return
    err().print(f"trial {ns}/{trial_name} created")
    report(follow_trial(ns, trial_name, timeout, operator_grace))


@click.command("watch")
@click.argument("trial")
@TIMEOUT_OPTION
@GRACE_OPTION
@NAMESPACE_OPTION
def watch_cmd(trial: str, timeout: float, operator_grace: float, namespace: str | None) -> None:
    """Follow a TRIAL's phases until it finishes; exit status 0 when it completed, 1 when it
    failed, when no operator serves the namespace, or when --timeout expired."""
    report(follow_trial(namespace_or_default(namespace), trial, timeout, operator_grace))
