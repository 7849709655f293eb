"""The pure state machine of a trial: (status, plan, observed pods, now) → the next action, and
how each action's result changes the status. All trial state lives in the status and the pods;
the handler only carries out what this returns, so a restarted operator resumes exactly.

Terminal outcomes are decided in two steps: the `Complete`/`Failed` condition is set first
(with rewards), then the pods are cleaned up and `phase` becomes Completed/Failed. A restart
between the two therefore never mistakes the cleanup for a lost pod.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from shipyard.api.models import (
    CANCEL_ANNOTATION,
    AttemptRecord,
    Condition,
    PhaseRecord,
    StepRecord,
    TrialError,
    TrialStatus,
)
from shipyard.plan.phases import REWARD_JSON, REWARD_TXT, PhaseSpec, TrialPlan, log_key
from shipyard.reconcile.pod_observation import PodObservation
from shipyard.reconcile.runner_output import PhaseStatus
from shipyard.taskformat import RewardFileError, parse_rewards

UNSCHEDULABLE_GRACE = timedelta(seconds=30)  # the default; plans carry their own
TIMEOUT_MARGIN = timedelta(seconds=30)
SAFETY_LOOK = timedelta(minutes=10)
DONE_STATES = ("Succeeded", "Failed", "Skipped")
RETRYABLE = ("PodLost", "ImagePullFailed")
MAX_BACKOFF_SEC = 60


# ---------------------------------------------------------------- actions


@dataclass(frozen=True)
class CreatePod:
    role: str  # env | verifier
    step: str | None = None


@dataclass(frozen=True)
class StopPod:
    role: str


@dataclass(frozen=True)
class Launch:
    phase: str  # phase id


@dataclass(frozen=True)
class ReadResult:
    phase: str


@dataclass(frozen=True)
class Wait:
    until: datetime | None  # None: until a pod or the trial changes


@dataclass(frozen=True)
class Finish:
    """Clean up (delete the pods unless kept) and mark the trial Completed or Failed."""


@dataclass(frozen=True)
class Done:
    pass


Action = CreatePod | StopPod | Launch | ReadResult | Wait | Finish | Done


@dataclass
class Outcome:
    """What a transition produced besides the new status."""

    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    logs: dict[str, str] = field(default_factory=dict)  # key in the logs ConfigMap → text
    delete_pods: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Pods:
    env: PodObservation
    verifier: PodObservation

    def of(self, role: str) -> PodObservation:
        return self.env if role == "env" else self.verifier


# ---------------------------------------------------------------- helpers


def iso(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def terminal_condition(status: TrialStatus) -> Condition | None:
    return next(
        (c for c in status.conditions if c.type in ("Complete", "Failed") and c.status == "True"),
        None,
    )


def is_finished(status: TrialStatus) -> bool:
    return status.phase in ("Completed", "Failed")


def current_record(status: TrialStatus) -> PhaseRecord | None:
    return next((r for r in status.phases if r.state not in DONE_STATES), None)


def with_current_phase(status: TrialStatus) -> TrialStatus:
    """`currentPhase` kept in step with the records: the first unfinished phase, none at the end."""
    rec = None if is_finished(status) else current_record(status)
    current = None if rec is None else (f"{rec.step}/{rec.name}" if rec.step else rec.name)
    if current == status.current_phase:
        return status
    return status.model_copy(update={"current_phase": current})


def record(status: TrialStatus, phase_id: str) -> PhaseRecord:
    return next(r for r in status.phases if (r.id or r.name) == phase_id)


def step_record(status: TrialStatus, name: str | None) -> StepRecord | None:
    if name is None:
        return None
    return next((s for s in status.steps if s.name == name), None)


def pod_name(status: TrialStatus, role: str) -> str | None:
    return status.pod_name if role == "env" else status.verifier_pod_name


def _set_condition(status: TrialStatus, type_: str, value: str, reason: str, message: str,
                   now: datetime) -> None:
    gen = status.observed_generation
    for c in status.conditions:
        if c.type == type_:
            if c.status != value:
                c.last_transition_time = iso(now)
            c.status, c.reason, c.message = value, reason, message  # type: ignore[assignment]
            c.observed_generation = gen
            return
    status.conditions.append(
        Condition(type=type_, status=value, reason=reason, message=message,  # type: ignore[arg-type]
                  last_transition_time=iso(now), observed_generation=gen)
    )


def _fresh_records(plan: TrialPlan) -> tuple[list[PhaseRecord], list[StepRecord]]:
    phases = [PhaseRecord(name=p.name, id=p.id, step=p.step) for p in plan.phases]
    steps = [StepRecord(name=s.name) for s in plan.steps if s.name is not None]
    return phases, steps


# ---------------------------------------------------------------- transitions


def start(status: TrialStatus, plan: TrialPlan, digest: str, generation: int | None,
          now: datetime) -> TrialStatus:
    """A new trial: every planned phase Pending, the environment starting."""
    status = status.model_copy(deep=True)
    status.phase = "Running"
    status.started_at = iso(now)
    status.task_digest = digest
    status.observed_generation = generation
    status.phases, status.steps = _fresh_records(plan)
    _begin_first_phase(status, now)
    _set_condition(status, "Running", "True", "EnvironmentStarting",
                   "creating the environment pod", now)
    return status


def _begin_first_phase(status: TrialStatus, now: datetime) -> None:
    status.phases[0].state = "Running"
    status.phases[0].started_at = iso(now)


def fail(status: TrialStatus, reason: str, message: str, now: datetime,
         error_type: str | None = None) -> tuple[TrialStatus, Outcome]:
    """Decide a Failed outcome (no reward could be recorded)."""
    status = status.model_copy(deep=True)
    if status.error is None:
        status.error = TrialError(type=error_type or reason, message=message)
    rec = current_record(status)
    if rec is not None and rec.state == "Running":
        rec.state = "Failed"
        rec.finished_at = rec.finished_at or iso(now)
        rec.message = rec.message or message
    running_step = next((s for s in status.steps if s.state == "Running"), None)
    if running_step is not None:
        running_step.state = "Failed"
        running_step.error = running_step.error or TrialError(type=error_type or reason,
                                                              message=message)
    _skip_rest(status)
    _set_condition(status, "Failed", "True", reason, message, now)
    _set_condition(status, "Running", "False", reason, message, now)
    return status, Outcome(events=[("Warning", reason, message)])


TASK_WAIT_SEC = 60.0


def task_wait_deadline(created_at: datetime | None, now: datetime,
                       wait_sec: float = TASK_WAIT_SEC) -> datetime:
    """Until when a Trial waits for its Task to appear (Trial and Task may be applied in any
    order, as with GitOps tools), counted from the Trial's creation."""
    return (created_at or now) + timedelta(seconds=wait_sec)


