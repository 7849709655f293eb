"""The trial driver's loop, pure: `decide(state, now)` → the next executor action (and the new
state), `absorb(state, observation)` → the state once an executor has carried it out.

`trial_machine` decides what the trial does next (create a pod, launch a phase, read a result,
finish); this module turns that into the single cluster calls an executor makes (`Observe`,
`CreatePodObject`, `RunExec`, `Flush`, `WaitWake`, …) and holds what the driver remembers
between them: the status written and the one ahead of it, the Events and logs not yet written,
the exec in progress (`exec_policy`: retries, backoff, Secrets), the pods' network labels, and
the follow-up actions a decision queued (`todo`). Each action has one executor method; each
returns one observation (`ExecReply`, `PodsSeen`, `PodCreated`, `NetworkApplied`, …). A new
kind of work (e.g. claiming a warm pod) is one more action, observation and executor method.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from shipyard.api.conventions import event_name, iso
from shipyard.api.models import TrialStatus
from shipyard.api.reasons import Reason
from shipyard.plan.phases import TrialPlan, VerifyScript, main_artifacts
from shipyard.reconcile import exec_policy, write_policy
from shipyard.reconcile import trial_machine as machine
from shipyard.reconcile.admission import Evicted
from shipyard.reconcile.pod_observation import PodObservation
from shipyard.reconcile.runner_output import PackedArtifacts, PhaseStatus
from shipyard.taskformat import ArtifactConfig

ARTIFACTS_OVER_LIMIT = 5
"""The runner's exit code for a packed artifacts tar over the limit (`artifacts LIMIT`)."""
NO_ARTIFACTS = 4
"""The runner's exit code when no artifacts tar was packed (`artifacts LIMIT`)."""
KEEP_ARTIFACTS_TRIES = 6
"""Reads of the environment pod's artifacts (before it stops) whose exec did not run, after
which the verifier gets none (said in an Event) rather than the trial waiting forever."""

PendingEvent = tuple[str, str, str, str]  # name, type, reason, message

# ---------------------------------------------------------------- actions (executor calls)


@dataclass(frozen=True)
class Observe:
    """The trial's pods: from the watch when it has told, else (or `force`) one GET each."""

    force: bool = False


@dataclass(frozen=True)
class Flush:
    """Write the logs ConfigMap (new logs), the Events, then the status (when changed)."""

    events: tuple[PendingEvent, ...]
    logs: Mapping[str, str]
    logs_known: bool  # the logs ConfigMap is on record already
    status: TrialStatus | None  # None: unchanged


@dataclass(frozen=True)
class WaitWake:
    """Until a pod or the trial changes, or `timeout` seconds (None: no timeout)."""

    timeout: float | None


@dataclass(frozen=True)
class Pause:
    """Sleep `seconds` (a backoff no event shortens)."""

    seconds: float


@dataclass(frozen=True)
class Admit:
    """Kueue admits the trial's pods (the gate waits); `Admitted(False)`: decide again."""


@dataclass(frozen=True)
class Preempt:
    evicted: Evicted


@dataclass(frozen=True)
class ApplyNetwork:
    """The trial's own NetworkPolicies (`own`), else the namespace's shared baseline."""

    own: bool


@dataclass(frozen=True)
class CreatePodObject:
    role: machine.Role
    step: str | None


@dataclass(frozen=True)
class LabelPod:
    pod: str
    key: str
    why: str


@dataclass(frozen=True)
class DeletePod:
    pod: str


@dataclass(frozen=True)
class PutSecrets:
    pod: str
    phase: str


@dataclass(frozen=True)
class RunExec:
    """`launch` (of `phases`, chained when several) or `result` (with `wait`) in `pod`;
    `artifacts`: a finished phase's reply also carries the packed artifacts tar
    (`asks_artifacts`)."""

    command: str
    pod: str
    phases: tuple[str, ...]
    wait: int = 0
    artifacts: bool = False
    folded: bool = False
    """The verifier chained after the agent (`machine.folds_verifier`): every phase's launch
    key goes in the upload, not on the command line."""


@dataclass(frozen=True)
class StopPhase:
    pod: str
    phase: str


@dataclass(frozen=True)
class FetchPod:
    pod: str


@dataclass(frozen=True)
class ReadArtifacts:
    pod: str


@dataclass(frozen=True)
class SaveArtifacts:
    """Keep the packed artifacts (`data`) with the step's compose sidecar evidence."""

    pod: str
    data: bytes
    step: str | None
    refused: str | None = None  # why none were read (over the limit): kept for the export


