"""What an exec's answer means for a trial: the runner's reply parsed, a retry after a backoff,
a fresh look at the pod, or — once the attempts are used up on a pod that still looks alive —
an infrastructure failure (`trial_machine.unanswered_execs`)."""

from __future__ import annotations

from dataclasses import dataclass

from shipyard.reconcile.runner_output import (
    PhaseStatus,
    RunnerProtocolError,
    parse_chain_output,
    parse_put_secrets,
    parse_runner_output,
)

EXEC_ATTEMPTS = 3
UNAVAILABLE_ATTEMPTS = 12
UNAVAILABLE_DELAY_SEC = 5.0
"""An exec that could not reach the pod's kubelet (restarting, or the apiserver itself) says
nothing about the pod: it is tried again every 5 s for about a minute before it counts as one
failed attempt (a kubelet restart takes seconds; a node that stays away is the pod's loss)."""


@dataclass(frozen=True)
class Answered:
    """The runner answered: each phase's parsed status (several after `runner chain`)."""

    results: tuple[tuple[str, PhaseStatus], ...]


@dataclass(frozen=True)
class Reobserve:
    """The pod is gone: look at the trial's pods again (the machine decides from there)."""


@dataclass(frozen=True)
class RetryExec:
    """Try again after `delay` seconds; `counts`: as a failed attempt (not when the kubelet
    was out of reach)."""

    delay: float
    error: str
    counts: bool = True


@dataclass(frozen=True)
class ExecsExhausted:
    """No answer after every attempt: after `delay` seconds, look at the pod; if it still
    looks alive, the trial's attempt fails with PodLost."""

    delay: float
    error: str


@dataclass(frozen=True)
class SecretsMissing:
    """`put-secrets` found these Secret volumes (``spec.agent.envFrom`` indexes) empty: their
    Secrets do not exist; the trial fails with SecretNotFound."""

    indexes: tuple[int, ...]


ExecDecision = Answered | Reobserve | RetryExec | ExecsExhausted
SecretsDecision = SecretsMissing | Reobserve | RetryExec | ExecsExhausted | None
"""After `put-secrets`: None when the Secrets are in the phase's drop."""


def backoff(attempt: int) -> float:
    """Seconds to wait after the failed attempt number `attempt` (0-based): 1, 3, 5."""
    return 1.0 + attempt * 2


def after_exec(state: str, stdout: str, error: str, attempt: int,
               phases: tuple[str, ...], unavailable: int = 0) -> ExecDecision:
    """`state` is the exec's outcome (``ok``, ``gone``, ``unavailable`` or ``failed``, with
    `error`) for the `phases` it launched or read (more than one: a `runner chain`); an answer
    the runner protocol cannot read counts as a failed attempt. `unavailable`: how many
    answers so far could not reach the kubelet."""
    if state == "gone":
        return Reobserve()
    if state == "unavailable" and unavailable + 1 < UNAVAILABLE_ATTEMPTS:
        return RetryExec(UNAVAILABLE_DELAY_SEC, error, counts=False)
    if state == "ok":
        try:
            if len(phases) > 1:
                return Answered(tuple(parse_chain_output(stdout)))
            return Answered(((phases[0], parse_runner_output(stdout)),))
        except RunnerProtocolError as e:
            error = str(e)
    if attempt + 1 < EXEC_ATTEMPTS:
        return RetryExec(backoff(attempt), error)
    return ExecsExhausted(backoff(attempt), error)


def after_put_secrets(state: str, stdout: str, error: str, attempt: int) -> SecretsDecision:
    if state == "gone":
        return Reobserve()
    if state == "ok":
        try:
            missing = parse_put_secrets(stdout)
        except RunnerProtocolError as e:
            error = str(e)
        else:
            return SecretsMissing(missing) if missing else None
    if attempt + 1 < EXEC_ATTEMPTS:
        return RetryExec(backoff(attempt), error)
    return ExecsExhausted(backoff(attempt), error)


def missing_secrets_message(names: tuple[str, ...], missing: tuple[int, ...],
                            namespace: str) -> str:
    listed = ", ".join(f'spec.agent.envFrom[{i}].secretRef.name: Secret "{names[i]}"'
                       for i in missing if i < len(names))
    return (f"{listed} not found (or without keys) in namespace {namespace}; create it, "
            "then run the trial again")


def stopped_status(state: str, stdout: str, error: str) -> tuple[PhaseStatus | None, str]:
    """A cancelled phase's `stop` answer (one attempt, best effort): its status, else None
    and why."""
    if state != "ok":
        return None, error or state
    try:
        return parse_runner_output(stdout), ""
    except RunnerProtocolError as e:
        return None, str(e)