def waiting_for_task(status: TrialStatus, message: str, deadline: datetime,
                     now: datetime) -> tuple[TrialStatus, Outcome]:
    """Pending while the Task does not exist yet; TaskNotFound once the wait is over."""
    text = f"{message}; waiting until {iso(deadline)} for it to be created"
    status = status.model_copy(deep=True)
    noted = any(c.type == "Running" and c.reason == "WaitingForTask" for c in status.conditions)
    _set_condition(status, "Running", "False", "WaitingForTask", text, now)
    return status, Outcome(events=[] if noted else [("Normal", "WaitingForTask", text)])


def waiting_for_image(status: TrialStatus, message: str,
                      now: datetime) -> tuple[TrialStatus, Outcome]:
    """Pending while the Task's images are being built (one build for all its trials)."""
    status = status.model_copy(deep=True)
    noted = any(c.type == "Running" and c.reason == "WaitingForImage" and c.message == message
                for c in status.conditions)
    if noted:
        return status, Outcome()
    _set_condition(status, "Running", "False", "WaitingForImage", message, now)
    return status, Outcome(events=[("Normal", "WaitingForImage", message)])


def stoppable_phase(status: TrialStatus) -> str | None:
    """The phase to stop in its pod when the trial is cancelled: the launched, running one."""
    rec = current_record(status)
    return (rec.id or rec.name) if rec is not None and rec.launched else None