@dataclass(frozen=True)
class KeepArtifacts:
    """At the trial's end, before its outcome is written: the artifacts its environment pod
    packed (a shared verifier's), read and kept for the export, when they were not kept
    before the pod stopped. Best effort, as Harbor's collection. `packed`: the tar (or its
    refusal) as the reply that saw the verifier end carried it, kept without an exec."""

    pod: str
    step: str | None
    packed: PackedArtifacts | None = None
    sidecars: bytes = b""
    """The step's sidecar evidence collected before its shared verifier (`CollectSidecars`),
    kept with what the pod packed."""
    recover: tuple[ArtifactConfig, ...] = ()
    """The trial ended before its verification packed them: the runner packs these first
    (Harbor collects a failed trial's artifacts best effort)."""


@dataclass(frozen=True)
class CollectSidecars:
    """Before a shared verifier: its step's sidecar collect hooks run in their containers and
    their artifacts copied out (best effort), held for the export (`SidecarsCollected`)."""

    pod: str
    step: str | None
    phase: str


@dataclass(frozen=True)
class ServiceLogs:
    pod: str


@dataclass(frozen=True)
class RemovePods:
    pods: tuple[str, ...]


@dataclass(frozen=True)
class ReleaseWorkloads:
    pass


@dataclass(frozen=True)
class Crash:
    """A transient failure: the driver raises, its task is started again with a backoff."""

    message: str


Action = (Observe | Flush | WaitWake | Pause | Admit | Preempt | ApplyNetwork | CreatePodObject
          | LabelPod | DeletePod | PutSecrets | RunExec | StopPhase | FetchPod | ReadArtifacts
          | SaveArtifacts | KeepArtifacts | CollectSidecars | ServiceLogs | RemovePods
          | ReleaseWorkloads | Crash | machine.Done)


@dataclass(frozen=True)
class _Finalize:
    """(Queued, pure) the trial's end in its status."""


@dataclass(frozen=True)
class _PodStopped:
    role: machine.Role


# ---------------------------------------------------------------- observations


@dataclass(frozen=True)
class Nothing:
    """An action that observes nothing (a write, a delete, a pause)."""


@dataclass(frozen=True)
class Written:
    """A `Flush` was carried out."""

    flush: Flush


@dataclass(frozen=True)
class TrialSeen:
    """The Trial's cancel annotation and its Kueue eviction, as the driver sees them now."""

    cancel_requested: bool
    evicted: Evicted | None = None


@dataclass(frozen=True)
class PodsSeen:
    env: PodObservation
    verifier: PodObservation


@dataclass(frozen=True)
class PodFetched:
    pod: PodObservation


@dataclass(frozen=True)
class Woken:
    woken: bool


@dataclass(frozen=True)
class Admitted:
    admitted: bool


@dataclass(frozen=True)
class NetworkApplied:
    fqdn_backend: str = "none"


@dataclass(frozen=True)
class NetworkRefused:
    code: int | None
    reason: str
    body: str
    server_error: bool


@dataclass(frozen=True)
class PodRefused:
    """The apiserver refused to create the pod (its admission: a ResourceQuota, a
    LimitRange, Pod Security, a webhook). `quota_full`: refused only because a ResourceQuota
    is used up now (other pods will end), so the trial waits and tries again."""

    role: machine.Role
    code: int
    message: str
    quota_full: bool


QUOTA_RETRY_SEC = 5.0
"""How often a trial whose pod a full ResourceQuota refused tries again (a pod's end in the
namespace wakes it sooner)."""


@dataclass(frozen=True)
class PodCreated:
    role: machine.Role
    name: str
    image: str
    network: str | None  # its network policy label
    warm: bool = False  # a warm pod claimed (docs/warm-pods.md), not a pod created


@dataclass(frozen=True)
class Labelled:
    pod: str
    key: str
    why: str
    ok: bool  # False: the pod is gone


@dataclass(frozen=True)
class ExecReply:
    """A runner exec's answer (`kube.runner.Reply` in plain fields); `seconds` it took;
    `events` a launch's bundle raised (artifacts left out)."""

    kind: str  # "exec" (launch, result), "secrets", "stop", "artifacts"
    state: str
    text: str = ""
    error: str = ""
    exit_code: int | None = None
    stdout: bytes = b""
    seconds: float = 0.0
    events: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class ServiceLogsRead:
    logs: Mapping[str, str]


@dataclass(frozen=True)
class SidecarsCollected:
    phase: str
    step: str | None
    data: bytes  # the sidecars' artifacts as one tar (empty: none)


Observation = (Nothing | Written | TrialSeen | PodsSeen | PodFetched | Woken | Admitted
               | NetworkApplied | NetworkRefused | PodCreated | PodRefused | Labelled
               | ExecReply | ServiceLogsRead | SidecarsCollected)

# ---------------------------------------------------------------- state


