"""Is an operator serving this namespace? Pure decisions from what the CLI observes (a Task, a
Trial, how long they have been silent), so that `shipyard run` and `shipyard watch` say within
seconds that nothing will ever happen, with the fix, instead of waiting in silence.

The evidence is the operator's own writes: it validates every Task (a `Ready` condition for the
Task's current generation) and writes a status on every Trial it drives, within a second or two
when it runs. A Task never validated and a Trial with no status at all after `grace` seconds
mean that no operator serves the namespace. A validated Task whose new Trial stays silent means
that one did (at validation time) and may have gone: that is only a warning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from shipyard.api.conventions import WATCH_ANNOTATION, condition, object_conditions

# How long a Task may stay unvalidated, or a new Trial without status, before the CLI says that
# no operator serves the namespace (`--operator-grace`, SHIPYARD_OPERATOR_GRACE).
DEFAULT_OPERATOR_GRACE = 12.0
# How long `run --watch` and `watch` follow a trial by default (`--timeout`, 0 = no limit). The
# operator enforces every phase's own timeout; this bounds a client that would otherwise wait
# on a stuck cluster.
DEFAULT_WATCH_TIMEOUT = 3600.0
# The Deployment label the chart sets, and the pod-template annotation naming what it serves.
OPERATOR_SELECTOR = "app.kubernetes.io/part-of=shipyard,app.kubernetes.io/component=operator"

TaskState = Literal["ready", "invalid", "unvalidated"]


@dataclass(frozen=True)
class InstalledOperator:
    """A Shipyard operator Deployment found in the cluster and what it serves."""

    namespace: str
    name: str
    watch: str  # "cluster-wide" or comma-separated namespaces ("" when unknown)
    ready: bool = False  # at least one Ready replica

    def serves(self, namespace: str) -> bool:
        return self.watch == "cluster-wide" or namespace in self.watch.split(",")


def ready_server(operators: list[InstalledOperator], namespace: str) -> InstalledOperator | None:
    """An installed operator that serves `namespace` and runs: evidence that the namespace is
    served, only slowly (a busy or starting operator), rather than not at all."""
    return next((op for op in operators if op.ready and op.serves(namespace)), None)


def slow_operator_message(operator: InstalledOperator, namespace: str, what: str,
                          waited: float) -> str:
    return (f"after {waited:.0f}s {what}, although the operator {operator.namespace}/"
            f"{operator.name} serves namespace {namespace} and is Ready: it may be busy; "
            f"waiting for it (`kubectl -n {operator.namespace} logs deployment/{operator.name}`"
            " tells more)")


def operators_from_deployments(deployments: list[dict[str, Any]]) -> list[InstalledOperator]:
    """The chart's Deployments (as the API returns them) → what each operator serves."""
    found = []
    for deployment in deployments:
        meta = deployment.get("metadata") or {}
        template = ((deployment.get("spec") or {}).get("template") or {}).get("metadata") or {}
        watch = (template.get("annotations") or {}).get(WATCH_ANNOTATION, "")
        ready = ((deployment.get("status") or {}).get("readyReplicas") or 0) > 0
        found.append(InstalledOperator(meta.get("namespace", ""), meta.get("name", ""), watch,
                                       ready))
    return found


def task_state(task: dict[str, Any]) -> TaskState:
    """`ready`/`invalid` once an operator has validated the Task's current generation,
    `unvalidated` before (or never)."""
    status = task.get("status") or {}
    ready = condition(object_conditions(task), "Ready", status=None)
    if ready is None:
        return "unvalidated"
    generation = (task.get("metadata") or {}).get("generation")
    observed = ready.get("observedGeneration", status.get("observedGeneration"))
    if generation is not None and observed is not None and observed < generation:
        return "unvalidated"
    return "ready" if ready.get("status") == "True" else "invalid"