def cancel(status: TrialStatus, now: datetime, plan: TrialPlan | None = None,
           stopped: PhaseStatus | None = None) -> tuple[TrialStatus, Outcome]:
    """Stop the trial at the user's request: the running phase Failed, the rest Skipped. The
    running phase's log, as far as it got (`stopped`: its result after `runner stop`), is kept."""
    status = status.model_copy(deep=True)
    rec = current_record(status)
    where = "" if rec is None else f" during {f'{rec.step}/' if rec.step else ''}{rec.name}"
    logs: dict[str, str] = {}
    if rec is not None and plan is not None and stopped is not None and stopped.done:
        spec = plan.phase(rec.id or rec.name)
        logs = _logs(spec, stopped, plan.log_limit_bytes)
        rec.exit_code = stopped.exit_code
    status, outcome = fail(status, "Cancelled",
                           f"cancelled by the {CANCEL_ANNOTATION} annotation{where}", now,
                           "CancelledError")
    outcome.logs.update(logs)
    return status, outcome


def infrastructure_failure(status: TrialStatus, plan: TrialPlan, retries: int, reason: str,
                           message: str, now: datetime) -> tuple[TrialStatus, Outcome]:
    """An infrastructure failure: retried with a new pod while attempts remain (§b.8), else
    the trial fails. Task failures, timeouts and reward-file errors never come here."""
    if reason not in RETRYABLE or status.attempt > retries:
        return fail(status, reason, message, now)
    status = status.model_copy(deep=True)
    old_pods = [n for n in (status.pod_name, status.verifier_pod_name) if n]
    status.attempts.append(AttemptRecord(
        attempt=status.attempt, pod_name=status.pod_name, reason=reason, message=message,
        started_at=status.phases[0].started_at if status.phases else None,
        finished_at=iso(now)))
    backoff = min(2 ** (status.attempt - 1), MAX_BACKOFF_SEC)
    status.attempt += 1
    status.retry_at = iso(now + timedelta(seconds=backoff))
    status.pod_name = status.verifier_pod_name = None
    status.error = None
    status.rewards = status.reward = None
    status.phases, status.steps = _fresh_records(plan)
    _begin_first_phase(status, now)
    text = f"attempt {status.attempt - 1} failed ({reason}: {message}); retrying in {backoff}s"
    _set_condition(status, "Running", "True", "Retrying", text, now)
    return status, Outcome(events=[("Warning", "Retrying", text)], delete_pods=old_pods)


def _skip_rest(status: TrialStatus) -> None:
    for r in status.phases:
        if r.state in ("Pending", "Running"):
            r.state = "Skipped"
    for s in status.steps:
        if s.state in ("Pending", "Running"):
            s.state = "Skipped"


def _complete(status: TrialStatus, rewards: dict[str, float], now: datetime,
              note: str = "") -> Outcome:
    status.rewards = {k: float(v) for k, v in rewards.items()}
    status.reward = status.rewards.get("reward")
    summary = ", ".join(f"{k}={v:g}" for k, v in status.rewards.items())
    message = f"reward recorded: {summary}{note}"
    if status.error is not None:
        message += f" (after {status.error.type}: {status.error.message})"
    _set_condition(status, "Complete", "True", "RewardRecorded", message, now)
    _set_condition(status, "Running", "False", "RewardRecorded", message, now)
    return Outcome(events=[("Normal", "RewardRecorded", message)])


def finished(status: TrialStatus, now: datetime) -> TrialStatus:
    """After cleanup: the derived phase follows the terminal condition."""
    status = status.model_copy(deep=True)
    cond = terminal_condition(status)
    status.phase = "Completed" if cond is not None and cond.type == "Complete" else "Failed"
    status.finished_at = status.finished_at or iso(now)
    return status