@dataclass(frozen=True)
class ExecProgress:
    """An exec being tried (`exec_policy`): its attempts so far and the last answer's meaning."""

    command: str
    phase: str
    phases: tuple[str, ...]
    pod: str
    wait: int = 0
    artifacts: bool = False
    folded: bool = False
    attempt: int = 0
    unavailable: int = 0
    runner_ran: bool = False
    secrets_ok: bool = False
    decided: object = None  # the last ExecDecision / SecretsDecision not acted on
    seconds: float = 0.0


@dataclass(frozen=True)
class LoopState:
    plan: TrialPlan | None
    status: TrialStatus
    saved: TrialStatus  # what the Trial's status says (status may be ahead)
    trial: str
    uid: str
    namespace: str
    logs_config_map: str
    task_name: str = ""
    agent_name: str = ""
    retries: int = 0
    keep: bool = False
    settle_sec: float = 0.0
    events: tuple[PendingEvent, ...] = ()
    logs: Mapping[str, str] = field(default_factory=dict)
    todo: tuple = ()
    notes: tuple[tuple[str, str], ...] = ()  # (level, line) for the operator's log
    pods: machine.Pods | None = None
    cancel_requested: bool = False
    evicted: Evicted | None = None
    network_ready: bool = False
    pod_network: Mapping[str, tuple[str | None, datetime | None]] = field(default_factory=dict)
    pod_runners: Mapping[str, str] = field(default_factory=dict)
    current_runner: str = ""
    pod_go_runners: Mapping[str, str] = field(default_factory=dict)
    current_go_runner: str = ""
    admission: bool = False  # Kueue admits its pods
    keep_tries: int = 0
    packed: tuple[str, PackedArtifacts] | None = None
    """(pod, its artifacts tar or refusal) as a verifier's reply carried them, until the
    trial's end keeps them (`KeepArtifacts`)."""
    exec: ExecProgress | None = None
    sidecars_done: frozenset[str] = frozenset()
    """Shared verifiers whose sidecar evidence was collected by this process (after a restart
    it is collected again: the hooks are best effort, as Harbor's)."""
    sidecars: Mapping[str | None, bytes] = field(default_factory=dict)
    """That evidence by step, until the step's artifacts are kept (`KeepArtifacts`)."""
    stopping: tuple[machine.Role, str] | None = None
    hold_rest: float | None = None  # a held write's wait: what is left of it after the hold
    holding: bool = False
    unsaved_since: datetime | None = None
    unsaved_exec_sec: float = 0.0
    unsaved_execs: int = 0


def refuse_task(status: TrialStatus, digest: str, settings_error: str | None
                ) -> tuple[Reason, str] | None:
    """A Task that changed while its trial ran (TaskInvalid), or operator settings that do not
    parse (TrialInvalid): the trial fails before it is planned."""
    if status.task_digest and status.task_digest != digest:
        return Reason.TASK_INVALID, "the Task changed while this trial ran"
    if settings_error:
        return Reason.TRIAL_INVALID, f"operator settings: {settings_error}"
    return None


def failed_early(status: TrialStatus, reason: Reason, message: str, now: datetime
                 ) -> tuple[TrialStatus, machine.Outcome]:
    """A failure before the trial started (no plan): its start is now too."""
    status, outcome = machine.fail(status, reason, message, now)
    if status.started_at is None:
        status.started_at = iso(now)
    return status, outcome


def cancelling(state: LoopState) -> bool:
    """Cancel requested and no outcome decided yet."""
    return state.cancel_requested and machine.terminal_condition(state.status) is None


def dirty(state: LoopState) -> bool:
    return state.status != state.saved or bool(state.logs) or bool(state.events)


def event(state: LoopState, type_: str, reason: str, message: str) -> LoopState:
    """An Event of the transition being taken (named from the status before it), posted with
    the next `Flush`; a Warning is also a line of the operator's log."""
    rec = machine.current_record(state.status)
    key = f"{state.status.attempt}/{rec and (rec.id or rec.name)}/{type_}/{reason}/{message}"
    ev = (event_name(state.trial, state.uid, key), type_, reason, message)
    return replace(state, events=(*state.events, ev))


def note(state: LoopState, level: str, line: str) -> LoopState:
    return replace(state, notes=(*state.notes, (level, line)))


def take(state: LoopState, status: TrialStatus, outcome: machine.Outcome | None = None
         ) -> LoopState:
    """A transition's new status and outcome: its Events and logs pending the next write; the
    pods it stops (after a write: what ran in them is on record first) and the pods it puts
    back under their baseline policy queued first."""
    todo: list = []
    if outcome is not None:
        if outcome.logs:
            state = replace(state, logs={**state.logs, **outcome.logs})
            status = status.model_copy(update={"logs_config_map": state.logs_config_map})
        for type_, reason, message in outcome.events:
            state = event(state, type_, reason, message)
            if type_ != "Normal":
                state = note(state, "warning", f"trial {state.namespace}/{state.trial}: "
                             f"{reason}: {message}")
        if outcome.delete_pods:
            todo += [FLUSH, *(DeletePod(n) for n in outcome.delete_pods)]
        for role, key in outcome.network:
            pod = machine.pod_name(status, role)
            if pod is not None and state.pod_network.get(pod, (None, None))[0] != key:
                todo.append(LabelPod(pod, key, "baseline"))
    return replace(state, status=machine.with_current_phase(status),
                   todo=(*todo, *state.todo))


