"""The trial driver's loop (`TrialDriver.loop`: decide, apply, absorb) against a fake of its own
executor interface (`runtime.trial_executor`: one method per `trial_loop` action, each
returning an observation): no cluster, no Kubernetes API."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

from shipyard.api.models import TrialStatus
from shipyard.api.reasons import Reason
from shipyard.plan.settings import OperatorSettings
from shipyard.reconcile import trial_loop as loop
from shipyard.reconcile import trial_machine as machine
from shipyard.reconcile.pod_observation import PodObservation, observe_pod
from shipyard.reconcile.runner_output import PackedArtifacts
from shipyard.runtime.trial_driver import TrialDriver, now
from tests.unit.helpers import T0, iso, plan_for, pod, runner_text, trial_body

LOG = logging.getLogger("test")
STARTED = iso(T0)


def running_line() -> str:
    return f"state=running started={STARTED}"


def done_line(reward: bool, tar: bytes | int | None = None) -> str:
    """A finished phase's result; `tar`: the artifacts it carries (bytes), or their size when
    refused (int), as the runner answers a `result` that asks for them."""
    text = f"state=done rc=0 timed_out=0 started={STARTED} finished={STARTED} result=1"
    files = {"output": b"ok"}
    if reward:
        files["/logs/verifier/reward.txt"] = b"1"
    if isinstance(tar, bytes):
        text += f" artifacts={len(tar)}"
        files["%artifacts"] = tar
    elif isinstance(tar, int):
        text += f" artifacts={tar}"
    return runner_text(text, files)


class FakeExecutor:
    """Pods in a dict; a runner that starts every launched phase and finishes it when its
    result is asked for. `fail_execs`: how many execs answer `failed` first (no runner)."""

    def __init__(self, fail_execs: int = 0, secrets_missing: bool = False,
                 tar: bytes | int | None = None, quick_verifier: bool = False,
                 go_runner: str | None = None) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []
        self.actions: list[loop.Action] = []
        self.tar, self.quick_verifier = tar, quick_verifier  # the runner's artifacts
        self.writes: list[TrialStatus | None] = []
        self.events: list[str] = []
        self.fail_execs = fail_execs
        self.status = TrialStatus()
        self.plan = self.gate = self.network = None
        self.drop_wait = None
        self.pod_runners: dict[str, str] = {}
        self.go_runner = go_runner  # its pods' Go runner (a quick chain ends within its launch)

    async def call(self, fn, *args, **kwargs):
        return fn(*args, **kwargs)

    def apply(self, action: loop.Action):
        self.calls.append(type(action).__name__)
        self.actions.append(action)
        assert len(self.calls) < 500, self.calls[-20:]  # a loop that never ends
        return getattr(self, {
            loop.Observe: "observe", loop.Flush: "flush", loop.WaitWake: "wait_wake",
            loop.Pause: "pause", loop.ApplyNetwork: "apply_network",
            loop.CreatePodObject: "create_pod_object", loop.RunExec: "run_exec",
            loop.DeletePod: "delete_pod", loop.RemovePods: "remove_pods",
            loop.ReleaseWorkloads: "nothing", loop.FetchPod: "fetch_pod",
            loop.KeepArtifacts: "nothing", loop.CollectSidecars: "collect_sidecars",
        }[type(action)])(action)

    async def collect_sidecars(self, action: loop.CollectSidecars) -> loop.SidecarsCollected:
        return loop.SidecarsCollected(action.phase, action.step, b"sidecar-tar")

    def _seen(self, name: str | None) -> PodObservation:
        return observe_pod(self.pods.get(name)) if name else PodObservation.absent()

    async def observe(self, action: loop.Observe) -> loop.PodsSeen:
        return loop.PodsSeen(self._seen(self.status.pod_name),
                             self._seen(self.status.verifier_pod_name))

    async def fetch_pod(self, action: loop.FetchPod) -> loop.PodFetched:
        return loop.PodFetched(self._seen(action.pod))

    async def flush(self, action: loop.Flush) -> loop.Written:
        self.writes.append(action.status)
        self.events += [reason for _, _, reason, _ in action.events]
        return loop.Written(action)

    async def wait_wake(self, action: loop.WaitWake) -> loop.Woken:
        return loop.Woken(False)

    async def pause(self, action: loop.Pause) -> loop.Nothing:
        return loop.Nothing()

    async def nothing(self, action: Any) -> loop.Nothing:
        return loop.Nothing()

    async def apply_network(self, action: loop.ApplyNetwork) -> loop.NetworkApplied:
        return loop.NetworkApplied()

    async def create_pod_object(self, action: loop.CreatePodObject) -> loop.PodCreated:
        name = f"t-{action.role.value}-{len(self.pods)}"
        self.pods[name] = pod(ready=True)
        if self.go_runner:
            self.pods[name]["spec"]["volumes"] = [{"name": "runner", "projected": {
                "sources": [{"configMap": {"name": self.go_runner}}]}}]
        return loop.PodCreated(action.role, name, "python:3.12-slim", "public")

    async def delete_pod(self, action: loop.DeletePod) -> loop.Nothing:
        self.pods.pop(action.pod, None)
        return loop.Nothing()

    async def remove_pods(self, action: loop.RemovePods) -> loop.Nothing:
        for name in action.pods:
            self.pods.pop(name, None)
        return loop.Nothing()

    async def run_exec(self, action: loop.RunExec) -> loop.ExecReply:
        if self.fail_execs:
            self.fail_execs -= 1
            return loop.ExecReply("exec", "failed", error="no route to the kubelet")
        phase = self.plan.phase(action.phases[-1])
        verifier = phase.name == "verifier"
        done = done_line(verifier, self.tar if action.artifacts else None)
        if action.command == "launch":
            if verifier and self.quick_verifier:  # it ended within the launch's wait
                return loop.ExecReply("exec", "ok", done, exit_code=0)
            if len(action.phases) > 1 and self.go_runner:  # each ended within the launch
                text = "".join(f"=== {p}\n" + done_line(
                    p == "verifier", self.tar if action.artifacts and p == action.phases[-1]
                    else None) for p in action.phases)
            elif len(action.phases) > 1:
                text = "".join(f"=== {p}\n{running_line()}\n" for p in action.phases)
            else:
                text = running_line() + "\n"
            return loop.ExecReply("exec", "ok", text, exit_code=0)
        return loop.ExecReply("exec", "ok", done, exit_code=0)


def drive(executor: FakeExecutor, status: TrialStatus | None = None, plan: Any = None,
          **spec: Any) -> TrialDriver:
    spec = {"agent": {"name": "oracle"}, **spec}
    plan = plan or plan_for(**spec)
    body = trial_body(**spec)
    driver = TrialDriver(body, LOG, OperatorSettings(), executor=executor)
    if executor.go_runner:  # the operator's own Go runner
        driver.state = replace(driver.state, current_go_runner=executor.go_runner)
    start = machine.start(status or TrialStatus(), plan, "sha256:d", 1, now())
    driver.state = loop.take(driver.state, start)
    asyncio.run(asyncio.wait_for(driver.loop(plan), 10))
    return driver


def test_a_trial_runs_to_its_reward_through_the_executor() -> None:
    executor = FakeExecutor()
    driver = drive(executor)
    status = driver.status
    assert status.phase == "Completed" and status.reward == 1
    assert executor.writes[-1] == status  # the end is on record
    assert executor.pods == {}  # its pods went after it
    assert executor.calls.count("CreatePodObject") == 1
    assert Reason.STARTED in executor.events
    # The launch of task code was on record before it was sent.
    launches = [i for i, c in enumerate(executor.calls) if c == "RunExec"]
    first_write = executor.calls.index("Flush")
    assert first_write < launches[0]
    assert executor.writes[0].task_code_sent == [status.pod_name]


def test_an_unanswered_exec_is_retried_then_the_trial_goes_on() -> None:
    executor = FakeExecutor(fail_execs=2)
    driver = drive(executor)
    assert driver.status.phase == "Completed"
    assert executor.calls.count("Pause") == 2  # a backoff after each failed exec


def test_a_pod_that_never_answers_fails_the_attempt_as_lost() -> None:
    executor = FakeExecutor(fail_execs=1000)
    driver = drive(executor)
    status = driver.status
    assert status.phase == "Failed"
    assert machine.terminal_condition(status).reason == Reason.POD_LOST
    assert "FetchPod" in executor.calls  # looked at the pod before deciding


def test_a_trials_artifacts_are_kept_for_the_export_before_its_end_is_written() -> None:
    """A shared verifier's trial: what its environment pod packed is read once, at its end,
    before the outcome is on record (an export right after sees it) and before its pods go."""
    executor = FakeExecutor()
    drive(executor)
    calls = executor.calls
    assert calls.count("KeepArtifacts") == 1, calls
    keep = calls.index("KeepArtifacts")
    assert "Flush" in calls[keep:] and "RemovePods" in calls[keep:]
    assert executor.writes[-1].phase == "Completed"


def kept(executor: FakeExecutor) -> loop.KeepArtifacts:
    keeps = [a for a in executor.actions if isinstance(a, loop.KeepArtifacts)]
    assert len(keeps) == 1, executor.calls
    return keeps[0]


def test_the_reply_that_sees_the_shared_verifier_end_brings_the_artifacts() -> None:
    """A shared verifier's exec asks for the packed tar; the trial's end keeps what its reply
    carried, so it needs no exec of its own (`KeepArtifacts.packed`), whether the verifier
    ended within its launch or a `result` saw it end."""
    for quick in (False, True):
        executor = FakeExecutor(tar=b"the tar", quick_verifier=quick)
        driver = drive(executor)
        assert driver.status.phase == "Completed" and driver.status.reward == 1
        execs = [a for a in executor.actions if isinstance(a, loop.RunExec)]
        verifier = [a for a in execs if a.phases == ("verifier",)]
        assert verifier and all(a.artifacts for a in verifier)
        assert not any(a.artifacts for a in execs if a not in verifier)
        assert [a.command for a in verifier] == (["launch"] if quick else ["launch", "result"])
        keep = kept(executor)
        assert keep.packed == PackedArtifacts(7, b"the tar")
        assert keep.pod == driver.status.pod_name


def test_a_refused_tar_is_carried_as_its_refusal() -> None:
    """Over the limit: the reply says the tar's size and carries none; kept as refused."""
    executor = FakeExecutor(tar=50_000_000)
    drive(executor)
    assert kept(executor).packed == PackedArtifacts(50_000_000, None)