def on_pod_created(status: TrialStatus, role: str, name: str, now: datetime) -> TrialStatus:
    status = status.model_copy(deep=True)
    if role == "env":
        status.pod_name = name
        status.retry_at = None
    else:
        status.verifier_pod_name = name
        rec = current_record(status)
        if rec is not None and rec.started_at is None:
            rec.started_at = iso(now)
    return status


def on_pod_stopped(status: TrialStatus, role: str) -> TrialStatus:
    status = status.model_copy(deep=True)
    if role == "env":
        status.pod_name = None
    else:
        status.verifier_pod_name = None
    return status


def on_launch(status: TrialStatus, phase_id: str, result: PhaseStatus, now: datetime
              ) -> tuple[TrialStatus, Outcome]:
    status = status.model_copy(deep=True)
    rec = record(status, phase_id)
    rec.state = "Running"
    rec.launched = True
    outcome = Outcome()
    if rec.name not in ("environment", "verifier-environment"):
        # A pod's first phase started when its pod was created.
        rec.started_at = result.started or iso(now)
        what = rec.name if rec.step is None else f"step {rec.step}: {rec.name}"
        label = rec.name.capitalize()
        _set_condition(status, "Running", "True", f"{label}Running", f"{what} running", now)
        outcome.events.append(("Normal", f"{label}Started", f"{what} started"))
    return status, outcome


def on_result(status: TrialStatus, plan: TrialPlan, phase_id: str, result: PhaseStatus,
              now: datetime) -> tuple[TrialStatus, Outcome]:
    """A phase finished: record it and decide what follows (Harbor §b.3, §b.4, §b.6)."""
    status = status.model_copy(deep=True)
    spec = plan.phase(phase_id)
    rec = record(status, phase_id)
    rec.finished_at = result.finished or iso(now)
    rec.exit_code = result.exit_code
    rec.timed_out = result.timed_out
    rec.state = "Succeeded"
    outcome = Outcome(logs=_logs(spec, result, plan.log_limit_bytes))
    runner_failed = result.exit_code == 126 and "shipyard runner:" in result.output
    step = step_record(status, spec.step)
    if step is not None and step.state == "Pending":
        step.state = "Running"
    kind = spec.name
    if kind == "environment":
        if result.exit_code != 0:
            rec.state = "Failed"
            return _fail_into(status, outcome, "EnvironmentSetupFailed",
                              f"preparing the environment failed: {_tail(result.output)}", now)
        outcome.events.append(("Normal", "EnvironmentReady", "environment pod ready"))
    elif kind == "healthcheck":
        if result.exit_code != 0:
            rec.state = "Failed"
            message = _tail(result.output) or "healthcheck failed"
            if step is None:
                return _fail_into(status, outcome, "HealthcheckFailed", message, now,
                                  "HealthcheckError")
            return _abort_step(status, plan, step, "HealthcheckError", message, now, outcome)
        outcome.events.append(("Normal", "HealthcheckPassed", "healthcheck passed"))
    elif kind == "setup":
        if result.exit_code != 0:
            rec.state = "Failed"
            message = (f"Step '{spec.step}' setup.sh exited with code {result.exit_code}: "
                       f"{_tail(result.output)}")
            return _abort_step(status, plan, step, "RuntimeError", message, now, outcome)
    elif kind == "agent":
        error = _agent_error(spec, rec, result, runner_failed, outcome)
        if error is not None:
            if step is not None:  # multi-step: recorded on the step, verification goes on
                step.error = step.error or TrialError(type=error[0], message=error[1])
            elif runner_failed:
                return _fail_into(status, outcome, "AgentFailed", error[1], now)
            elif status.error is None:
                status.error = TrialError(type=error[0], message=error[1])
    elif kind == "verifier-environment":
        if result.exit_code != 0:
            rec.state = "Failed"
            message = f"preparing the verifier environment failed: {_tail(result.output)}"
            if step is None:
                return _fail_into(status, outcome, "VerifierFailed", message, now)
            return _abort_step(status, plan, step, "RuntimeError", message, now, outcome)
    elif kind == "verifier":
        return _verifier_result(status, plan, spec, rec, step, result, runner_failed, outcome,
                                now)
    _advance(status)
    return status, outcome