FLUSH = Flush((), {}, False, None)  # queued: filled in with what is pending when it is taken


def flush_action(state: LoopState) -> Flush:
    return Flush(state.events, dict(state.logs),
                 state.saved.logs_config_map == state.logs_config_map,
                 state.status if state.status != state.saved else None)


def _queue(state: LoopState, *actions) -> LoopState:
    return replace(state, todo=(*actions, *state.todo))


# ---------------------------------------------------------------- decide


def decide(state: LoopState, now: datetime) -> tuple[Action, LoopState]:
    """The next executor action. Queued actions first; then a cancel, an eviction, the exec in
    progress; else what `trial_machine.next_action` says, as executor actions."""
    while state.todo:
        head, state = state.todo[0], replace(state, todo=state.todo[1:])
        if isinstance(head, _Finalize):
            state = _finalize(state, now)
        elif isinstance(head, _PodStopped):
            state = take(state, machine.on_pod_stopped(state.status, head.role))
        elif isinstance(head, _SleepMarker):
            assert state.plan is not None
            return _sleep(state, state.plan, now, None)
        elif head is FLUSH:
            return flush_action(state), state
        else:
            return head, state
    plan = state.plan
    assert plan is not None
    if state.pods is None:
        return Observe(), state
    if state.exec is not None:
        return _exec_step(state, plan, now)
    if cancelling(state):
        phase_id = machine.stoppable_phase(state.status)
        pod = machine.pod_name(state.status, plan.phase(phase_id).pod) if phase_id else None
        if phase_id and pod:
            return StopPhase(pod, phase_id), state
        return decide(take(state, *machine.cancel(state.status, now, plan, None)), now)
    if state.evicted is not None and machine.terminal_condition(state.status) is None:
        return Preempt(state.evicted), _queue(replace(state, evicted=None), Observe(True))
    action, decided, outcome = machine.next_action(
        state.status, plan, state.pods, now, state.retries,
        frozenset(state.status.task_code_sent or ()))
    if decided is not None:
        state = take(state, decided, outcome)
        if state.todo:  # its pods go (or change policy) first; then decide again
            return decide(state, now)
    return _machine_action(state, plan, action, now)


def _machine_action(state: LoopState, plan: TrialPlan, action: machine.Action, now: datetime
                    ) -> tuple[Action, LoopState]:
    match action:
        case machine.Done():
            return machine.Done(), state
        case machine.Finish():
            return decide(finishing(state), now)
        case machine.CreatePod(role=role, step=step):
            steps: list = []
            if not state.network_ready and plan.network is not None:
                steps.append(ApplyNetwork(plan.network.restricted
                                          or bool(plan.network.model_policies)))
            steps.append(CreatePodObject(role, step))
            if state.admission:
                steps.insert(0, Admit())
            return steps[0], _queue(state, *steps[1:])
        case machine.SetNetwork(role=role, key=key, why=why):
            name = machine.pod_name(state.status, role)
            if name is None:
                return Observe(True), state
            if state.pod_network.get(name, (None, None))[0] == key:
                return Observe(), state
            return LabelPod(name, key, why), state
        case machine.StopPod(role=role, keep_artifacts=keep_artifacts):
            name = machine.pod_name(state.status, role)
            if name and keep_artifacts:
                return ReadArtifacts(name), replace(state, stopping=(role, name))
            return decide(_queue(state, *_stop_pod(state, role, name)), now)
        case machine.Launch(phase=phase):
            pod = machine.pod_name(state.status, plan.phase(phase).pod)
            assert pod is not None
            if machine.needs_sidecars(plan, phase) and phase not in state.sidecars_done:
                return CollectSidecars(pod, plan.phase(phase).step, phase), state
            runner = state.pod_runners.get(pod)
            current = runner is None or runner == state.current_runner
            fold = machine.folds_verifier(state.pod_go_runners.get(pod), state.current_go_runner,
                                          pod, state.status.task_code_sent)
            phases = tuple(machine.chained_phases(plan, phase, current, fold))
            folded = fold and len(phases) > 1 and plan.phase(phases[-1]).name == "verifier"
            asks = (phases == (phase,) or folded) and asks_artifacts(plan, phases[-1])
            return _exec_step(replace(state, exec=ExecProgress("launch", phase, phases, pod,
                                                               artifacts=asks, folded=folded)),
                              plan, now)
        case machine.ReadResult(phase=phase, wait_sec=wait):
            pod = machine.pod_name(state.status, plan.phase(phase).pod)
            assert pod is not None
            state = replace(state, exec=ExecProgress("result", phase, (phase,), pod, wait,
                                                     asks_artifacts(plan, phase)))
            if wait:  # the driver waits: what it knows is on record
                return flush_action(state), state
            return _exec_step(state, plan, now)
        case machine.Wait(until=until):
            return _sleep(state, plan, now, until)
    raise AssertionError(action)


