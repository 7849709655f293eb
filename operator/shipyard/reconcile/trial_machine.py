"""The pure state machine of a trial: (status, plan, observed pods, now) → the next action, and
how each action's result changes the status. All trial state lives in the status and the pods;
the handler only carries out what this returns, so a restarted operator resumes exactly.

Terminal outcomes are decided in two steps: the `Complete`/`Failed` condition is set first
(with rewards), then the pods are cleaned up and `phase` becomes Completed/Failed. A restart
between the two therefore never mistakes the cleanup for a lost pod.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from shipyard.api.conditions import set_condition
from shipyard.api.conventions import (
    CANCEL_ANNOTATION,
    TERMINAL_CONDITIONS,
    Role,
    condition,
    is_finished_phase,
    iso,
    parse_time,
)
from shipyard.api.models import (
    AttemptRecord,
    Condition,
    PhaseRecord,
    StepRecord,
    TrialError,
    TrialStatus,
)
from shipyard.api.reasons import RETRYABLE, HarborError, Reason
from shipyard.plan import capacity
from shipyard.plan.agents import USAGE_FILE
from shipyard.plan.network import FENCE_MARK
from shipyard.plan.phases import (
    MARKER_ROOM,
    REWARD_JSON,
    REWARD_TXT,
    PhaseSpec,
    PodPlan,
    TrialPlan,
    folder_file_key,
    log_file_key,
    log_key,
    pod_requests_of,
    trajectory_key,
)
from shipyard.plan.settings import TASK_WAIT_SEC
from shipyard.reconcile.agent_result import (
    add_results,
    agent_error,
    agent_result,
    classify_agent_error,
)
from shipyard.reconcile.agent_trajectory import agent_trajectory
from shipyard.reconcile.pod_observation import PodObservation
from shipyard.reconcile.runner_output import PhaseStatus
from shipyard.reconcile.write_policy import (  # noqa: F401 (the trial's write rules)
    START_WRITE_DELAY_SEC,
    UNSAVED_WORK_SEC,
    write_before_exec,
)
from shipyard.taskformat import (
    RewardFileError,
    aggregate_steps,
    below_min_reward,
    parse_rewards,
)

UNSCHEDULABLE_GRACE = timedelta(seconds=30)  # the default; plans carry their own
TIMEOUT_MARGIN = timedelta(seconds=30)
SAFETY_LOOK = timedelta(minutes=10)
CAPACITY_LOOK = timedelta(seconds=30)
"""How often a pod waiting for capacity is looked at without an event."""
RESULT_WAIT_SEC = 60
"""How long one `result` exec waits for a phase's end in a pod without a readiness probe: a
phase costs one exec per this long (the driver drops a wait when the trial is cancelled or its
pod goes)."""
DONE_STATES = ("Succeeded", "Failed", "Skipped")
MAX_BACKOFF_SEC = 60


# ---------------------------------------------------------------- actions


@dataclass(frozen=True)
class CreatePod:
    role: Role
    step: str | None = None


@dataclass(frozen=True)
class StopPod:
    role: Role
    keep_artifacts: bool = False
    """Read the artifacts the collect phase packed in the pod, and keep them, before the pod
    goes (the last step's separate verifier is set up from them; the export reads them)."""


@dataclass(frozen=True)
class SetNetwork:
    """Put the pod of `role` under network policy `key` before its next phase launches."""

    role: Role
    key: str
    why: str


@dataclass(frozen=True)
class Launch:
    phase: str  # phase id


@dataclass(frozen=True)
class ReadResult:
    phase: str
    wait_sec: int = 0
    """Ask with this wait (a pod without a readiness probe): the answer comes when the phase
    ends, or says it still runs after that long."""


@dataclass(frozen=True)
class Wait:
    until: datetime | None  # None: until a pod or the trial changes


@dataclass(frozen=True)
class Finish:
    """Clean up (delete the pods unless kept) and mark the trial Completed or Failed."""


@dataclass(frozen=True)
class Done:
    pass


Action = CreatePod | StopPod | SetNetwork | Launch | ReadResult | Wait | Finish | Done


@dataclass
class Outcome:
    """What a transition produced besides the new status."""

    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    logs: dict[str, str] = field(default_factory=dict)  # key in the logs ConfigMap → text
    delete_pods: list[str] = field(default_factory=list)
    network: list[tuple[Role, str]] = field(default_factory=list)
    """(pod role, policy key): pods to put back under their baseline."""


@dataclass(frozen=True)
class Pods:
    env: PodObservation
    verifier: PodObservation

    def of(self, role: Role) -> PodObservation:
        return self.env if role == Role.ENV else self.verifier


# ---------------------------------------------------------------- helpers


def terminal_condition(status: TrialStatus) -> Condition | None:
    return condition(status.conditions, *TERMINAL_CONDITIONS)


def is_finished(status: TrialStatus) -> bool:
    return is_finished_phase(status.phase)


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


def pod_name(status: TrialStatus, role: Role) -> str | None:
    return status.pod_name if role == Role.ENV else status.verifier_pod_name


def _set_condition(status: TrialStatus, type_: str, value: str, reason: Reason, message: str,
                   now: datetime) -> None:
    set_condition(status.conditions, Condition(
        type=type_, status=value, reason=str(reason),  # type: ignore[arg-type]  # the plain word
        message=message, observed_generation=status.observed_generation), iso(now))


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
    _set_condition(status, "Running", "True", Reason.ENVIRONMENT_STARTING,
                   "creating the environment pod", now)
    return status


def _begin_first_phase(status: TrialStatus, now: datetime) -> None:
    status.phases[0].state = "Running"
    status.phases[0].started_at = iso(now)


def fail(status: TrialStatus, reason: Reason, message: str, now: datetime,
         error_type: str | None = None) -> tuple[TrialStatus, Outcome]:
    """Decide a Failed outcome (no reward could be recorded)."""
    error_type = str(error_type or reason)
    status = status.model_copy(deep=True)
    if status.error is None:
        status.error = TrialError(type=error_type, message=message)
    rec = current_record(status)
    if rec is not None and rec.state == "Running":
        rec.state = "Failed"
        rec.finished_at = rec.finished_at or iso(now)
        rec.message = rec.message or message
    running_step = next((s for s in status.steps if s.state == "Running"), None)
    if running_step is not None:
        running_step.state = "Failed"
        running_step.error = running_step.error or TrialError(type=error_type, message=message)
    _skip_rest(status)
    _set_condition(status, "Failed", "True", reason, message, now)
    _set_condition(status, "Running", "False", reason, message, now)
    return status, Outcome(events=[("Warning", reason, message)])


def given_up(status: TrialStatus, message: str, now: datetime) -> tuple[TrialStatus, Outcome]:
    """The operator failed the same way, time after time, driving this trial (e.g. a value
    it cannot store): the trial ends with the reason of the phase it was in (the verifier's
    for verification and anything after), never a retry."""
    rec = current_record(status)
    reason = (TASK_FAILURE_REASONS.get(rec.name, Reason.VERIFIER_FAILED) if rec is not None
              else Reason.ENVIRONMENT_SETUP_FAILED)  # before any phase: its pod's start
    return fail(status, reason, message, now)


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
    noted = condition(status.conditions, "Running", status=None,
                      reason=Reason.WAITING_FOR_TASK) is not None
    _set_condition(status, "Running", "False", Reason.WAITING_FOR_TASK, text, now)
    return status, Outcome(events=[] if noted else [("Normal", Reason.WAITING_FOR_TASK, text)])


def waiting_for_image(status: TrialStatus, message: str,
                      now: datetime) -> tuple[TrialStatus, Outcome]:
    """Pending while the Task's images are being built (one build for all its trials)."""
    status = status.model_copy(deep=True)
    noted = any(c.type == "Running" and c.reason == Reason.WAITING_FOR_IMAGE
                and c.message == message for c in status.conditions)
    if noted:
        return status, Outcome()
    _set_condition(status, "Running", "False", Reason.WAITING_FOR_IMAGE, message, now)
    return status, Outcome(events=[("Normal", Reason.WAITING_FOR_IMAGE, message)])


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
        logs = _logs(spec, stopped, plan)
        rec.exit_code = stopped.exit_code
    status, outcome = fail(status, Reason.CANCELLED,
                           f"cancelled by the {CANCEL_ANNOTATION} annotation{where}", now,
                           HarborError.CANCELLED)
    outcome.logs.update(logs)
    return status, outcome


def infrastructure_failure(status: TrialStatus, plan: TrialPlan, retries: int, reason: Reason,
                           message: str, now: datetime) -> tuple[TrialStatus, Outcome]:
    """An infrastructure failure: retried with a new pod while attempts remain (docs/harbor.md
    §b.8), else the trial fails. Task failures, timeouts and reward-file errors never come here."""
    preempted = status.queue.preemptions if status.queue is not None else 0  # not failures
    if reason not in RETRYABLE or status.attempt - preempted > retries:
        return fail(status, reason, message, now)
    status = status.model_copy(deep=True)
    old_pods = [n for n in (status.pod_name, status.verifier_pod_name) if n]
    status.attempts.append(AttemptRecord(
        attempt=status.attempt, pod_name=status.pod_name, reason=str(reason), message=message,
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
    _set_condition(status, "Running", "True", Reason.RETRYING, text, now)
    return status, Outcome(events=[("Warning", Reason.RETRYING, text)], delete_pods=old_pods)


def _skip_rest(status: TrialStatus) -> None:
    for r in status.phases:
        if r.state in ("Pending", "Running"):
            r.state = "Skipped"
    for s in status.steps:
        if s.state in ("Pending", "Running"):
            s.state = "Skipped"


def _complete(status: TrialStatus, rewards: Mapping[str, float | int], now: datetime,
              note: str = "") -> Outcome:
    status.rewards = dict(rewards)
    status.reward = status.rewards.get("reward")
    summary = ", ".join(f"{k}={v:g}" for k, v in status.rewards.items())
    message = f"reward recorded: {summary}{note}"
    if status.error is not None:
        message += f" (after {status.error.type}: {status.error.message})"
    _set_condition(status, "Complete", "True", Reason.REWARD_RECORDED, message, now)
    _set_condition(status, "Running", "False", Reason.REWARD_RECORDED, message, now)
    return Outcome(events=[("Normal", Reason.REWARD_RECORDED, message)])


def finished(status: TrialStatus, now: datetime) -> TrialStatus:
    """After cleanup: the derived phase follows the terminal condition."""
    status = status.model_copy(deep=True)
    cond = terminal_condition(status)
    status.phase = "Completed" if cond is not None and cond.type == "Complete" else "Failed"
    status.finished_at = status.finished_at or iso(now)
    return status


def on_pod_created(status: TrialStatus, role: Role, name: str, now: datetime,
                   warm: bool = False) -> TrialStatus:
    """The pod of `role` is there: created, or (`warm`) a warm pod claimed as the environment
    pod (`docs/warm-pods.md`)."""
    status = status.model_copy(deep=True)
    if role == Role.ENV:
        status.pod_name = name
        status.warm_pod = name if warm else None
        status.pod_process_base = None
        status.retry_at = None
    else:
        status.verifier_pod_name = name
        rec = current_record(status)
        if rec is not None and rec.started_at is None:
            rec.started_at = iso(now)
    return status


def on_pod_stopped(status: TrialStatus, role: Role) -> TrialStatus:
    status = status.model_copy(deep=True)
    if role == Role.ENV:
        status.pod_name = None
        status.warm_pod = None
        status.pod_process_base = None
    else:
        status.verifier_pod_name = None
    return status


def _warm_pod_lost(status: TrialStatus, spec: PhaseSpec, rec: PhaseRecord, pod: PodObservation
                   ) -> tuple[TrialStatus, Outcome] | None:
    """A claimed warm pod that is gone or dead before anything ran in it is let go and another
    taken, with no attempt spent: no retry counts a pod the trial never used."""
    name = status.pod_name
    if (spec.pod != Role.ENV or name is None or status.warm_pod != name or rec.launched
            or not (not pod.exists or pod.lost or pod.deleting)):
        return None
    new = on_pod_stopped(status, Role.ENV)
    why = "was deleted" if not pod.exists or pod.deleting else f"failed: {pod.lost}"
    return new, Outcome(events=[("Warning", Reason.WARM_POD_LOST,
                                 f"warm pod {name} {why} before its first phase; another pod "
                                 "is taken (no retry counted)")],
                        delete_pods=[name] if pod.exists else [])


def on_launch(status: TrialStatus, phase_id: str, result: PhaseStatus, now: datetime
              ) -> tuple[TrialStatus, Outcome]:
    status = status.model_copy(deep=True)
    rec = record(status, phase_id)
    rec.state = "Running"
    rec.launched = True
    if rec.name == "environment" and result.base is not None and status.pod_process_base is None:
        status.pod_process_base = result.base  # the environment pod's first launch took it
    outcome = Outcome()
    if rec.name not in ("environment", "verifier-environment"):
        # A pod's first phase started when its pod was created.
        rec.started_at = result.started or iso(now)
        what = rec.name if rec.step is None else f"step {rec.step}: {rec.name}"
        _set_condition(status, "Running", "True", Reason.running(rec.name), f"{what} running",
                       now)
        outcome.events.append(("Normal", Reason.started(rec.name), f"{what} started"))
    return status, outcome


def on_result(status: TrialStatus, plan: TrialPlan, phase_id: str, result: PhaseStatus,
              now: datetime) -> tuple[TrialStatus, Outcome]:
    """A phase finished: record it and decide what follows (docs/harbor.md §b.3, §b.4, §b.6). Its
    pod goes back under the pod's network baseline."""
    status, outcome = _on_result(status, plan, phase_id, result, now)
    spec = plan.phase(phase_id)
    if plan.network is not None and plan.network.restricted:
        outcome.network.append((spec.pod, plan.network.baseline(spec.pod, spec.step)))
    return status, outcome


def _on_result(status: TrialStatus, plan: TrialPlan, phase_id: str, result: PhaseStatus,
               now: datetime) -> tuple[TrialStatus, Outcome]:
    status = status.model_copy(deep=True)
    spec = plan.phase(phase_id)
    rec = record(status, phase_id)
    rec.finished_at = result.finished or iso(now)
    rec.exit_code = result.exit_code
    rec.timed_out = result.timed_out
    rec.state = "Succeeded"
    outcome = Outcome(logs=_logs(spec, result, plan))
    runner_failed = result.exit_code == 126 and "shipyard runner:" in result.output
    step = step_record(status, spec.step)
    if step is not None and step.state == "Pending":
        step.state = "Running"
    kind = spec.name
    if spec.fence is not None and result.exit_code != 0 and result.output.lstrip().startswith(
            f"shipyard runner: preparing phase {phase_id} failed: fence {FENCE_MARK}"):
        rec.state = "Failed"  # the phase's policy never came into force: nothing of it ran
        return _fail_into(status, outcome, Reason.NETWORK_POLICY_UNENFORCEABLE,
                          _tail(result.output), now)
    if kind == "environment":
        if result.exit_code != 0:
            rec.state = "Failed"
            return _fail_into(status, outcome, Reason.ENVIRONMENT_SETUP_FAILED,
                              f"preparing the environment failed: {_tail(result.output)}", now)
    elif kind == "healthcheck":
        if result.exit_code != 0:
            rec.state = "Failed"
            message = _tail(result.output) or "healthcheck failed"
            if step is None:
                return _fail_into(status, outcome, Reason.HEALTHCHECK_FAILED, message, now,
                                  HarborError.HEALTHCHECK)
            return _abort_step(status, plan, step, HarborError.HEALTHCHECK, message, now,
                               outcome)
        outcome.events.append(("Normal", Reason.HEALTHCHECK_PASSED, "healthcheck passed"))
    elif kind == "setup":
        if result.exit_code != 0:
            rec.state = "Failed"
            message = (f"Step '{spec.step}' setup.sh exited with code {result.exit_code}: "
                       f"{_tail(result.output)}")
            return _abort_step(status, plan, step, HarborError.RUNTIME, message, now, outcome)
    elif kind == "agent":
        ended = ended_processes(result.runner_notes)
        if ended is not None:
            outcome.events.append(("Warning", Reason.AGENT_PROCESSES_ENDED, (
                f"the agent phase left processes running, ended before the verifier: {ended} "
                "(spec.verifier.agentProcesses: Keep keeps them, as Harbor does)")))
        error = _agent_error(spec, rec, result, runner_failed, outcome)
        if spec.installed_agent is not None:
            error = _installed_agent_outcome(status, spec, result, error, outcome,
                                             min(TRAJECTORY_LIMIT_BYTES, plan.log_key_bytes))
        if error is not None:
            if step is not None:  # multi-step: recorded on the step, verification goes on
                step.error = step.error or TrialError(type=error[0], message=error[1])
            elif runner_failed:
                return _fail_into(status, outcome, Reason.AGENT_FAILED, error[1], now)
            elif status.error is None:
                status.error = TrialError(type=error[0], message=error[1])
    elif kind == "verifier-environment":
        if result.exit_code != 0:
            rec.state = "Failed"
            message = f"preparing the verifier environment failed: {_tail(result.output)}"
            if step is None:
                return _fail_into(status, outcome, Reason.VERIFIER_FAILED, message, now)
            return _abort_step(status, plan, step, HarborError.RUNTIME, message, now, outcome)
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
        return HarborError.AGENT, rec.message
    if result.timed_out:
        rec.state = "Failed"
        rec.message = f"Agent execution timed out after {spec.timeout_sec:g} seconds"
        outcome.events.append(("Warning", Reason.AGENT_TIMEOUT,
                               rec.message + "; verifying anyway"))
        return HarborError.AGENT_TIMEOUT, rec.message
    if result.oom_killed:
        rec.state = "Failed"
        rec.message = (f"OOMKilled: the agent reached the task's memory limit (memory_mb); the "
                       f"kernel killed {result.oom_killed} of its processes (exit code "
                       f"{result.exit_code})")
        outcome.events.append(("Warning", Reason.OOM_KILLED, rec.message + "; verifying anyway"))
        return Reason.OOM_KILLED, rec.message
    if result.exit_code != 0:
        rec.message = f"agent exited with code {result.exit_code}"
        outcome.events.append(("Normal", Reason.AGENT_FINISHED, rec.message + "; verifying"))
        if spec.oracle:  # the oracle never raises on a non-zero exit (docs/harbor.md §d.4)
            return None
        rec.state = "Failed"
        return HarborError.NON_ZERO_AGENT_EXIT, rec.message
    return None  # the story goes on with VerifierStarted: no Event of its own


ENDED_NOTE = "shipyard runner: the phase left processes running, now ended: "


def ended_processes(notes: str, limit: int = 300) -> str | None:
    """The names of the processes a phase left running that the runner ended (its note), or
    None. The first such note, at most `limit` characters: a task whose tests check a service
    its solution started scores 0 by default, and says why."""
    for line in notes.splitlines():
        if line.startswith(ENDED_NOTE):
            names = line[len(ENDED_NOTE):].split(" (", 1)[0].strip()
            return names[:limit] or None
    return None


TRAJECTORY_LIMIT_BYTES = 256 * 1024


def _installed_agent_outcome(status: TrialStatus, spec: PhaseSpec, result: PhaseStatus,
                             error: tuple[str, str] | None, outcome: Outcome,
                             trajectory_limit: int = TRAJECTORY_LIMIT_BYTES
                             ) -> tuple[str, str] | None:
    """Record what an installed agent reported (`status.agentResult`; summed over the steps
    of a multi-step trial), keep its ATIF trajectory with the logs, and classify its failure
    as Harbor does (rate limit, auth, ...)."""
    assert spec.installed_agent is not None
    usage = result.files.get(USAGE_FILE)
    usage_text = usage.text() if usage else ""
    found = agent_result(spec.installed_agent, usage_text, spec.model)
    if found is not None:
        status.agent_result = add_results(status.agent_result, found)
    native = result.files.get(spec.agent_native) if spec.agent_native else None
    if native is not None and not native.truncated:
        trajectory = agent_trajectory(spec.installed_agent, native.text(),
                                      spec.agent_version or "unknown", spec.model, found)
        text = json.dumps(trajectory, indent=1) if trajectory is not None else ""
        if text and len(text.encode()) <= trajectory_limit:  # never a truncated JSON
            outcome.logs[trajectory_key(spec)] = text
    reported = agent_error(spec.installed_agent, usage_text)
    if error is None and reported is None:
        return None
    if error is not None and error[0] != "NonZeroAgentExitCodeError":
        return error  # timeouts and runner failures keep their own type
    log = result.files.get(spec.log_files[0]) if spec.log_files else None
    # The agent's own error report when it has one; else the tail of its log.
    kind = classify_agent_error(reported or (log.text()[-20000:] if log else ""))
    message = error[1] if error is not None else "the agent reported an error"
    detail = (reported or "").strip()[:300]
    return kind, f"{message}: {detail}" if detail else message


def _verifier_result(status: TrialStatus, plan: TrialPlan, spec: PhaseSpec, rec: PhaseRecord,
                     step: StepRecord | None, result: PhaseStatus, runner_failed: bool,
                     outcome: Outcome, now: datetime) -> tuple[TrialStatus, Outcome]:
    error: tuple[Reason, str, str] | None = None  # (reason, harbor exception, message)
    rewards: dict[str, float | int] = {}
    if runner_failed:
        error = (Reason.VERIFIER_FAILED, HarborError.RUNTIME, _tail(result.output))
    elif result.timed_out:
        error = (Reason.VERIFIER_TIMEOUT, HarborError.VERIFIER_TIMEOUT,
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
            reason = {"RewardFileMissing": Reason.REWARD_FILE_MISSING,
                      "RewardFileEmpty": Reason.REWARD_FILE_EMPTY}.get(
                type(e).__name__, Reason.REWARD_FILE_INVALID)
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
    step.rewards = dict(rewards)
    step.state = "Succeeded"  # an agent error stays on record; the reward still counts
    summary = ", ".join(f"{k}={v:g}" for k, v in step.rewards.items())
    outcome.events.append(("Normal", Reason.STEP_REWARDED, f"step {step.name}: {summary}"))
    threshold = plan.step(step.name).min_reward
    below = below_min_reward(step.rewards, threshold)
    if below is not None:
        step.message = f"stopped: {below}"
        outcome.events.append(("Warning", Reason.MIN_REWARD_NOT_MET, f"step {step.name}: {below}; "
                                                              "skipping the remaining steps"))
        return _end_multi_step(status, plan, now, outcome, f"; stopped after step {step.name}: "
                                                           f"{below}")
    _advance(status)
    if current_record(status) is None:
        return _end_multi_step(status, plan, now, outcome)
    return status, outcome


def _abort_step(status: TrialStatus, plan: TrialPlan, step: StepRecord | None, error_type: str,
                message: str, now: datetime, outcome: Outcome) -> tuple[TrialStatus, Outcome]:
    """A step failed without a verifier result: the remaining steps are skipped (docs/harbor.md
    §b.4)."""
    assert step is not None
    step.state = "Failed"
    step.error = step.error or TrialError(type=error_type, message=message)
    step.message = f"Step '{step.name}' failed, aborting remaining steps"
    outcome.events.append(("Warning", Reason.STEP_FAILED, f"step {step.name}: {message}"))
    return _end_multi_step(status, plan, now, outcome,
                           f"; stopped after step {step.name} failed")


def aggregate(status: TrialStatus, strategy: str) -> dict[str, float] | None:
    """Harbor's multi-step reward: `final` = the last executed step's result; `mean` = per-key
    mean over the steps with a result, a missing key counting as 0."""
    executed = [s.rewards for s in status.steps if s.state not in ("Pending", "Skipped")]
    return aggregate_steps(strategy, executed)


def _end_multi_step(status: TrialStatus, plan: TrialPlan, now: datetime, outcome: Outcome,
                    note: str = "") -> tuple[TrialStatus, Outcome]:
    _skip_rest(status)
    rewards = aggregate(status, plan.reward_strategy or "mean")
    if rewards is None:
        failed = next((s for s in status.steps if s.error is not None), None)
        message = (f"no step produced a reward{note}" if failed is None or failed.error is None
                   else f"step {failed.name}: {failed.error.message}")
        return _fail_into(status, outcome, Reason.STEP_FAILED, message, now,
                          failed.error.type if failed and failed.error else None)
    outcome.events.extend(_complete(status, rewards, now, note).events)
    return status, outcome


def _fail_into(status: TrialStatus, outcome: Outcome, reason: Reason, message: str,
               now: datetime, error_type: str | None = None) -> tuple[TrialStatus, Outcome]:
    status, failed = fail(status, reason, message, now, error_type)
    outcome.events.extend(failed.events)
    return status, outcome


def _advance(status: TrialStatus) -> None:
    nxt = next((r for r in status.phases if r.state == "Pending"), None)
    if nxt is not None:
        nxt.state = "Running"


def _logs(spec: PhaseSpec, result: PhaseStatus, plan: TrialPlan) -> dict[str, str]:
    """The phase's log files for the logs ConfigMap: its log, and a verifier's reports when
    the test script wrote them (a JSON report only whole)."""
    from shipyard.render.pod import truncate_log

    logs = {}
    notes = result.runner_notes  # what the runner ended after the phase, with its log
    for i, path in enumerate(spec.log_files):
        if path.endswith("/"):
            logs.update(_folder_logs(spec, result, path, plan.report_key_bytes))
            continue
        f = result.files.get(path)
        if i == 0:
            if f is not None:
                logs[log_key(spec)] = truncate_log(f.text(), f.size,
                                                   max(1, plan.log_key_bytes - len(notes)))
            continue
        if f is None or (path.endswith(".json") and (f.truncated
                                                     or f.size > plan.report_key_bytes)):
            continue
        logs[log_file_key(spec, path)] = truncate_log(f.text(), f.size, plan.report_key_bytes)
    if notes and spec.log_files:
        logs[log_key(spec)] = logs.get(log_key(spec), "") + notes
    return logs


MIN_FOLDER_FILE_BYTES = 256


def _folder_logs(spec: PhaseSpec, result: PhaseStatus, folder: str, budget: int
                 ) -> dict[str, str]:
    """The other files the runner gave of a collected folder (the verifier's), in name order,
    within one report's `budget` in all: text files whole (a log's tail past the budget, a
    JSON file not at all), each under `folder_file_key`. Binary files and names no ConfigMap
    key can hold are left out."""
    from shipyard.render.pod import truncate_log

    kept: dict[str, str] = {}
    room = budget
    for path in sorted(p for p in result.files if p.startswith(folder)
                       and p not in spec.collect):
        f = result.files[path]
        key = folder_file_key(spec, path[len(folder):])
        if not key or room <= MIN_FOLDER_FILE_BYTES + MARKER_ROOM or b"\0" in f.content:
            continue
        text = f.text()
        if f.truncated or len(text.encode()) > room:
            if path.endswith(".json"):
                continue
            text = truncate_log(text, f.size, room - MARKER_ROOM)
        kept[key] = text
        room -= len(text.encode())
    return kept


def _tail(text: str, limit: int = 2000) -> str:
    return text.strip()[-limit:]


# ---------------------------------------------------------------- deciding


def next_action(status: TrialStatus, plan: TrialPlan, pods: Pods, now: datetime,
                retries: int = 0, task_code_sent: frozenset[str] = frozenset()
                ) -> tuple[Action, TrialStatus | None, Outcome | None]:
    """The next thing to do. When the observation alone decides a failure (or a retry), the
    new status and its outcome come back with the action that follows. `task_code_sent`: the
    pods into which this driver sent a launch of task code (whether or not it came back)."""
    if is_finished(status):
        return Done(), None, None
    if terminal_condition(status) is not None:
        return Finish(), None, None
    rec = current_record(status)
    if rec is None:  # every phase done without a terminal condition: cannot happen
        new, out = fail(status, Reason.VERIFIER_FAILED,
                        "the trial ended without a verifier result", now)
        return Finish(), new, out
    retry_at = parse_time(status.retry_at)
    if retry_at is not None and status.pod_name is None and now < retry_at:
        return Wait(retry_at), None, None
    spec = plan.phase(rec.id or rec.name)
    # A separate verifier's pod is stopped once its verification is over.
    if status.verifier_pod_name and spec.pod != Role.VERIFIER:
        return StopPod(Role.VERIFIER), None, None
    # The agent environment is stopped before the last step's separate verifier pod is
    # created (as Harbor stops it before the verifier's environment starts): the verifier
    # gets the node's resources the environment held; its artifacts are kept first.
    if (plan.release_environment and spec.name == "verifier-environment"
            and spec.pod == Role.VERIFIER and status.pod_name
            and status.verifier_pod_name is None and _last_step(plan, spec.step)):
        return StopPod(Role.ENV, keep_artifacts=True), None, None
    if (spec.name == "verifier" and spec.pod == Role.VERIFIER and status.pod_name
            and _last_step(plan, spec.step)):
        return StopPod(Role.ENV, keep_artifacts=True), None, None
    if pod_name(status, spec.pod) is None:
        if spec.pod == Role.ENV and status.phases[0].state != "Running":
            new, out = fail(status, Reason.POD_LOST, "the environment pod is gone", now)
            return Finish(), new, out
        return CreatePod(spec.pod, spec.step), None, None
    pod = pods.of(spec.pod)
    lost = _warm_pod_lost(status, spec, rec, pod)
    if lost is not None:
        return CreatePod(spec.pod, spec.step), *lost
    first = spec.name in ("environment", "verifier-environment")
    failure = _pod_failure(status, plan, spec.pod, pod, rec, first, now,
                           pod_name(status, spec.pod) in task_code_sent)
    if failure is not None:
        new, out = infrastructure_failure(status, plan, retries, failure[0], failure[1], now)
        if terminal_condition(new) is None:
            return Wait(parse_time(new.retry_at)), new, out
        return Finish(), new, out
    if first and not rec.launched and _waits_for_capacity(plan, spec.pod, rec, pod):
        scheduler = _unschedulable_text(plan, spec.pod, rec, pod.unschedulable or "")
        text = (f"waiting for capacity: {scheduler} It fits the largest node: it waits for "
                "other pods to end.")
        if pod.passing_taints:
            text += (f" A node is held only by the taints of its conditions "
                     f"({', '.join(pod.passing_taints)}): it waits for them to pass.")
        waiting = waiting_for_capacity(status, text, now)
        return (Wait(now + CAPACITY_LOOK), *(waiting or (None, None)))
    if not rec.launched and (pod.ready or pod.running):
        # A launch needs only a running container: the runner itself refuses to start a
        # phase twice, so the readiness probe's first pass is not waited for. The phase's
        # network policy is in force first.
        return _network_switch(plan, spec, pod, now) or Launch(spec.id), None, None
    if not pod.ready:
        return Wait(wake_deadline(status, plan, pods, now)), None, None
    return ReadResult(spec.id, 0 if pod.probed else RESULT_WAIT_SEC), None, None


def _network_switch(plan: TrialPlan, spec: PhaseSpec, pod: PodObservation, now: datetime
                    ) -> SetNetwork | Wait | None:
    """Before a phase: its policy on its pod, applied long enough to hold (a restricted plan
    only; under `public` throughout there is nothing to switch or wait for)."""
    if plan.network is None or spec.network is None or not plan.network.restricted:
        return None
    if pod.network != spec.network:
        return SetNetwork(spec.pod, spec.network, f"{spec.id} phase")
    if spec.fence is None and pod.network_settled_at is not None \
            and now < pod.network_settled_at:  # a fenced phase proves its policy itself
        return Wait(pod.network_settled_at)
    return None


OWN_PHASES = ("environment", "verifier-environment")
"""Phases that run no task code (Shipyard's own preparation of a pod)."""
TASK_FAILURE_REASONS = {
    "environment": Reason.ENVIRONMENT_SETUP_FAILED, "setup": Reason.ENVIRONMENT_SETUP_FAILED,
    "healthcheck": Reason.HEALTHCHECK_FAILED, "agent": Reason.AGENT_FAILED,
}


def task_code_ran(status: TrialStatus, plan: TrialPlan, role: Role, current: PhaseRecord,
                  sent: bool = False) -> PhaseRecord | None:
    """The last phase of task code (agent, setup, healthcheck, collect hooks, verifier)
    launched in the current pod of `role` (for a verifier pod: of the current step), if any.
    With `sent` (a launch of task code was sent into the pod, its answer not recorded: the
    container may have ended during it, e.g. a chained agent phase), the first phase of task
    code from the current one on."""
    found = None
    for r in status.phases:
        spec = plan.phase(r.id or r.name)
        if (r.launched and spec.pod == role and r.name not in OWN_PHASES
                and (role != Role.VERIFIER or r.step == current.step)):
            found = r
    if found is None and sent:
        ids = [r.id or r.name for r in status.phases]
        for r in status.phases[ids.index(current.id or current.name):]:
            if plan.phase(r.id or r.name).pod == role and r.name not in OWN_PHASES:
                return r
    return found


def task_failure(ran: PhaseRecord, what: str) -> tuple[Reason, str]:
    """A pod broken by what ran in it (its container ended, its runner stopped answering):
    the failure of the phase's code, never a retried infrastructure failure (a losing agent
    must not get a free re-roll by killing its container)."""
    where = f"{ran.step}/{ran.name}" if ran.step else ran.name
    return (TASK_FAILURE_REASONS.get(ran.name, Reason.VERIFIER_FAILED),
            f"{what}, after the {where} phase's code ran in it: that code's failure, not "
            "retried")


def unanswered_execs(status: TrialStatus, plan: TrialPlan, retries: int, role: Role,
                     pod: PodObservation, now: datetime, runner_ran: bool = False
                     ) -> tuple[TrialStatus, Outcome] | None:
    """The runner in the pod of `role` answered none of the execs: when the pod is gone or
    lost, None (look again: the pod failure decides); else it still looks alive but does not
    answer, an infrastructure failure (retried while attempts remain), unless the runner did
    run (`runner_ran`: it exited non-zero or answered what cannot be read) after task code
    ran in the pod (which can break the runner's programs): then that code's failure."""
    if not pod.exists or pod.lost:
        return None
    rec = current_record(status)
    ran = task_code_ran(status, plan, role, rec) if runner_ran and rec is not None else None
    if ran is not None:
        reason, message = task_failure(
            ran, f"the runner in pod {pod_name(status, role)} answered no exec usably")
        return infrastructure_failure(status, plan, retries, reason, message, now)
    return infrastructure_failure(status, plan, retries, Reason.POD_LOST,
                                  f"the pod {pod_name(status, role)} stopped answering execs",
                                  now)


@dataclass(frozen=True)
class WaitForTask:
    """The Task does not exist yet: keep waiting, looking again in `poll_sec`."""

    status: TrialStatus
    outcome: Outcome
    poll_sec: float


TASK_POLL_SEC = 2.0


def task_missing(status: TrialStatus, message: str, created_at: datetime | None,
                 now: datetime, wait_sec: float, cancelling: bool
                 ) -> tuple[Reason, str] | WaitForTask:
    """The trial's Task is not found: wait for it (Trial and Task may be applied in any order;
    polled every 2 s, a bounded number of requests), until the wait is over (TaskNotFound) or
    the trial is cancelled; the failure comes back as (reason, message)."""
    deadline = task_wait_deadline(created_at, now, wait_sec)
    if now >= deadline:
        return Reason.TASK_NOT_FOUND, f"{message} (waited {wait_sec:.0f}s for it to be created)"
    if cancelling:
        return (Reason.CANCELLED,
                f"cancelled by the {CANCEL_ANNOTATION} annotation while waiting: {message}")
    new, outcome = waiting_for_task(status, message, deadline, now)
    return WaitForTask(new, outcome, min(TASK_POLL_SEC, (deadline - now).total_seconds()))


def starting_pod(status: TrialStatus) -> bool:
    """The current phase is the environment pod's first (`environment`), not launched: the
    trial waits for its environment pod to start."""
    rec = current_record(status)
    return rec is not None and not rec.launched and rec.name == "environment"


def chained_phases(plan: TrialPlan, phase_id: str, current_runner: bool = True,
                   fold_verifier: bool = False) -> list[str]:
    """The phases one exec launches: `phase_id`, and when it is the environment pod's own
    preparation (Shipyard's `environment` phase, no task code) the phase after it, started
    by the runner as soon as it ends with exit code 0 (`runner chain`). Not under a
    restricted network (each phase then needs its own policy label first), nor into a phase
    that needs Secrets. Nor in a pod whose runner is not the current one (made by an older
    operator before an upgrade): `launch` is what every runner understands.

    Past a phase that runs task code only with `fold_verifier` (`folds_verifier`: the pod's
    runner is the current Go runner, not dumpable, and this is the first exec of task code
    into the pod, so no process of task code can race it): a single-step trial's agent phase
    and then its shared verifier, started by the runner once the agent's phase ended with
    exit code 0 within the launch's grace and its processes were swept, exactly where the
    operator would launch it (`_on_result` goes on to the verifier after any agent phase of
    a single step that exits 0). The verifier's bundle and key are held by the runner
    meanwhile, out of reach of the agent (root without CAP_SYS_PTRACE); an agent that kills
    the runner only costs the verifier an exec of its own, as without the fold."""
    spec = plan.phase(phase_id)
    if (plan.network is not None and plan.network.restricted) or not current_runner:
        return [phase_id]
    ids = [p.id for p in plan.phases]
    chain = [phase_id]
    if spec.name == "environment":
        at = ids.index(phase_id)
        after = plan.phases[at + 1] if at + 1 < len(ids) else None
        # A phase that needs Secrets gets them just before its own launch (each launch clears
        # the other phases' secret drops).
        if after is None or after.pod != spec.pod or after.secrets:
            return chain
        chain.append(after.id)
    last = plan.phase(chain[-1])
    # Not past a step whose sidecars are collected from first (`needs_sidecars`).
    if fold_verifier and last.name == "agent" and len(plan.steps) == 1 \
            and not plan.steps[0].sidecar_evidence:
        at = ids.index(last.id)
        after = plan.phases[at + 1] if at + 1 < len(ids) else None
        if (after is not None and after.name == "verifier" and after.pod == last.pod
                and not after.secrets):
            chain.append(after.id)
    return chain


def needs_sidecars(plan: TrialPlan, phase_id: str) -> bool:
    """A shared verifier whose step collects from docker-compose sidecars (their collect
    hooks, their artifacts for the export): done by the operator before its launch, as
    Harbor collects before verification."""
    spec = plan.phase(phase_id)
    return (spec.name == "verifier" and spec.pod == Role.ENV
            and bool(plan.step(spec.step).sidecar_evidence))


def folds_verifier(go_runner: str | None, current_go_runner: str, pod: str,
                   task_code_sent: Sequence[str] | None) -> bool:
    """`chained_phases` may chain the verifier after the agent: the pod's runner is the
    current Go runner (not dumpable, and it reads a key given as `-` from its upload) and no
    launch of task code was sent into the pod before (on record before it is sent: a retried
    or restarted exec never folds, since the agent may then already run and race it)."""
    return (bool(go_runner) and go_runner == current_go_runner
            and pod not in (task_code_sent or []))


def _last_step(plan: TrialPlan, step: str | None) -> bool:
    return plan.steps[-1].name == step


def _pod_failure(status: TrialStatus, plan: TrialPlan, role: Role, pod: PodObservation,
                 rec: PhaseRecord, first: bool, now: datetime, sent: bool = False
                 ) -> tuple[Reason, str] | None:
    what = Role(role).noun
    if not pod.exists:
        return Reason.POD_LOST, f"the {what} pod {pod_name(status, role)} was deleted"
    if pod.fence_failure:  # before anything of the task's image ran
        return Reason.NETWORK_POLICY_UNENFORCEABLE, f"the {what} pod: {pod.fence_failure}"
    if pod.service_failure:  # a one-shot service's failure also ends the pod (Failed)
        return Reason.ENVIRONMENT_SETUP_FAILED, pod.service_failure
    if pod.lost:
        reason = Reason.OOM_KILLED if "(OOMKilled," in pod.lost else Reason.POD_LOST
        ran = task_code_ran(status, plan, role, rec, sent) if pod.container_exit else None
        if reason == Reason.POD_LOST and ran is not None:
            return task_failure(ran, pod.lost.replace("environment pod", f"{what} pod"))
        return reason, pod.lost.replace("environment pod", f"{what} pod")
    if pod.image_pull_error:
        if pod.image_pull_permanent:
            return Reason.IMAGE_PULL_FAILED, pod.image_pull_error
        grace = plan.image_pull_grace_sec  # else the kubelet's retries may still pull it
        if pod.created_at and now - pod.created_at >= timedelta(seconds=grace):
            return (Reason.IMAGE_PULL_FAILED,
                    f"{pod.image_pull_error} (still failing after {grace:g} s)")
    if pod.config_error:
        return Reason.POD_LOST, pod.config_error
    if first and not rec.launched and not (pod.ready or pod.running):
        # A running pod is launched into at once (`next_action`): Ready is not waited for (a
        # pod with a probe container is Ready only once a phase has ended).
        if _waits_for_capacity(plan, role, rec, pod):
            return None  # a wait (`next_action`), however long: other trials will end
        if pod.unschedulable and pod.created_at and now - pod.created_at >= _grace(plan):
            return Reason.UNSCHEDULABLE, _unschedulable_text(plan, role, rec, pod.unschedulable)
        # The start timeout counts from when the pod got a node (a wait for capacity first).
        started = pod.scheduled_at or pod.created_at or parse_time(rec.started_at)
        if started and now - started >= timedelta(seconds=plan.start_timeout_sec):
            return (Reason.ENVIRONMENT_START_TIMEOUT,
                    f"Environment start timed out after {plan.start_timeout_sec:g} seconds")
    return None


def _pod_plan(plan: TrialPlan, role: Role, rec: PhaseRecord) -> PodPlan | None:
    if role == Role.ENV:
        return plan.environment
    return plan.step(plan.phase(rec.id or rec.name).step).verifier_pod


def _waits_for_capacity(plan: TrialPlan, role: Role, rec: PhaseRecord,
                        pod: PodObservation) -> bool:
    """The pod is Unschedulable only because the nodes are full now, and it fits the largest
    node: capacity will free up (other trials end), so it waits rather than fails."""
    pod_plan = _pod_plan(plan, role, rec)
    if not pod.unschedulable or pod_plan is None or pod_plan.accelerators.requested:
        return False
    fits = capacity.fits_some(pod_requests_of(plan, pod_plan), plan.nodes)
    return bool(fits) and capacity.waits_for_capacity(pod.unschedulable,
                                                      bool(pod.passing_taints))


def _unschedulable_text(plan: TrialPlan, role: Role, rec: PhaseRecord, scheduler: str) -> str:
    pod_plan = _pod_plan(plan, role, rec)
    if pod_plan is None:
        return scheduler
    return capacity.unschedulable_message(scheduler, f"{Role(role).noun} pod",
                                          pod_requests_of(plan, pod_plan), pod_plan.cpus)


def waiting_for_capacity(status: TrialStatus, message: str,
                         now: datetime) -> tuple[TrialStatus, Outcome] | None:
    """Pending while the nodes are full, or a ResourceQuota of the namespace is (None when
    that is on record already)."""
    if any(c.type == "Running" and c.reason == Reason.WAITING_FOR_CAPACITY
           for c in status.conditions):
        return None
    status = status.model_copy(deep=True)
    _set_condition(status, "Running", "False", Reason.WAITING_FOR_CAPACITY, message, now)
    return status, Outcome(events=[("Normal", Reason.WAITING_FOR_CAPACITY, message)])


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
        started = pod.created_at or parse_time(rec.started_at)
        if started:
            candidates.append(started + timedelta(seconds=plan.start_timeout_sec))
        if pod.unschedulable and pod.created_at:
            candidates.append(pod.created_at + _grace(plan))
        if pod.image_pull_error and pod.created_at:
            candidates.append(pod.created_at + timedelta(seconds=plan.image_pull_grace_sec))
        return min(candidates) if candidates else None
    started = parse_time(rec.started_at)
    if spec.timeout_sec is not None and started is not None:
        return started + timedelta(seconds=spec.timeout_sec) + TIMEOUT_MARGIN
    # No timeout: the readiness flip wakes us; a slow look now and then guards against a
    # missed flip at a cost that hardly grows with the phase's length.
    return (started or now) + SAFETY_LOOK