def _agent_error(spec: PhaseSpec, rec: PhaseRecord, result: PhaseStatus, runner_failed: bool,
                 outcome: Outcome) -> tuple[str, str] | None:
    if runner_failed:
        rec.state = "Failed"
        rec.message = _tail(result.output)
        return "AgentError", rec.message
    if result.timed_out:
        rec.state = "Failed"
        rec.message = f"Agent execution timed out after {spec.timeout_sec:g} seconds"
        outcome.events.append(("Warning", "AgentTimeout", rec.message + "; verifying anyway"))
        return "AgentTimeoutError", rec.message
    if result.exit_code != 0:
        rec.message = f"agent exited with code {result.exit_code}"
        outcome.events.append(("Normal", "AgentFinished", rec.message + "; verifying"))
        if spec.oracle:  # the oracle never raises on a non-zero exit (§d.4)
            return None
        rec.state = "Failed"
        return "NonZeroAgentExitCodeError", rec.message
    outcome.events.append(("Normal", "AgentFinished", "agent finished with exit code 0"))
    return None


def _verifier_result(status: TrialStatus, plan: TrialPlan, spec: PhaseSpec, rec: PhaseRecord,
                     step: StepRecord | None, result: PhaseStatus, runner_failed: bool,
                     outcome: Outcome, now: datetime) -> tuple[TrialStatus, Outcome]:
    error: tuple[str, str, str] | None = None  # (reason, harbor exception, message)
    rewards: dict[str, float] = {}
    if runner_failed:
        error = ("VerifierFailed", "RuntimeError", _tail(result.output))
    elif result.timed_out:
        error = ("VerifierTimeout", "VerifierTimeoutError",
                 f"Verifier execution timed out after {spec.timeout_sec:g} seconds")
    else:
        reward_json = result.files.get(REWARD_JSON)
        reward_txt = result.files.get(REWARD_TXT)
        try:
            rewards = parse_rewards(
                reward_json.content if reward_json else None,
                reward_txt.content if reward_txt else None,
            )
        except RewardFileError as e:
            reason = {"RewardFileMissing": "RewardFileMissing",
                      "RewardFileEmpty": "RewardFileEmpty"}.get(type(e).__name__,
                                                                "RewardFileInvalid")
            error = (reason, getattr(e, "harbor_exception", type(e).__name__), str(e))
    if error is not None:
        rec.state = "Failed"
        rec.message = error[2]
        if step is None:
            return _fail_into(status, outcome, error[0], error[2], now, error[1])
        return _abort_step(status, plan, step, error[1], error[2], now, outcome)
    if step is None:
        outcome.events.extend(_complete(status, rewards, now).events)
        return status, outcome
    step.rewards = {k: float(v) for k, v in rewards.items()}
    step.state = "Succeeded"  # an agent error stays on record; the reward still counts
    summary = ", ".join(f"{k}={v:g}" for k, v in step.rewards.items())
    outcome.events.append(("Normal", "StepRewarded", f"step {step.name}: {summary}"))
    threshold = plan.step(step.name).min_reward
    below = _below_min_reward(step.rewards, threshold)
    if below is not None:
        step.message = f"stopped: {below}"
        outcome.events.append(("Warning", "MinRewardNotMet", f"step {step.name}: {below}; "
                                                              "skipping the remaining steps"))
        return _end_multi_step(status, plan, now, outcome, f"; stopped after step {step.name}: "
                                                           f"{below}")
    _advance(status)
    if current_record(status) is None:
        return _end_multi_step(status, plan, now, outcome)
    return status, outcome


def _below_min_reward(rewards: dict[str, float], threshold: float | dict[str, float] | None
                      ) -> str | None:
    """Harbor's `_should_stop_after_step`: a missing key counts as -inf."""
    if threshold is None:
        return None
    checks = threshold if isinstance(threshold, dict) else {"reward": threshold}
    for key, minimum in checks.items():
        actual = rewards.get(key, -math.inf)
        if actual < minimum:
            shown = "missing" if actual == -math.inf else f"{actual:g}"
            return f"{key} {shown} < min_reward {minimum:g}"
    return None