def asks_artifacts(plan: TrialPlan, phase_id: str) -> bool:
    """A shared verifier (its prepare packs the artifacts, as root, before the tests run): the
    exec that sees it end brings the tar too, kept without an exec of its own: a single-step
    trial's at its end, each step's of a multi-step trial at once (the next step's pack
    replaces it). A separate verifier's collect phase packs them; they are read by an exec
    for its setup and at the pod's stop."""
    spec = plan.phase(phase_id)
    return (spec.pod == machine.Role.ENV and isinstance(spec.script, VerifyScript)
            and bool(spec.script.artifacts))


def _stop_pod(state: LoopState, role: machine.Role, name: str | None) -> list:
    steps: list = []
    if name and not state.keep:
        if role == machine.Role.ENV and _has_services(state):
            steps.append(ServiceLogs(name))
        steps += [FLUSH, DeletePod(name)]
    return [*steps, _PodStopped(role)]


def _has_services(state: LoopState) -> bool:
    plan = state.plan
    return plan is not None and plan.environment.compose is not None


def _unpacked(state: LoopState, plan: TrialPlan) -> tuple[ArtifactConfig, ...]:
    """What the environment pod would have packed, when the trial ended before any phase that
    packs (a shared verifier, a separate verifier's collect) and the pod is there."""
    if any(r.launched and r.name in ("verifier", "collect") for r in state.status.phases):
        return ()
    if state.pods is None or not state.pods.env.exists:
        return ()
    return main_artifacts(plan.steps[-1].artifacts)


def finishing(state: LoopState) -> LoopState:
    """The outcome and the end in one write (the outcome is on record before its pods go),
    then the pods go (unless kept) and the trial's Workloads."""
    steps: list = []
    if _has_services(state) and state.status.pod_name:
        steps.append(ServiceLogs(state.status.pod_name))
    plan = state.plan
    pod = state.status.pod_name
    # A multi-step trial's shared verifiers kept theirs as each ended (a pack left in the
    # pod is an earlier step's when the trial ended early: it is not the last step's).
    # A pod that never ran a phase packed nothing (it may never have started).
    if plan is not None and not plan.multi_step and pod \
            and any(r.launched for r in state.status.phases):
        packed = state.packed[1] if state.packed and state.packed[0] == pod else None
        step = plan.steps[-1].name
        steps.append(KeepArtifacts(pod, step, packed, state.sidecars.get(step, b""),
                                   _unpacked(state, plan)))
    steps += [_Finalize(), FLUSH]
    if not state.keep:
        steps.append(RemovePods(pod_names(state.status)))
    steps += [ReleaseWorkloads(), machine.Done()]
    return replace(state, todo=tuple(steps))


def pod_names(status: TrialStatus) -> tuple[str, ...]:
    return tuple(n for n in (status.pod_name, status.verifier_pod_name,
                             *[a.pod_name for a in status.attempts]) if n)


def _finalize(state: LoopState, now: datetime) -> LoopState:
    # No Event: the outcome's own (RewardRecorded, or the failure's reason) ends the story.
    state = take(state, machine.finished(state.status, now))
    cond = machine.terminal_condition(state.status)
    return note(state, "info", f"trial {state.namespace}/{state.trial}: {state.status.phase}"
                + (f" ({cond.reason}: {cond.message})" if cond is not None else ""))


def _sleep(state: LoopState, plan: TrialPlan, now: datetime, until: datetime | None
           ) -> tuple[Action, LoopState]:
    """Wait for a pod event or the next deadline, then look again. While the environment pod
    starts, a write is held back up to `START_WRITE_DELAY_SEC` (woken meanwhile: decide again,
    the write can wait)."""
    assert state.pods is not None
    deadline = machine.wake_deadline(state.status, plan, state.pods, now)
    if until is not None and (deadline is None or until < deadline):
        deadline = until  # e.g. a retry's backoff, which no pod event announces
    timeout = None if deadline is None else max(0.0, (deadline - now).total_seconds())
    held = write_policy.hold_start_write(dirty(state), machine.starting_pod(state.status),
                                         state.unsaved_since, now, timeout)
    if held is not None:
        short, since = held
        rest = None if timeout is None else max(0.0, timeout - short)
        return WaitWake(short), replace(state, unsaved_since=since, holding=True,
                                        hold_rest=rest)
    return flush_action(state), _queue(state, WaitWake(timeout), Observe())