def test_without_the_tar_in_the_reply_the_trials_end_reads_it_as_before() -> None:
    """A runner that does not carry it (runner.sh, an older runner): the trial's end reads the
    artifacts with an exec of its own (`KeepArtifacts` without `packed`)."""
    executor = FakeExecutor()
    drive(executor)
    assert kept(executor).packed is None


def test_only_a_shared_verifier_asks_for_the_artifacts() -> None:
    """A shared verifier's exec asks for the packed tar, each step's of a multi-step trial
    too; a separate verifier's environment pod (its collect phase) keeps its own exec for the
    artifacts (read for its setup, and by `ReadArtifacts` at the pod's stop)."""
    from tests.unit.helpers import HELLO_TOML, task
    from tests.unit.reconcile.test_trial_machine_steps import SEPARATE, steps_plan

    shared = plan_for(agent={"name": "oracle"})
    assert [p.id for p in shared.phases if loop.asks_artifacts(shared, p.id)] == ["verifier"]
    toml = HELLO_TOML.replace("[verifier]\n", '[verifier]\nenvironment_mode = "separate"\n')
    separate = plan_for(task(toml), agent={"name": "oracle"})
    assert separate.steps[0].verifier_mode == "separate"
    assert not any(loop.asks_artifacts(separate, p.id) for p in separate.phases)
    steps = steps_plan({"a": "", "b": ""})
    assert [p.id for p in steps.phases if loop.asks_artifacts(steps, p.id)] == [
        p.id for p in steps.phases if p.name == "verifier"]
    assert len([p for p in steps.phases if p.name == "verifier"]) == 2
    separate_steps = steps_plan({"a": "", "b": ""}, root=SEPARATE)
    assert not any(loop.asks_artifacts(separate_steps, p.id) for p in separate_steps.phases)