def _abort_step(status: TrialStatus, plan: TrialPlan, step: StepRecord | None, error_type: str,
                message: str, now: datetime, outcome: Outcome) -> tuple[TrialStatus, Outcome]:
    """A step failed without a verifier result: the remaining steps are skipped (§b.4)."""
    assert step is not None
    step.state = "Failed"
    step.error = step.error or TrialError(type=error_type, message=message)
    step.message = f"Step '{step.name}' failed, aborting remaining steps"
    outcome.events.append(("Warning", "StepFailed", f"step {step.name}: {message}"))
    return _end_multi_step(status, plan, now, outcome,
                           f"; stopped after step {step.name} failed")


def aggregate(status: TrialStatus, strategy: str) -> dict[str, float] | None:
    """Harbor's multi-step reward: `final` = the last executed step's result; `mean` = per-key
    mean over the steps with a result, a missing key counting as 0."""
    executed = [s for s in status.steps if s.state not in ("Pending", "Skipped")]
    if strategy == "final":
        last = executed[-1] if executed else None
        return dict(last.rewards) if last and last.rewards is not None else None
    results = [s.rewards for s in executed if s.rewards is not None]
    keys = list(dict.fromkeys(k for r in results for k in r))
    if not results or not keys:
        return None
    return {k: sum(r.get(k, 0.0) for r in results) / len(results) for k in keys}


def _end_multi_step(status: TrialStatus, plan: TrialPlan, now: datetime, outcome: Outcome,
                    note: str = "") -> tuple[TrialStatus, Outcome]:
    _skip_rest(status)
    rewards = aggregate(status, plan.reward_strategy or "mean")
    if rewards is None:
        failed = next((s for s in status.steps if s.error is not None), None)
        message = (f"no step produced a reward{note}" if failed is None or failed.error is None
                   else f"step {failed.name}: {failed.error.message}")
        return _fail_into(status, outcome, "StepFailed", message, now,
                          failed.error.type if failed and failed.error else None)
    outcome.events.extend(_complete(status, rewards, now, note).events)
    return status, outcome


def _fail_into(status: TrialStatus, outcome: Outcome, reason: str, message: str,
               now: datetime, error_type: str | None = None) -> tuple[TrialStatus, Outcome]:
    status, failed = fail(status, reason, message, now, error_type)
    outcome.events.extend(failed.events)
    return status, outcome


def _advance(status: TrialStatus) -> None:
    nxt = next((r for r in status.phases if r.state == "Pending"), None)
    if nxt is not None:
        nxt.state = "Running"


def _logs(spec: PhaseSpec, result: PhaseStatus, limit: int) -> dict[str, str]:
    from shipyard.render.pod import truncate_log

    logs = {}
    for path in spec.log_files:
        f = result.files.get(path)
        if f is not None:
            logs[log_key(spec)] = truncate_log(f.text(), f.size, limit)
    return logs


def _tail(text: str, limit: int = 2000) -> str:
    return text.strip()[-limit:]


# ---------------------------------------------------------------- deciding