def _exec_step(state: LoopState, plan: TrialPlan, now: datetime) -> tuple[Action, LoopState]:
    """The exec in progress: Secrets first (a launch that needs them), a write when the execs
    since the last one took long (or a launch of task code not on record yet), then the exec;
    its answer as `exec_policy` reads it."""
    ex = state.exec
    assert ex is not None
    d = ex.decided
    if d is None:
        if (ex.command == "launch" and not ex.secrets_ok and plan.phase(ex.phase).secrets
                and plan.secret_names):
            return PutSecrets(ex.pod, ex.phase), state
        if ex.command == "launch" and any(plan.phase(p).name not in machine.OWN_PHASES
                                          for p in ex.phases):
            sent = list(state.status.task_code_sent or [])
            if ex.pod not in sent:  # on record before it is sent (a restart knows it)
                state = replace(state, status=state.status.model_copy(
                    update={"task_code_sent": [*sent, ex.pod]}))
        if write_policy.write_before_exec(state.unsaved_exec_sec, state.unsaved_execs) or (
                (state.status.task_code_sent or []) != (state.saved.task_code_sent or [])):
            return flush_action(state), state  # a restart redoes at most two execs
        return RunExec(ex.command, ex.pod, ex.phases, ex.wait, ex.artifacts, ex.folded), state
    if isinstance(d, exec_policy.SecretsMissing):
        state = take(state, *machine.fail(state.status, Reason.SECRET_NOT_FOUND,
                                          exec_policy.missing_secrets_message(
                                              plan.secret_names, d.indexes, state.namespace),
                                          now))
        return decide(_queue(replace(state, exec=None), Observe(True)), now)
    if isinstance(d, exec_policy.Reobserve):
        return decide(_queue(replace(state, exec=None), Observe(True)), now)
    if isinstance(d, exec_policy.RetryExec | exec_policy.ExecsExhausted):
        state = note(state, "warning", f"exec {ex.command} {ex.phase} failed "
                     f"(attempt {ex.attempt + 1}): {d.error}")
        if isinstance(d, exec_policy.ExecsExhausted):
            return Pause(d.delay), _queue(state, FetchPod(ex.pod))
        if d.counts:
            ex = replace(ex, attempt=ex.attempt + 1)
        else:
            ex = replace(ex, unavailable=ex.unavailable + 1)
        if ex.folded:  # tried again, the agent may already run: the verifier waits its turn
            # (only a shared verifier's own exec asks for the artifacts it packs)
            ex = replace(ex, phases=ex.phases[:-1], folded=False, artifacts=False)
        return Pause(d.delay), replace(state, exec=replace(ex, decided=None, secrets_ok=False))
    assert isinstance(d, exec_policy.Answered)
    state = replace(state, exec=None)
    last = d.results[-1][1]
    if ex.artifacts and plan.multi_step and last.collected:
        # This step's, kept now (read by an exec of its own when the reply did not carry
        # them: runner.sh): the next step's verifier packs its own in their place.
        step = plan.phase(ex.phases[-1]).step
        state = _queue(state, KeepArtifacts(ex.pod, step, last.artifacts,
                                            state.sidecars.get(step, b"")))
    elif ex.artifacts and last.artifacts is not None:
        state = replace(state, packed=(ex.pod, last.artifacts))
    if ex.command == "launch":
        return decide(_launched(state, plan, d.results, now), now)
    result = d.results[0][1]
    if not result.done:
        # Waited for (a phase longer than the wait: ask again), else until the readiness
        # probe or a deadline says more.
        if ex.seconds < ex.wait / 2 or not ex.wait:
            return _sleep(state, plan, now, None)
        return Observe(), state
    return decide(take(state, *machine.on_result(state.status, plan, ex.phase, result, now)),
                  now)


def _launched(state: LoopState, plan: TrialPlan,
              results: tuple[tuple[str, PhaseStatus], ...], now: datetime) -> LoopState:
    for phase_id, result in results:
        state = take(state, *machine.on_launch(state.status, phase_id, result, now))
        if result.collected:  # it ended within the launch: its result too
            state = take(state, *machine.on_result(state.status, plan, phase_id, result, now))
    last_id, last = results[-1]
    if last.done:
        return state
    # A probed pod's readiness tells when it ends; else the next action is a waiting
    # `result` (`trial_machine.RESULT_WAIT_SEC`), at once.
    assert state.pods is not None
    then = _SLEEP if state.pods.of(plan.phase(last_id).pod).probed else Observe()
    return replace(state, todo=(*state.todo, then))


@dataclass(frozen=True)
class _SleepMarker:
    pass


_SLEEP = _SleepMarker()


# ---------------------------------------------------------------- absorb