GO_RUNNER = "shipyard-runner-go-abc-0"


def test_a_quick_trial_takes_one_exec_with_the_current_go_runner() -> None:
    """The verifier chained after the agent (`machine.folds_verifier`): one exec, its keys in
    the upload, the artifacts carried by its answer; the reward as ever."""
    executor = FakeExecutor(go_runner=GO_RUNNER, tar=b"packed")
    driver = drive(executor)
    assert driver.status.phase == "Completed" and driver.status.reward == 1
    execs = [a for a in executor.actions if isinstance(a, loop.RunExec)]
    assert len(execs) == 1, execs
    assert execs[0].phases == ("environment", "agent", "verifier")
    assert execs[0].folded and execs[0].artifacts
    assert kept(executor).packed == PackedArtifacts(6, b"packed")


def test_a_retried_exec_chains_no_verifier() -> None:
    """Tried again, the agent may already run and race the exec's upload: the verifier then
    waits for an exec of its own (two more execs, the trial as ever)."""
    executor = FakeExecutor(go_runner=GO_RUNNER, fail_execs=1)
    driver = drive(executor)
    assert driver.status.phase == "Completed" and driver.status.reward == 1
    execs = [a for a in executor.actions if isinstance(a, loop.RunExec)]
    assert execs[0].phases == ("environment", "agent", "verifier") and execs[0].folded
    assert execs[1].phases == ("environment", "agent") and not execs[1].folded
    assert any(a.phases == ("verifier",) for a in execs[2:]), execs