def invalid_task_message(task: dict[str, Any]) -> str:
    ready = condition(object_conditions(task), "Ready", status=None) or {}
    return (f"task {task['metadata']['name']} is not Ready: {ready.get('reason', 'Unknown')}: "
            f"{ready.get('message', '')}")


def no_operator_message(namespace: str, silent: str, waited: float,
                        operators: list[InstalledOperator]) -> str:
    """One line: what was observed, and the fix (whole commands, never split)."""
    elsewhere = [op for op in operators if not op.serves(namespace) and op.watch]
    hints = []
    if elsewhere:
        served = sorted({ns for op in elsewhere for ns in op.watch.split(",")})
        hints.append(f"the installed operator{'s' if len(elsewhere) > 1 else ''} "
                     f"({', '.join(f'{op.namespace}/{op.name}' for op in elsewhere)}) "
                     f"serve{'' if len(elsewhere) > 1 else 's'} {', '.join(served)}: run there "
                     f"with `-n {served[0]}`")
    hints.append(f"install one that serves it: `helm install shipyard charts/shipyard "
                 f"-n {namespace}` (README, Install with Helm)")
    hints.append(f"or run one from a checkout: `shipyard operator -n {namespace}`")
    return (f"no Shipyard operator serves namespace {namespace}: after {waited:.0f}s {silent}. "
            f"Fix: {'; '.join(hints)}")


def unvalidated_task_message(namespace: str, task: str, waited: float,
                             operators: list[InstalledOperator]) -> str:
    return no_operator_message(
        namespace, f"task {task} is still not validated (no Ready condition); no trial was "
        "created", waited, operators)


@dataclass(frozen=True)
class Silence:
    """What to say about a trial that has no status yet: `fatal` ends the watch."""

    fatal: bool
    message: str


def trial_silence(trial: dict[str, Any], task: dict[str, Any] | None, *, namespace: str,
                  silent_for: float, grace: float,
                  operators: list[InstalledOperator]) -> Silence | None:
    """None while the trial has a status (an operator drives it) or has been silent for less
    than `grace` seconds (grace 0: never judge)."""
    if trial.get("status") or grace <= 0 or silent_for < grace:
        return None
    name = trial["metadata"]["name"]
    task_name = ((trial.get("spec") or {}).get("taskRef") or {}).get("name", "")
    if task is not None and task_state(task) != "unvalidated":
        # An operator validated the Task: it served the namespace then. A busy or restarting
        # operator can be slow to pick a trial up, so this only warns.
        return Silence(False, (
            f"trial {name} has no status after {silent_for:.0f}s although task {task_name} was "
            f"validated: is the operator serving namespace {namespace} still running? "
            "(`kubectl get pods -A -l app.kubernetes.io/part-of=shipyard`)"))
    what = (f"task {task_name} does not exist" if task is None
            else f"task {task_name} was never validated")
    silent = f"trial {name} still has no status and {what}"
    server = ready_server(operators, namespace)
    if server is not None:
        return Silence(False, slow_operator_message(server, namespace, silent, silent_for))
    return Silence(True, no_operator_message(namespace, silent, silent_for, operators))


def silent_seconds(trial: dict[str, Any], watched_for: float, age: float | None) -> float:
    """How long the trial has been without status as far as the client can tell: the time it
    has watched, or the trial's age by the server's clock when clearly older (a minute's
    margin for clock skew between this machine and the apiserver)."""
    if age is None:
        return watched_for
    return max(watched_for, age - 60)


def timeout_message(trial: dict[str, Any], name: str, namespace: str, timeout: float) -> str:
    """`--timeout` expired: name the trial and where it was."""
    status = trial.get("status") or {}
    phase = status.get("phase") or "no status yet"
    current = status.get("currentPhase")
    where = f"{phase}, {current}" if current else phase
    return (f"trial {name} did not finish within {timeout:g}s (last phase: {where}); "
            f"it goes on running: `shipyard watch {name} -n {namespace} --timeout 0`")