def absorb(state: LoopState, seen: Observation, now: datetime) -> LoopState:
    """The state once an executor's action came back with `seen`."""
    match seen:
        case TrialSeen(cancel_requested=cancel, evicted=evicted):
            return replace(state, cancel_requested=cancel, evicted=evicted)
        case PodsSeen(env=env, verifier=verifier):
            runners, go_runners, found = dict(state.pod_runners), dict(state.pod_go_runners), []
            for name, obs in ((state.status.pod_name, env),
                              (state.status.verifier_pod_name, verifier)):
                if obs.runner is not None and name is not None:
                    runners[name] = obs.runner
                if obs.go_runner is not None and name is not None:
                    go_runners[name] = obs.go_runner
                if obs.exists and name in state.pod_network:
                    key, settled = state.pod_network[name]
                    obs = replace(obs, network=key, network_settled_at=settled)
                found.append(obs)
            return replace(state, pods=machine.Pods(env=found[0], verifier=found[1]),
                           pod_runners=runners, pod_go_runners=go_runners)
        case Woken(woken=woken):
            if not state.holding:
                return state
            state = replace(state, holding=False)
            if woken:  # the pod changed: decide again, the write can wait
                return _queue(state, Observe())
            return _queue(state, FLUSH, WaitWake(state.hold_rest), Observe())
        case Admitted(admitted=admitted):
            if not admitted:  # cancelled or evicted while queued: decide again
                return replace(state, todo=(Observe(),))
            return state
        case NetworkApplied():
            plan = state.plan
            assert plan is not None and plan.network is not None
            state = replace(state, network_ready=True)
            if plan.network.restricted or plan.network.model_policies:
                backend = seen.fqdn_backend
                state = event(state, "Normal", Reason.NETWORK_POLICIES,
                              f"network policies: deny-all plus "
                              f"{', '.join(plan.network.policies)}"
                              + (f" (FQDN backend {backend})" if backend != "none" else ""))
            for notice in plan.network.notices:
                state = event(state, "Warning", Reason.NETWORK_NOTICE, notice)
            return state
        case NetworkRefused():
            if seen.server_error:
                return replace(state, todo=(Crash(f"network policies: {seen.code} "
                                                  f"{seen.reason}"),))
            state = take(state, *machine.fail(
                state.status, Reason.NETWORK_POLICY_UNENFORCEABLE,
                f"could not create the trial's network policies ({seen.code} {seen.reason}): "
                f"{seen.body}", now))
            return replace(state, todo=(*[t for t in state.todo
                                          if not isinstance(t, CreatePodObject)], Observe()))
        case PodRefused(role=role, code=code, message=message, quota_full=True):
            text = (f"the {machine.Role(role).noun} pod waits for the namespace's quota: "
                    f"{message}")
            waiting = machine.waiting_for_capacity(state.status, text, now)
            if waiting is not None:
                state = take(state, *waiting)
            return _queue(state, FLUSH, WaitWake(QUOTA_RETRY_SEC), Observe(True))
        case PodRefused(role=role, code=code, message=message):
            state = take(state, *machine.fail(
                state.status, Reason.POD_REJECTED,
                f"the cluster refused the {machine.Role(role).noun} pod ({code}): {message}",
                now))
            return replace(state, todo=(*[t for t in state.todo
                                          if not isinstance(t, CreatePodObject)], Observe()))
        case PodCreated(role=role, name=name, image=image, network=key, warm=warm):
            # Its first phase waits for its policy itself where the plan has the fence.
            fenced = state.plan is not None and state.plan.network is not None \
                and state.plan.network.fence is not None
            settle = 0.0 if fenced else state.settle_sec
            state = replace(state, pod_network={
                **state.pod_network, name: (key, now + timedelta(seconds=settle))})
            state = take(state, machine.on_pod_created(state.status, role, name, now, warm))
            message = f"{machine.Role(role).noun} pod {name} created with image {image}"
            if warm:
                message = f"{machine.Role(role).noun} pod {name}: a warm pod of image {image}"
                state = event(state, "Normal", Reason.WARM_POD_CLAIMED, f"{message}, claimed")
            if role == machine.Role.ENV and state.status.attempt == 1:  # the first line: one
                state = event(state, "Normal", Reason.STARTED,
                              f"trial of task {state.task_name} with agent "
                              f"{state.agent_name}: {message}")
            else:
                state = event(state, "Normal", Reason.POD_CREATED, message)
            return _queue(state, Observe())
        case Labelled(pod=pod, key=key, why=why, ok=ok):
            if not ok:
                return replace(state, todo=(Observe(True),))
            state = replace(state, pod_network={
                **state.pod_network, pod: (key, now + timedelta(seconds=state.settle_sec))})
            state = note(state, "info", f"pod {pod}: network policy {key} ({why})")
            return state if state.todo else _queue(state, Observe())
        case PodFetched(pod=pod):
            ex = state.exec
            assert ex is not None and state.plan is not None
            role = state.plan.phase(ex.phase).pod
            failed = machine.unanswered_execs(state.status, state.plan, state.retries, role,
                                              pod, now, ex.runner_ran)
            state = replace(state, exec=None)
            if failed is not None:
                state = take(state, *failed)
            return _queue(state, Observe(True))
        case SidecarsCollected(phase=phase, step=step, data=data):
            state = replace(state, sidecars_done=state.sidecars_done | {phase},
                            sidecars={**state.sidecars, step: data})
            return _queue(state, Observe())
        case ServiceLogsRead(logs=logs):
            if logs:
                state = replace(state, logs={**state.logs, **logs})
            if state.logs:
                state = replace(state, status=state.status.model_copy(
                    update={"logs_config_map": state.logs_config_map}))
            return state
        case ExecReply():
            return _absorb_reply(state, seen, now)
        case Written(flush=written):
            return flushed(state, written)
        case Nothing():
            return state
    raise AssertionError(seen)