def test_an_older_go_runner_chains_no_verifier() -> None:
    """A pod made by an older operator (an upgrade) keeps its runner: no verifier chained."""
    executor = FakeExecutor(go_runner="shipyard-runner-go-old-0")
    spec = {"agent": {"name": "oracle"}}
    driver = TrialDriver(trial_body(**spec), LOG, OperatorSettings(), executor=executor)
    driver.state = replace(driver.state, current_go_runner=GO_RUNNER)
    start = machine.start(TrialStatus(), plan_for(**spec), "sha256:d", 1, now())
    driver.state = loop.take(driver.state, start)
    asyncio.run(asyncio.wait_for(driver.loop(plan_for(**spec)), 10))
    execs = [a for a in executor.actions if isinstance(a, loop.RunExec)]
    assert driver.status.phase == "Completed" and driver.status.reward == 1
    assert not any(a.folded for a in execs) and execs[0].phases == ("environment", "agent")


def test_each_steps_artifacts_are_kept_as_its_shared_verifier_ends() -> None:
    """A multi-step trial: each step's verifier reply brings that step's tar, kept at once
    under its step (Harbor's `steps/<step>/artifacts/`); a runner that does not carry it
    (runner.sh) gets an exec of its own per step. None is kept again at the trial's end (the
    tar left in the pod is the last verified step's, whichever that was)."""
    from tests.unit.reconcile.test_trial_machine_steps import steps_task

    for tar in (b"the tar", None):
        executor = FakeExecutor(tar=tar)
        plan = plan_for(steps_task({"a": "", "b": ""}), agent={"name": "nop"})
        driver = TrialDriver(trial_body(agent={"name": "nop"}), LOG, OperatorSettings(),
                             executor=executor)
        start = machine.start(TrialStatus(), plan, "sha256:d", 1, now())
        driver.state = loop.take(driver.state, start)
        asyncio.run(asyncio.wait_for(driver.loop(plan), 10))
        assert driver.status.phase == "Completed", driver.status
        keeps = [a for a in executor.actions if isinstance(a, loop.KeepArtifacts)]
        assert [k.step for k in keeps] == [s.name for s in plan.steps], executor.calls
        carried = PackedArtifacts(7, b"the tar") if tar else None
        assert all(k.packed == carried for k in keeps)
        assert executor.calls.index("KeepArtifacts") < executor.calls.index("RemovePods")