def next_action(status: TrialStatus, plan: TrialPlan, pods: Pods, now: datetime,
                retries: int = 0) -> tuple[Action, TrialStatus | None, Outcome | None]:
    """The next thing to do. When the observation alone decides a failure (or a retry), the
    new status and its outcome come back with the action that follows."""
    if is_finished(status):
        return Done(), None, None
    if terminal_condition(status) is not None:
        return Finish(), None, None
    rec = current_record(status)
    if rec is None:  # every phase done without a terminal condition: cannot happen
        new, out = fail(status, "VerifierFailed", "the trial ended without a verifier result", now)
        return Finish(), new, out
    retry_at = parse_iso(status.retry_at)
    if retry_at is not None and status.pod_name is None and now < retry_at:
        return Wait(retry_at), None, None
    spec = plan.phase(rec.id or rec.name)
    # A separate verifier's pod is stopped once its verification is over.
    if status.verifier_pod_name and spec.pod != "verifier":
        return StopPod("verifier"), None, None
    # The agent environment is stopped before the last step's separate verification.
    if (spec.name == "verifier" and spec.pod == "verifier" and status.pod_name
            and _last_step(plan, spec.step)):
        return StopPod("env"), None, None
    if pod_name(status, spec.pod) is None:
        if spec.pod == "env" and status.phases[0].state != "Running":
            new, out = fail(status, "PodLost", "the environment pod is gone", now)
            return Finish(), new, out
        return CreatePod(spec.pod, spec.step), None, None
    pod = pods.of(spec.pod)
    first = spec.name in ("environment", "verifier-environment")
    failure = _pod_failure(status, plan, spec.pod, pod, rec, first, now)
    if failure is not None:
        new, out = infrastructure_failure(status, plan, retries, failure[0], failure[1], now)
        if terminal_condition(new) is None:
            return Wait(parse_iso(new.retry_at)), new, out
        return Finish(), new, out
    if not pod.ready:
        return Wait(wake_deadline(status, plan, pods, now)), None, None
    if not rec.launched:
        return Launch(spec.id), None, None
    return ReadResult(spec.id), None, None


def _last_step(plan: TrialPlan, step: str | None) -> bool:
    return plan.steps[-1].name == step


def _pod_failure(status: TrialStatus, plan: TrialPlan, role: str, pod: PodObservation,
                 rec: PhaseRecord, first: bool, now: datetime) -> tuple[str, str] | None:
    what = "environment" if role == "env" else "verifier"
    if not pod.exists:
        return "PodLost", f"the {what} pod {pod_name(status, role)} was deleted"
    if pod.lost:
        return "PodLost", pod.lost.replace("environment pod", f"{what} pod")
    if pod.image_pull_error:
        return "ImagePullFailed", pod.image_pull_error
    if pod.config_error:
        return "PodLost", pod.config_error
    if first and not rec.launched and not pod.ready:
        if pod.unschedulable and pod.created_at and now - pod.created_at >= _grace(plan):
            return "Unschedulable", pod.unschedulable
        started = pod.created_at or parse_iso(rec.started_at)
        if started and now - started >= timedelta(seconds=plan.start_timeout_sec):
            return ("EnvironmentStartTimeout",
                    f"Environment start timed out after {plan.start_timeout_sec:g} seconds")
    return None


def _grace(plan: TrialPlan) -> timedelta:
    """How long a pod may stay Unschedulable (longer when it waits for accelerators)."""
    return timedelta(seconds=plan.unschedulable_grace_sec)


def wake_deadline(status: TrialStatus, plan: TrialPlan, pods: Pods, now: datetime
                  ) -> datetime | None:
    """When to look again without a pod event: the next timeout that could fire, or a slow
    safety look once that has passed."""
    deadline = _deadline(status, plan, pods, now)
    if deadline is not None and deadline <= now:
        deadline = now + SAFETY_LOOK
    return deadline


def _deadline(status: TrialStatus, plan: TrialPlan, pods: Pods, now: datetime
              ) -> datetime | None:
    rec = current_record(status)
    if rec is None:
        return None
    spec = plan.phase(rec.id or rec.name)
    pod = pods.of(spec.pod)
    if spec.name in ("environment", "verifier-environment") and not rec.launched:
        candidates = []
        started = pod.created_at or parse_iso(rec.started_at)
        if started:
            candidates.append(started + timedelta(seconds=plan.start_timeout_sec))
        if pod.unschedulable and pod.created_at:
            candidates.append(pod.created_at + _grace(plan))
        return min(candidates) if candidates else None
    started = parse_iso(rec.started_at)
    if spec.timeout_sec is not None and started is not None:
        return started + timedelta(seconds=spec.timeout_sec) + TIMEOUT_MARGIN
    # No timeout: the readiness flip wakes us; a slow look now and then guards against a
    # missed flip at a cost that hardly grows with the phase's length.
    return (started or now) + SAFETY_LOOK