def flushed(state: LoopState, written: Flush) -> LoopState:
    """A `Flush` was written: what it carried is on record."""
    return replace(state, saved=written.status or state.saved,
                   events=state.events[len(written.events):],
                   logs={k: v for k, v in state.logs.items() if k not in written.logs},
                   unsaved_since=None, unsaved_exec_sec=0.0, unsaved_execs=0)


def _absorb_reply(state: LoopState, reply: ExecReply, now: datetime) -> LoopState:
    for type_, reason, message in reply.events:
        state = event(state, type_, reason, message)
    if reply.kind == "artifacts":
        return _kept_artifacts(state, reply)
    if reply.kind == "stop":
        assert state.plan is not None
        stopped, why = exec_policy.stopped_status(reply.state, reply.text, reply.error)
        if stopped is None:  # e.g. a pod started by an older runner, without `stop`
            phase_id = machine.stoppable_phase(state.status)
            state = note(state, "warning", f"could not stop phase {phase_id} of a cancelled "
                         f"trial: {why}")
        return take(state, *machine.cancel(state.status, now, state.plan,
                                           stopped))
    ex = state.exec
    assert ex is not None
    if reply.kind == "secrets":
        decided = exec_policy.after_put_secrets(reply.state, reply.text, reply.error,
                                                ex.attempt)
        if decided is None:
            return replace(state, exec=replace(ex, secrets_ok=True))
        return replace(state, exec=replace(ex, decided=decided))
    if not ex.wait:  # time spent waiting is no work a restart would redo
        state = replace(state, unsaved_exec_sec=state.unsaved_exec_sec + reply.seconds,
                        unsaved_execs=state.unsaved_execs + 1)
    decided = exec_policy.after_exec(reply.state, reply.text, reply.error, ex.attempt,
                                     ex.phases, ex.unavailable)
    return replace(state, exec=replace(ex, decided=decided, seconds=reply.seconds,
                                       runner_ran=reply.exit_code is not None))


def _kept_artifacts(state: LoopState, reply: ExecReply) -> LoopState:
    """The environment pod's packed artifacts read before it stops: kept (with the last
    step's sidecar evidence), then the pod stops; read again after a pause when the exec did
    not run (a bounded number of times); none for the verifier (an Event) when refused."""
    assert state.stopping is not None
    role, pod = state.stopping
    if reply.state == "gone":
        # Deleted already (an operator stopped between the delete and its record): what it
        # packed was kept before the delete.
        state = note(state, "info", f"{pod} is gone: its artifacts were kept before it was "
                     "deleted")
        return _queue(replace(state, stopping=None), *_stop_pod(state, role, pod))
    if reply.state != "ok" and reply.exit_code is None and state.keep_tries < KEEP_ARTIFACTS_TRIES:
        # The exec did not run: look again after a pause (never a busy loop of execs).
        tries = state.keep_tries + 1
        state = note(state, "warning", f"reading the artifacts of {pod} failed (try {tries}): "
                     f"{reply.error}")
        return _queue(replace(state, keep_tries=tries, stopping=None),
                      Pause(min(5.0, 1.0 + 2 * (tries - 1))), Observe(True))
    if reply.state != "ok":  # refused (over the limit), or unreadable however often tried
        state = note(state, "warning", f"no artifacts from {pod}: {reply.error}")
        state = event(state, "Warning", Reason.ARTIFACTS_SKIPPED,
                      f"no artifacts for the verifier: {reply.error}"[:1000])
    plan = state.plan
    step = plan.steps[-1].name if plan and plan.steps else None
    data = reply.stdout if reply.state == "ok" else b""
    refused = reply.error if reply.exit_code == ARTIFACTS_OVER_LIMIT else None
    return _queue(replace(state, stopping=None), SaveArtifacts(pod, data, step, refused),
                  *_stop_pod(state, role, pod))