class RefusingExecutor(FakeExecutor):
    """The apiserver refuses the pod `refusals` times (a full ResourceQuota), or for good."""

    def __init__(self, refusal: loop.PodRefused, refusals: int | None) -> None:
        super().__init__()
        self.refusal, self.refusals = refusal, refusals

    async def create_pod_object(self, action: loop.CreatePodObject
                                ) -> loop.PodCreated | loop.PodRefused:
        if self.refusals is None or self.refusals > 0:
            if self.refusals is not None:
                self.refusals -= 1
            return replace(self.refusal, role=action.role)
        return await super().create_pod_object(action)


QUOTA_FULL = ('pods "t-env" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, '
              "limited: pods=2")
QUOTA_LIMITS = ('pods "t-env" is forbidden: failed quota: q: must specify limits.cpu for: '
                "main; limits.memory for: main")


def test_a_pod_a_full_quota_refuses_waits_and_is_made_once_the_quota_has_room() -> None:
    executor = RefusingExecutor(loop.PodRefused(machine.Role.ENV, 403, QUOTA_FULL, True), 3)
    driver = drive(executor)
    assert driver.status.phase == "Completed" and driver.status.reward == 1
    assert executor.calls.count("CreatePodObject") == 4
    waits = [a for a in executor.actions if isinstance(a, loop.WaitWake)]
    assert waits and all(w.timeout == loop.QUOTA_RETRY_SEC for w in waits[:3])
    # Said once, with the apiserver's words, while it waited.
    assert executor.events.count(Reason.WAITING_FOR_CAPACITY) == 1
    waiting = next(w for w in executor.writes if w is not None and any(
        c.reason == Reason.WAITING_FOR_CAPACITY for c in w.conditions))
    text = next(c.message for c in waiting.conditions if c.reason == Reason.WAITING_FOR_CAPACITY)
    assert text == f"the environment pod waits for the namespace's quota: {QUOTA_FULL}"


def test_a_pod_the_cluster_refuses_for_good_fails_the_trial_at_once_in_its_words() -> None:
    executor = RefusingExecutor(loop.PodRefused(machine.Role.ENV, 403, QUOTA_LIMITS, False),
                                None)
    driver = drive(executor)
    status = driver.status
    assert status.phase == "Failed"
    failed = machine.terminal_condition(status)
    assert failed.reason == Reason.POD_REJECTED
    assert failed.message == f"the cluster refused the environment pod (403): {QUOTA_LIMITS}"
    assert executor.calls.count("CreatePodObject") == 1  # no retries of a permanent refusal
    assert executor.writes[-1] == status


def test_a_driver_given_up_before_any_phase_fails_as_the_environment_not_the_verifier() -> None:
    status, _ = machine.given_up(TrialStatus(), "the operator failed 5 times in a row", now())
    assert machine.terminal_condition(status).reason == Reason.ENVIRONMENT_SETUP_FAILED


def test_a_new_pod_waits_out_the_settle_time_only_where_no_fence_proves_its_policy() -> None:
    from shipyard.api.models import TrialSpec
    from shipyard.plan.network import Fence, NetworkSettings
    from shipyard.plan.phases import build_plan
    from tests.unit.helpers import task

    spec = TrialSpec.model_validate({"taskRef": {"name": "hello"}})
    created = loop.PodCreated(machine.Role.ENV, "t-env", "python:3.12-slim", "public")
    for fence, settled in ((None, T0.replace(second=2)), (Fence(("10.96.0.1:443",)), T0)):
        plan = build_plan(task(), spec, {}, NetworkSettings(fence=fence))
        state = loop.LoopState(plan, TrialStatus(), TrialStatus(), "t", "u", "ns", "t-logs",
                               settle_sec=2.0)
        assert loop.absorb(state, created, T0).pod_network["t-env"] == ("public", settled)


def test_a_pod_that_never_ran_a_phase_is_not_asked_for_artifacts_at_the_trials_end() -> None:
    from shipyard.api.models import PhaseRecord

    plan = plan_for()
    never = TrialStatus(pod_name="t-env", phases=[PhaseRecord(name="environment")])
    ran = TrialStatus(pod_name="t-env", phases=[PhaseRecord(name="environment", launched=True)])
    for status, asked in ((never, False), (ran, True)):
        state = loop.LoopState(plan, status, status, "t", "u", "ns", "t-logs")
        todo = loop.finishing(state).todo
        assert any(isinstance(a, loop.KeepArtifacts) for a in todo) == asked


def test_a_trial_that_ended_before_its_verification_has_its_artifacts_packed_at_its_end() -> None:
    from shipyard.api.models import PhaseRecord

    plan = plan_for()
    pods = machine.Pods(env=observe_pod(pod(ready=True)), verifier=PodObservation.absent())
    agent_failed = TrialStatus(pod_name="t-env", phases=[
        PhaseRecord(name="environment", launched=True), PhaseRecord(name="agent", launched=True),
        PhaseRecord(name="verifier")])
    verified = agent_failed.model_copy(deep=True)
    verified.phases[2].launched = True
    for status, observed, recovered in ((agent_failed, pods, True), (verified, pods, False),
                                        (agent_failed, None, False)):
        state = loop.LoopState(plan, status, status, "t", "u", "ns", "t-logs", pods=observed)
        keep = next(a for a in loop.finishing(state).todo if isinstance(a, loop.KeepArtifacts))
        assert [a.source for a in keep.recover] == (["/logs/artifacts"] if recovered else [])


def test_a_shared_verifier_whose_step_has_sidecar_evidence_gets_it_first_and_keeps_it() -> None:
    """Harbor collects a shared verifier's sidecar evidence (their hooks, their artifacts)
    before verification: the operator does it before the verifier's own exec, so the quick
    chain stops after the agent, and the evidence is kept with what the pod packed."""
    from shipyard.plan.compose import SidecarEvidence
    from shipyard.taskformat import ArtifactConfig, VerifierCollectConfig

    plan = plan_for(agent={"name": "oracle"})
    evidence = SidecarEvidence("db", (VerifierCollectConfig(command="dump", service="db"),),
                               (ArtifactConfig(source="/tmp/dump.sql", service="db"),))
    plan = replace(plan, steps=(replace(plan.steps[0], sidecar_evidence=(evidence,)),))
    executor = FakeExecutor(go_runner="runner-abc", tar=b"main-tar")
    executor.plan = plan
    driver = drive(executor, plan=plan)
    assert driver.status.phase == "Completed", driver.status
    collected = executor.calls.index("CollectSidecars")
    execs = [(i, a) for i, a in enumerate(executor.actions) if isinstance(a, loop.RunExec)]
    verifier_exec = next(i for i, a in execs if a.phases[-1] == "verifier")
    assert all("verifier" not in a.phases for i, a in execs if i < collected)  # not folded
    assert collected < verifier_exec
    assert executor.calls.count("CollectSidecars") == 1
    keep = next(a for a in executor.actions if isinstance(a, loop.KeepArtifacts))
    assert keep.sidecars == b"sidecar-tar"
