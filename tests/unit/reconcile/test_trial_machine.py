"""The pure trial state machine, driven through whole single-step trials with synthetic runner
results and pod objects (docs/harbor.md §b.3 phase order, §b.6 failure semantics)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shipyard.api.models import Condition, TrialStatus
from shipyard.api.reasons import Reason
from shipyard.plan.phases import REWARD_JSON, REWARD_TXT, TEST_STDOUT, TrialPlan
from shipyard.reconcile import trial_machine as m
from shipyard.reconcile.pod_observation import PodObservation, observe_pod
from shipyard.reconcile.runner_output import CollectedFile, PhaseStatus
from shipyard.taskformat import load_task_files
from tests.unit.helpers import (
    HELLO_TOML,
    T0,
    at,
    done,
    plan_for,
    pod,
    read_back,
    running,
    task,
    unschedulable_pod,
    waiting,
)

ABSENT = PodObservation.absent()
READY = observe_pod(pod(ready=True))
BUSY = observe_pod(pod(ready=False))
POD = "hello-oracle-env"
HEALTHCHECK_TOML = HELLO_TOML + '\n[environment.healthcheck]\ncommand = "test -f /ready"\n'


def pods(env: PodObservation = READY) -> m.Pods:
    return m.Pods(env=env, verifier=ABSENT)


def reward_txt(value: bytes = b"1\n") -> PhaseStatus:
    return done(files={REWARD_TXT: value, TEST_STDOUT: b"ok\n"})


def cond(status: TrialStatus, type_: str) -> Condition | None:
    return next((c for c in status.conditions if c.type == type_), None)


def states(status: TrialStatus) -> dict[str, str]:
    return {r.name: r.state for r in status.phases}


@dataclass
class Run:
    status: TrialStatus
    actions: list[str] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    logs: dict[str, str] = field(default_factory=dict)

    def reasons(self) -> list[str]:
        return [reason for _, reason, _ in self.events]


def started(plan: TrialPlan) -> TrialStatus:
    return m.start(TrialStatus(), plan, "sha256:digest", 3, T0)


def with_pod(plan: TrialPlan) -> TrialStatus:
    return m.on_pod_created(started(plan), "env", POD, T0)


def drive(plan: TrialPlan, results: dict[str, PhaseStatus] | None = None, *,
          round_trip: bool = False, max_steps: int = 40) -> Run:
    """Run a trial to its end: the pod is ready whenever it exists, every launched phase
    finishes with `results[phase]` (default: exit 0; the verifier writes reward 1)."""
    results = {"verifier": reward_txt(), **(results or {})}
    run = Run(started(plan))
    now = T0
    for _ in range(max_steps):
        now += timedelta(seconds=1)
        if round_trip:
            run.status = read_back(run.status)
        env = READY if run.status.pod_name else ABSENT
        action, decided, outcome = m.next_action(run.status, plan, pods(env), now)
        if decided is not None:
            run.status = decided
        run.actions.append(type(action).__name__ + (
            f":{action.phase}" if isinstance(action, m.Launch | m.ReadResult) else ""))
        if outcome is not None:
            run.events += outcome.events
        match action:
            case m.CreatePod():
                run.status = m.on_pod_created(run.status, action.role, POD, now)
                continue
            case m.Launch():
                run.status, outcome = m.on_launch(run.status, action.phase, running(now), now)
            case m.ReadResult():
                result = results.get(action.phase, done())
                run.status, outcome = m.on_result(run.status, plan, action.phase, result, now)
                run.logs.update(outcome.logs)
            case m.Finish():
                run.status = m.finished(run.status, now)
                continue
            case m.Done():
                return run
            case _:
                raise AssertionError(f"unexpected {action}")
        run.events += outcome.events
    raise AssertionError(f"no end after {max_steps} steps: {run.actions}")


# ---------------------------------------------------------------- the happy path


def test_oracle_trial_runs_the_phases_in_harbor_order_and_records_the_reward() -> None:
    run = drive(plan_for(agent={"name": "oracle"}))
    assert run.actions == [
        "CreatePod", "Launch:environment", "ReadResult:environment", "Launch:agent",
        "ReadResult:agent", "Launch:verifier", "ReadResult:verifier", "Finish", "Done",
    ]
    status = run.status
    assert (status.phase, status.reward, status.rewards, status.error) == (
        "Completed", 1.0, {"reward": 1.0}, None)
    assert (cond(status, "Complete").status, cond(status, "Complete").reason) == (
        "True", "RewardRecorded")
    assert cond(status, "Running").status == "False"
    assert cond(status, "Failed") is None
    assert states(status) == {"environment": "Succeeded", "agent": "Succeeded",
                              "verifier": "Succeeded"}
    assert all(r.launched and r.exit_code == 0 and r.finished_at for r in status.phases)
    assert status.finished_at and status.started_at == "2026-01-01T12:00:00Z"
    assert (status.task_digest, status.observed_generation, status.pod_name) == (
        "sha256:digest", 3, POD)
    assert "RewardRecorded" in run.reasons()


def test_phase_logs_are_kept_from_the_collected_files() -> None:
    run = drive(plan_for(agent={"name": "oracle"}), {
        "agent": done(files={"/logs/agent/oracle.txt": b"solved\n"}),
        "verifier": done(files={REWARD_TXT: b"1", TEST_STDOUT: b"1 passed\n"}),
    })
    assert run.logs == {"agent.log": "solved\n", "verifier.log": "1 passed\n"}


def test_the_verifiers_ctrf_report_and_stderr_are_kept_when_written() -> None:
    """pytest's `--ctrf /logs/verifier/ctrf.json` (Harbor's task template) and a test script's
    own test-stderr.txt are kept with the logs (Harbor's viewer shows them); a CTRF report
    cut short by a limit is dropped, never kept as broken JSON."""
    ctrf = b'{"results": {"tool": {"name": "pytest"}, "summary": {"tests": 1}}}'
    run = drive(plan_for(agent={"name": "oracle"}), {"verifier": done(files={
        REWARD_TXT: b"1", TEST_STDOUT: b"1 passed\n",
        "/logs/verifier/ctrf.json": ctrf, "/logs/verifier/test-stderr.txt": b"warn\n"})})
    assert run.logs["verifier.ctrf.json"] == ctrf.decode()
    assert run.logs["verifier.test-stderr.txt"] == "warn\n"
    verifier = done(files={REWARD_TXT: b"1", TEST_STDOUT: b"ok\n"})
    verifier.files["/logs/verifier/ctrf.json"] = CollectedFile(len(ctrf) + 100, ctrf)  # a tail
    run = drive(plan_for(agent={"name": "oracle"}), {"verifier": verifier})
    assert "verifier.ctrf.json" not in run.logs and run.logs["verifier.log"] == "ok\n"


def test_the_other_files_of_the_verifiers_folder_are_kept_within_one_reports_budget() -> None:
    """Harbor keeps all of /logs/verifier (a grader's `reward-details.json`, `sites.log`): so
    does the logs ConfigMap, in name order within one report's budget: a log over it as its
    tail, a JSON file over it not at all; binary files and names no key can hold left out."""
    plan = plan_for(agent={"name": "oracle"})
    budget = plan.report_key_bytes
    files = {REWARD_TXT: b"1", TEST_STDOUT: b"ok\n",
             "/logs/verifier/a-details.json": b'{"sites": 9}',
             "/logs/verifier/b.bin": b"\0\1\2",
             "/logs/verifier/c d.txt": b"space",
             "/logs/verifier/d-big.log": b"x" * (budget * 2),
             "/logs/verifier/e-late.json": b'{"late": 1}'}
    run = drive(plan, {"verifier": done(files=files)})
    kept = {k: v for k, v in run.logs.items() if ".file." in k}
    assert set(kept) == {"verifier.file.a-details.json", "verifier.file.d-big.log"}, kept
    assert kept["verifier.file.a-details.json"] == '{"sites": 9}'
    assert kept["verifier.file.d-big.log"].endswith("x" * 1000)
    assert sum(len(v.encode()) for v in kept.values()) <= budget
    assert "verifier.file.reward.txt" not in run.logs and run.logs["verifier.log"] == "ok\n"


def test_what_the_runner_ended_after_a_phase_is_kept_with_its_log() -> None:
    note = ("shipyard runner: the phase left processes running, now ended: redis-server "
            "(verifier.agentProcesses Keep keeps them, as Harbor does)\n")
    run = drive(plan_for(agent={"name": "oracle"}), {
        "agent": done(files={"/logs/agent/oracle.txt": b"solved\n",
                             "output": b"stray\n" + note.encode()}),
        "verifier": done(files={REWARD_TXT: b"0", TEST_STDOUT: b"1 failed\n"}),
    })
    assert run.logs == {"agent.log": "solved\n" + note, "verifier.log": "1 failed\n"}
    # ... and told in a Warning Event: why a task whose tests check a service its solution
    # started scores 0 here and 1 under Harbor.
    ended = [e for e in run.events if e[1] == Reason.AGENT_PROCESSES_ENDED]
    assert ended == [("Warning", Reason.AGENT_PROCESSES_ENDED,
                      "the agent phase left processes running, ended before the verifier: "
                      "redis-server (spec.verifier.agentProcesses: Keep keeps them, as Harbor "
                      "does)")]


def test_no_event_when_the_agent_left_nothing_running() -> None:
    run = drive(plan_for(agent={"name": "oracle"}), {
        "agent": done(files={"/logs/agent/oracle.txt": b"solved\n",
                             "output": b"shipyard runner: phase agent: 9 bytes dropped\n"}),
        "verifier": done(files={REWARD_TXT: b"1", TEST_STDOUT: b"ok\n"}),
    })
    assert not [e for e in run.events if e[1] == Reason.AGENT_PROCESSES_ENDED]
    assert m.ended_processes("shipyard runner: the phase left processes running, now ended: "
                             + "x" * 1000) == "x" * 300


def test_a_zero_reward_is_still_complete() -> None:
    run = drive(plan_for(agent={"name": "nop"}), {"verifier": reward_txt(b"0\n")})
    assert (run.status.phase, run.status.reward) == ("Completed", 0.0)
    assert cond(run.status, "Complete").status == "True"


def test_status_read_back_from_the_api_at_every_step_changes_no_decision() -> None:
    """All state lives in the status: a restarted operator resumes exactly, never launching a
    phase twice."""
    plan = plan_for(task(HEALTHCHECK_TOML), agent={"name": "oracle"})
    assert drive(plan, round_trip=True).actions == drive(plan).actions


# ---------------------------------------------------------------- starting the pod


def test_create_pod_first() -> None:
    plan = plan_for()
    action, decided, _ = m.next_action(started(plan), plan, pods(ABSENT), T0)
    assert (action, decided) == (m.CreatePod("env", None), None)


def test_wait_while_the_pod_is_not_ready_then_launch_the_environment_phase() -> None:
    plan = plan_for()
    status = with_pod(plan)
    pending = observe_pod(pod(phase="Pending", container_state=waiting("ContainerCreating")))
    action, decided, _ = m.next_action(status, plan, pods(pending), at(5))
    assert isinstance(action, m.Wait) and decided is None
    assert action.until == T0 + timedelta(seconds=plan.start_timeout_sec)
    action, _, _ = m.next_action(status, plan, pods(READY), at(6))
    assert action == m.Launch("environment")


def test_a_running_container_is_enough_to_launch_but_not_to_read_a_result() -> None:
    """The readiness probe's first pass is not waited for: the runner refuses double starts."""
    plan = plan_for()
    status = with_pod(plan)
    assert not BUSY.ready and BUSY.running
    action, decided, _ = m.next_action(status, plan, pods(BUSY), at(1))
    assert action == m.Launch("environment") and decided is None
    launched, _ = m.on_launch(status, "environment", running(), at(2))
    action, _, _ = m.next_action(launched, plan, pods(BUSY), at(3))
    assert isinstance(action, m.Wait)


def test_no_chain_in_a_pod_with_an_older_runner() -> None:
    """A pod an older operator made keeps its runner across an upgrade: it gets plain
    launches, which every runner understands."""
    plan = plan_for()
    assert m.chained_phases(plan, "environment", current_runner=False) == ["environment"]


def test_only_the_environment_phase_is_chained_with_the_next_one() -> None:
    """Past task code only when folding the verifier (below): a verifier staged (or awaited by
    a runner the agent could read) while the agent runs would be within the agent's reach."""
    plan = plan_for()
    assert m.chained_phases(plan, "environment") == ["environment", "agent"]
    assert m.chained_phases(plan, "agent") == ["agent"]
    assert m.chained_phases(plan, "verifier") == ["verifier"]


def test_the_verifier_is_folded_after_the_agent_only_when_asked() -> None:
    """`fold_verifier` (the pod's runner is the current Go runner and no task code was sent
    into the pod): a single-step trial's shared verifier chained after its agent."""
    plan = plan_for()
    assert m.chained_phases(plan, "environment", fold_verifier=True) == [
        "environment", "agent", "verifier"]
    assert m.chained_phases(plan, "agent", fold_verifier=True) == ["agent", "verifier"]
    assert m.chained_phases(plan, "verifier", fold_verifier=True) == ["verifier"]
    assert m.chained_phases(plan, "environment", current_runner=False,
                            fold_verifier=True) == ["environment"]


def test_the_verifier_is_not_folded_into_another_pod_or_a_step() -> None:
    toml = HELLO_TOML.replace("[verifier]", '[verifier]\nenvironment_mode = "separate"')
    plan = plan_for(task(toml))
    assert m.chained_phases(plan, "environment", fold_verifier=True) == ["environment", "agent"]
    toml = ('schema_version = "1.4"\n[environment]\ndocker_image = "python:3.12-slim"\n'
            + "".join(f'[[steps]]\nname = "{n}"\n' for n in ("one", "two")))
    files = {"task.toml": toml, **{f"steps/{n}/{f}": "#!/bin/bash\necho 1\n"
                                   for n in ("one", "two")
                                   for f in ("instruction.md", "tests/test.sh",
                                             "solution/solve.sh")}}
    steps = plan_for(load_task_files({k: v.encode() for k, v in files.items()}, name="steps"))
    first = next(p.id for p in steps.phases if p.name == "agent")
    assert m.chained_phases(steps, first, fold_verifier=True) == [first]


def test_the_verifier_folds_only_into_the_first_exec_of_task_code_with_the_current_runner(
        ) -> None:
    assert m.folds_verifier("shipyard-runner-go-abc-0", "shipyard-runner-go-abc-0", POD, [])
    assert m.folds_verifier("img:1", "img:1", POD, None)
    # Task code was sent into the pod (a retried or restarted exec): the agent may run.
    assert not m.folds_verifier("shipyard-runner-go-abc-0", "shipyard-runner-go-abc-0", POD,
                                [POD])
    # runner.sh, or the Go runner of an older operator (an upgrade).
    assert not m.folds_verifier(None, "shipyard-runner-go-abc-0", POD, [])
    assert not m.folds_verifier("shipyard-runner-go-old-0", "shipyard-runner-go-abc-0", POD, [])
    assert not m.folds_verifier("", "", POD, [])


def test_a_chain_ends_at_another_pod() -> None:
    toml = HELLO_TOML.replace("[verifier]", '[verifier]\nenvironment_mode = "separate"')
    plan = plan_for(task(toml))
    assert m.chained_phases(plan, "environment") == ["environment", "agent"]
    assert m.chained_phases(plan, "collect") == ["collect"]
    assert m.chained_phases(plan, "verifier-environment") == ["verifier-environment"]


def test_a_chain_never_runs_into_a_phase_that_needs_secrets() -> None:
    plan = plan_for(agent={"name": "oracle", "envFrom": [{"secretRef": {"name": "keys"}}]})
    assert plan.phase("agent").secrets
    assert m.chained_phases(plan, "environment") == ["environment"]


def test_environment_start_timeout() -> None:
    plan = plan_for(task(HELLO_TOML.replace("[environment]\n",
                                            "[environment]\nbuild_timeout_sec = 60\n")))
    pending = observe_pod(pod(phase="Pending", container_state=waiting("ContainerCreating")))
    action, _, _ = m.next_action(with_pod(plan), plan, pods(pending), at(59))
    assert isinstance(action, m.Wait)
    action, decided, outcome = m.next_action(with_pod(plan), plan, pods(pending), at(60))
    assert isinstance(action, m.Finish)
    failed = cond(decided, "Failed")
    assert (failed.reason, failed.message) == (
        "EnvironmentStartTimeout", "Environment start timed out after 60 seconds")
    assert outcome.events[0][:2] == ("Warning", "EnvironmentStartTimeout")


def test_a_running_pod_not_yet_ready_is_launched_into_even_past_the_start_timeout() -> None:
    """A pod with a probe container is Ready only once a phase has ended: a running one is
    started, never failed as not started (e.g. an operator that comes back late)."""
    plan = plan_for(task(HELLO_TOML.replace("[environment]\n",
                                            "[environment]\nbuild_timeout_sec = 60\n")))
    action, decided, _ = m.next_action(with_pod(plan), plan, pods(BUSY), at(61))
    assert (action, decided) == (m.Launch("environment"), None)


def test_unschedulable_fails_only_after_the_grace_period() -> None:
    plan = plan_for()
    status = with_pod(plan)
    stuck = observe_pod(unschedulable_pod(created=T0))
    action, decided, _ = m.next_action(status, plan, pods(stuck), at(29))
    assert (action, decided) == (m.Wait(at(30)), None)
    action, decided, _ = m.next_action(status, plan, pods(stuck), at(30))
    assert isinstance(action, m.Finish)
    assert cond(decided, "Failed").reason == "Unschedulable"
    assert "Insufficient cpu" in cond(decided, "Failed").message


def test_a_missing_image_fails_at_once() -> None:
    plan = plan_for()
    bad = observe_pod(pod(phase="Pending", container_state=waiting(
        "ErrImagePull", 'failed to pull and unpack image "nope:1": not found')))
    action, decided, _ = m.next_action(with_pod(plan), plan, pods(bad), at(1))
    assert isinstance(action, m.Finish)
    assert cond(decided, "Failed").reason == "ImagePullFailed"
    assert "nope:1" in cond(decided, "Failed").message
    assert m.finished(decided, at(2)).phase == "Failed"


@pytest.mark.parametrize("state", [waiting("ErrImagePull", "pull QPS exceeded"),
                                   waiting("ImagePullBackOff", 'Back-off pulling image "a:1"')])
def test_a_pull_error_that_may_pass_is_left_to_the_kubelet_for_the_grace(state) -> None:
    """E.g. the kubelet's pull QPS, hit when twenty trials of one new image start at once: its
    own retries pull the image; the trial fails only if the error outlasts the grace."""
    plan = plan_for()
    assert plan.image_pull_grace_sec == 120
    slow = observe_pod(pod(phase="Pending", container_state=state))
    action, decided, _ = m.next_action(with_pod(plan), plan, pods(slow), at(119))
    assert (action, decided) == (m.Wait(at(120)), None)
    action, decided, _ = m.next_action(with_pod(plan), plan, pods(slow), at(120))
    assert isinstance(action, m.Finish)
    assert cond(decided, "Failed").reason == "ImagePullFailed"
    assert "still failing after 120 s" in cond(decided, "Failed").message


# ---------------------------------------------------------------- losing the pod


def mid_agent(plan: TrialPlan) -> TrialStatus:
    status = with_pod(plan)
    status, _ = m.on_launch(status, "environment", running(), at(1))
    status, _ = m.on_result(status, plan, "environment", done(), at(2))
    status, _ = m.on_launch(status, "agent", running(at(3)), at(3))
    return status


@pytest.mark.parametrize(
    "observed",
    [ABSENT, observe_pod(pod(deleting=True)),
     observe_pod(pod(status={"phase": "Failed", "reason": "Evicted", "message": "disk"})),
     observe_pod(pod(container_state={"terminated": {"reason": "Error", "exitCode": 137}})),
     observe_pod(pod(container_state={"terminated": {"reason": "OOMKilled", "exitCode": 137}}))],
    ids=["deleted", "deleting", "evicted", "container-terminated", "container-oom-killed"],
)
def test_pod_lost_during_the_agent_phase_fails_at_once(observed: PodObservation) -> None:
    plan = plan_for()
    action, decided, outcome = m.next_action(mid_agent(plan), plan, pods(observed), at(4))
    assert isinstance(action, m.Finish)
    reason = ("OOMKilled" if "OOMKilled" in (observed.lost or "") else
              "AgentFailed" if observed.container_exit else "PodLost")
    assert cond(decided, "Failed").reason == reason
    assert states(decided) == {"environment": "Succeeded", "agent": "Failed",
                               "verifier": "Skipped"}
    assert decided.error.type == reason
    assert outcome.events[0][0] == "Warning"


@pytest.mark.parametrize("name", ["main", "probe", "secrets"])
def test_a_container_ended_by_the_agent_is_its_failure_not_a_free_retry(name: str) -> None:
    """Issue 22 (class 7): the agent killed its pod's keep-alive (or the probe's httpd): not
    PodLost, whose retry would give a losing agent another attempt."""
    plan = plan_for(retries=2)
    killed = pod(container_state={"terminated": {"reason": "Error", "exitCode": 137}})
    killed["status"]["containerStatuses"][0]["name"] = name
    observed = observe_pod(killed)
    assert observed.container_exit
    action, decided, _ = m.next_action(mid_agent(plan), plan, pods(observed), at(4), 2)
    assert isinstance(action, m.Finish)
    failed = cond(decided, "Failed")
    assert failed.reason == "AgentFailed" and "not retried" in failed.message, failed
    assert decided.attempt == 1
    # Before any task code ran (the environment phase), the same is the infrastructure's.
    status = with_pod(plan)
    status, _ = m.on_launch(status, "environment", running(), at(1))
    action, decided, _ = m.next_action(status, plan, pods(observed), at(4), 2)
    assert cond(decided, "Failed") is None and decided.attempts[0].reason == "PodLost"


def test_a_container_ended_during_a_launch_of_task_code_is_that_code_s_failure() -> None:
    """The agent ends its container within the exec that launched it (chained with the
    environment phase): no launch is on record, but the driver sent one."""
    plan = plan_for(retries=2)
    killed = observe_pod(pod(container_state={"terminated": {"reason": "Error",
                                                             "exitCode": 137}}))
    status = with_pod(plan)
    status, _ = m.on_launch(status, "environment", running(), at(1))
    sent = frozenset({status.pod_name})
    _, decided, _ = m.next_action(status, plan, pods(killed), at(4), 2, sent)
    assert cond(decided, "Failed").reason == "AgentFailed", decided
    _, decided, _ = m.next_action(status, plan, pods(killed), at(4), 2)
    assert cond(decided, "Failed") is None and decided.attempts[0].reason == "PodLost"


def test_a_runner_broken_after_the_agent_ran_is_the_agent_s_failure() -> None:
    plan = plan_for()
    status = mid_agent(plan)
    decided, _ = m.unanswered_execs(status, plan, 2, m.Role.ENV, READY, at(9), runner_ran=True)
    assert cond(decided, "Failed").reason == "AgentFailed"
    decided, _ = m.unanswered_execs(status, plan, 2, m.Role.ENV, READY, at(9), runner_ran=False)
    assert cond(decided, "Failed") is None and decided.attempts[0].reason == "PodLost"


# ---------------------------------------------------------------- while a phase runs


def test_wait_for_the_readiness_flip_while_a_phase_runs() -> None:
    plan = plan_for()
    action, decided, _ = m.next_action(mid_agent(plan), plan, pods(BUSY), at(10))
    # The agent started at 3 s with a 120 s timeout: look again after timeout + margin.
    assert (action, decided) == (m.Wait(at(3 + 120) + m.TIMEOUT_MARGIN), None)


def test_a_running_phase_s_result_is_waited_for_in_a_pod_without_a_readiness_probe() -> None:
    plan = plan_for()
    action, _, _ = m.next_action(mid_agent(plan), plan, pods(READY), at(10))
    assert action == m.ReadResult("agent", m.RESULT_WAIT_SEC)


def test_an_older_operator_s_probed_pod_is_read_once_ready_again_without_a_wait() -> None:
    plan = plan_for()
    busy = observe_pod(pod(ready=False, probed=True))
    action, _, _ = m.next_action(mid_agent(plan), plan, pods(busy), at(10))
    assert isinstance(action, m.Wait)
    idle = observe_pod(pod(ready=True, probed=True))
    action, _, _ = m.next_action(mid_agent(plan), plan, pods(idle), at(10))
    assert action == m.ReadResult("agent")


# ---------------------------------------------------------------- the agent's outcome


def test_agent_timeout_still_verifies_and_completes_with_the_error_recorded() -> None:
    run = drive(plan_for(agent={"name": "nop"}),
                {"agent": done(143, timed_out=True)})
    assert "Launch:verifier" in run.actions
    status = run.status
    assert status.phase == "Completed"
    assert status.reward == 1.0
    assert cond(status, "Complete").reason == "RewardRecorded"
    assert status.error.type == "AgentTimeoutError"
    assert status.error.message == "Agent execution timed out after 120 seconds"
    agent = m.record(status, "agent")
    assert (agent.state, agent.timed_out, agent.exit_code) == ("Failed", True, 143)
    assert "AgentTimeout" in run.reasons()


def test_an_oom_killed_agent_is_reported_and_still_verified() -> None:

    run = drive(plan_for(agent={"name": "command", "command": "hog"}),
                {"agent": replace(done(137), oom_killed=1)})
    assert "Launch:verifier" in run.actions
    assert run.status.phase == "Completed"
    assert run.status.error.type == "OOMKilled"
    agent = m.record(run.status, "agent")
    assert agent.state == "Failed" and "memory limit (memory_mb)" in agent.message
    assert "OOMKilled" in run.reasons()


def test_command_agent_non_zero_exit_still_verifies() -> None:
    run = drive(plan_for(agent={"name": "command", "command": "false"}),
                {"agent": done(2)})
    assert run.status.phase == "Completed"
    assert run.status.error.type == "NonZeroAgentExitCodeError"
    assert m.record(run.status, "agent").state == "Failed"


def test_oracle_non_zero_exit_is_not_an_error() -> None:
    run = drive(plan_for(agent={"name": "oracle"}), {"agent": done(1)})
    assert (run.status.phase, run.status.error) == ("Completed", None)
    agent = m.record(run.status, "agent")
    assert (agent.state, agent.exit_code) == ("Succeeded", 1)


def test_runner_failure_in_the_agent_phase_fails_without_verifying() -> None:
    run = drive(plan_for(agent={"name": "oracle"}), {
        "agent": done(126, output="shipyard runner: preparing phase agent failed\n")})
    assert "Launch:verifier" not in run.actions
    assert run.status.phase == "Failed"
    assert cond(run.status, "Failed").reason == "AgentFailed"
    assert states(run.status)["verifier"] == "Skipped"


def test_exit_126_from_the_agent_itself_is_just_a_non_zero_exit() -> None:
    run = drive(plan_for(agent={"name": "command", "command": "./not-executable"}),
                {"agent": done(126, output="")})
    assert run.status.phase == "Completed"
    assert run.status.error.type == "NonZeroAgentExitCodeError"


# ---------------------------------------------------------------- rewards


def test_reward_json_with_several_keys_records_them_all() -> None:
    run = drive(plan_for(), {"verifier": done(files={
        REWARD_JSON: b'{"reward": 0.5, "style": 1, "passed": true}'})})
    assert run.status.rewards == {"reward": 0.5, "style": 1.0, "passed": 1.0}
    assert run.status.reward == 0.5
    # Harbor's types: integers stay integers, in the status as written (`1`, not `1.0`).
    dumped = run.status.model_dump(by_alias=True, mode="json")["rewards"]
    assert [type(v) for v in dumped.values()] == [float, int, int]


def test_reward_is_set_only_when_the_reward_key_exists() -> None:
    run = drive(plan_for(), {"verifier": done(files={REWARD_JSON: b'{"accuracy": 0.75}'})})
    assert (run.status.phase, run.status.reward, run.status.rewards) == (
        "Completed", None, {"accuracy": 0.75})


def test_reward_json_wins_over_reward_txt() -> None:
    run = drive(plan_for(), {"verifier": done(files={REWARD_JSON: b'{"reward": 0.25}',
                                                     REWARD_TXT: b"1"})})
    assert run.status.rewards == {"reward": 0.25}


def test_test_script_exit_code_plays_no_part() -> None:
    run = drive(plan_for(), {"verifier": done(1, files={REWARD_TXT: b"1"})})
    assert (run.status.phase, run.status.reward) == ("Completed", 1.0)


@pytest.mark.parametrize(
    ("files", "reason", "error_type"),
    [
        ({TEST_STDOUT: b"no reward written\n"}, "RewardFileMissing", "RewardFileNotFoundError"),
        ({REWARD_TXT: b""}, "RewardFileEmpty", "RewardFileEmptyError"),
        ({REWARD_JSON: b""}, "RewardFileEmpty", "RewardFileEmptyError"),
        ({REWARD_TXT: b"one point oh"}, "RewardFileInvalid", "VerifierOutputParseError"),
        ({REWARD_TXT: b"nan"}, "RewardFileInvalid", "VerifierOutputParseError"),
        ({REWARD_JSON: b"{not json"}, "RewardFileInvalid", "VerifierOutputParseError"),
        ({REWARD_JSON: b"[1, 2]"}, "RewardFileInvalid", "VerifierOutputParseError"),
        ({REWARD_JSON: b'{"reward": "high"}'}, "RewardFileInvalid", "VerifierOutputParseError"),
        ({REWARD_JSON: b'{"reward": 1' + b"0" * 400 + b"}"}, "RewardFileInvalid",
         "VerifierOutputParseError"),
    ],
    ids=["missing", "empty-txt", "empty-json", "garbage-txt", "nan", "garbage-json",
         "json-array", "json-string-value", "int-too-big-for-a-float"],
)
def test_unusable_reward_file_fails_the_trial(files: dict[str, bytes], reason: str,
                                              error_type: str) -> None:
    run = drive(plan_for(), {"verifier": done(files=files)})
    status = run.status
    assert status.phase == "Failed"
    assert (cond(status, "Failed").status, cond(status, "Failed").reason) == ("True", reason)
    assert cond(status, "Complete") is None
    assert (status.reward, status.rewards) == (None, None)
    assert status.error.type == error_type
    assert m.record(status, "verifier").state == "Failed"


def test_verifier_timeout_fails_the_trial() -> None:
    run = drive(plan_for(), {"verifier": done(143, timed_out=True)})
    assert cond(run.status, "Failed").reason == "VerifierTimeout"
    assert run.status.error.type == "VerifierTimeoutError"
    assert run.status.error.message == "Verifier execution timed out after 60 seconds"


def test_only_the_first_error_is_kept() -> None:
    run = drive(plan_for(agent={"name": "nop"}), {"agent": done(143, timed_out=True),
                                                  "verifier": done(143, timed_out=True)})
    assert cond(run.status, "Failed").reason == "VerifierTimeout"
    assert run.status.error.type == "AgentTimeoutError"


# ---------------------------------------------------------------- environment and healthcheck


def test_healthcheck_failure_fails_before_the_agent_runs() -> None:
    message = "Healthcheck failed after 3 consecutive retries: test -f /ready"
    run = drive(plan_for(task(HEALTHCHECK_TOML)), {"healthcheck": done(1, output=message)})
    assert "Launch:agent" not in run.actions
    assert run.status.phase == "Failed"
    failed = cond(run.status, "Failed")
    assert (failed.reason, failed.message) == ("HealthcheckFailed", message)
    assert run.status.error.type == "HealthcheckError"
    assert states(run.status) == {"environment": "Succeeded", "healthcheck": "Failed",
                                  "agent": "Skipped", "verifier": "Skipped"}


def test_passing_healthcheck_runs_before_the_agent() -> None:
    run = drive(plan_for(task(HEALTHCHECK_TOML)))
    assert run.actions.index("ReadResult:healthcheck") < run.actions.index("Launch:agent")
    assert run.status.phase == "Completed"


def test_environment_preparation_failure() -> None:
    run = drive(plan_for(), {"environment": done(126, output="shipyard runner: preparing "
                                                             "phase environment failed")})
    assert cond(run.status, "Failed").reason == "EnvironmentSetupFailed"
    assert "Launch:agent" not in run.actions


def test_a_pod_whose_network_policy_never_came_into_force_fails_before_any_task_code() -> None:
    from dataclasses import replace

    from shipyard.plan.network import Fence

    plan = plan_for()
    plan = replace(plan, phases=tuple(replace(p, fence=Fence(("10.96.0.1:443",)))
                                      if p.id == "environment" else p for p in plan.phases))
    output = ("shipyard runner: preparing phase environment failed: fence network policy not "
              "in force after 30 s: the pod still reached the apiserver at 10.96.0.1:443")
    run = drive(plan, {"environment": done(126, output=output)})
    failed = cond(run.status, "Failed")
    assert failed.reason == "NetworkPolicyUnenforceable"
    assert "10.96.0.1:443" in failed.message
    assert "Launch:agent" not in run.actions


# ---------------------------------------------------------------- ending


def test_terminal_condition_leads_to_finish_then_done() -> None:
    plan = plan_for()
    decided, _ = m.fail(mid_agent(plan), "Cancelled", "deleted by the user", at(5))
    assert decided.phase == "Running"  # not yet cleaned up
    action, again, _ = m.next_action(decided, plan, pods(READY), at(6))
    assert (action, again) == (m.Finish(), None)
    final = m.finished(decided, at(7))
    assert (final.phase, final.finished_at) == ("Failed", "2026-01-01T12:00:07Z")
    assert m.next_action(final, plan, pods(ABSENT), at(8))[0] == m.Done()


def test_finish_after_a_lost_pod_is_not_mistaken_for_another_loss() -> None:
    plan = plan_for()
    run = drive(plan)
    complete = run.status.model_copy(update={"phase": "Running", "finished_at": None})
    action, decided, _ = m.next_action(complete, plan, pods(ABSENT), at(100))
    assert (action, decided) == (m.Finish(), None)


def test_finished_derives_the_phase_from_the_terminal_condition() -> None:
    plan = plan_for()
    assert m.finished(drive(plan).status, at(50)).phase == "Completed"
    failed, _ = m.fail(mid_agent(plan), "PodLost", "gone", at(5))
    assert m.finished(failed, at(6)).phase == "Failed"
    assert m.finished(failed, at(6)).finished_at == "2026-01-01T12:00:06Z"


def test_failing_twice_keeps_the_first_transition_time() -> None:
    plan = plan_for()
    once, _ = m.fail(mid_agent(plan), "PodLost", "gone", at(5))
    twice, _ = m.fail(once, "PodLost", "gone", at(9))
    assert cond(twice, "Failed").last_transition_time == "2026-01-01T12:00:05Z"


# ---------------------------------------------------------------- wake_deadline


def _status_at(plan: TrialPlan, stage: str) -> TrialStatus:
    if stage == "starting":
        return with_pod(plan)
    if stage == "agent":
        return mid_agent(plan)
    status = mid_agent(plan)
    status, _ = m.on_result(status, plan, "agent", done(), at(4))
    status, _ = m.on_launch(status, "verifier", running(at(5)), at(5))
    return status


@settings(max_examples=300, deadline=None)
@given(
    offset=st.integers(min_value=-10, max_value=10 ** 6),
    stage=st.sampled_from(["starting", "agent", "verifier"]),
    observed=st.sampled_from(["ready", "busy", "pending", "unschedulable"]),
    agent_timeout=st.sampled_from([None, 1.0, 120.0]),
)
def test_wake_deadline_is_never_in_the_past(offset: int, stage: str, observed: str,
                                            agent_timeout: float | None) -> None:
    spec: dict[str, Any] = {"agent": {"name": "nop"}}
    if agent_timeout is not None:
        spec["agent"]["overrideTimeoutSec"] = agent_timeout
    plan = plan_for(**spec)
    seen = {"ready": READY, "busy": BUSY, "unschedulable": observe_pod(unschedulable_pod()),
            "pending": observe_pod(pod(phase="Pending"))}[observed]
    now: datetime = at(offset)
    deadline = m.wake_deadline(_status_at(plan, stage), plan, pods(seen), now)
    assert deadline is None or deadline > now


def test_current_phase_follows_the_first_unfinished_phase_and_clears_at_the_end() -> None:
    plan = plan_for(agent={"name": "oracle"})
    status = m.with_current_phase(with_pod(plan))
    assert status.current_phase == "environment"
    status, _ = m.on_launch(status, "environment", running(T0), T0)
    status, _ = m.on_result(status, plan, "environment", done(), T0)
    assert m.with_current_phase(status).current_phase == "agent"
    assert m.with_current_phase(drive(plan).status).current_phase is None


def test_cancel_fails_the_running_phase_skips_the_rest_and_finishes() -> None:
    plan = plan_for(agent={"name": "oracle"})
    status = with_pod(plan)
    status, _ = m.on_launch(status, "environment", running(T0), T0)
    status, _ = m.on_result(status, plan, "environment", done(), T0)
    status, _ = m.on_launch(status, "agent", running(T0), T0)
    cancelled, outcome = m.cancel(status, at(5))
    assert cond(cancelled, "Failed").reason == "Cancelled"
    assert cond(cancelled, "Failed").message == (
        "cancelled by the shipyard.dev/cancel annotation during agent")
    assert cancelled.error.type == "CancelledError"
    assert states(cancelled) == {"environment": "Succeeded", "agent": "Failed",
                                 "verifier": "Skipped"}
    assert ("Warning", "Cancelled", cond(cancelled, "Failed").message) in outcome.events
    action, _, _ = m.next_action(cancelled, plan, pods(), at(6))
    assert isinstance(action, m.Finish)


@pytest.mark.parametrize(("annotations", "expected"), [
    (None, False), ({}, False), ({"shipyard.dev/cancel": "true"}, True),
    ({"shipyard.dev/cancel": "yes"}, True), ({"shipyard.dev/cancel": "false"}, False),
    ({"shipyard.dev/cancel": ""}, False), ({"other": "true"}, False)])
def test_cancel_annotation_values(annotations: dict[str, str] | None, expected: bool) -> None:
    from shipyard.api.conventions import cancel_requested

    assert cancel_requested(annotations) is expected


def test_waiting_for_a_task_is_pending_with_one_event_until_the_deadline() -> None:
    deadline = m.task_wait_deadline(T0, at(1))
    assert deadline == at(m.TASK_WAIT_SEC)
    assert m.task_wait_deadline(None, at(5), 10) == at(15)
    first, outcome = m.waiting_for_task(TrialStatus(), "Task ns/t not found", deadline, at(1))
    assert first.phase == "Pending"
    running_cond = cond(first, "Running")
    assert (running_cond.status, running_cond.reason) == ("False", "WaitingForTask")
    assert running_cond.message.startswith("Task ns/t not found; waiting until ")
    assert [reason for _, reason, _ in outcome.events] == ["WaitingForTask"]
    again, outcome = m.waiting_for_task(first, "Task ns/t not found", deadline, at(3))
    assert outcome.events == [] and cond(again, "Failed") is None


def test_cancel_keeps_the_log_of_the_phase_it_stopped() -> None:
    plan = plan_for(agent={"name": "command", "command": "sleep 100"})
    status = with_pod(plan)
    status, _ = m.on_launch(status, "environment", running(T0), T0)
    status, _ = m.on_result(status, plan, "environment", done(), T0)
    assert m.stoppable_phase(status) is None  # the agent is not launched yet
    status, _ = m.on_launch(status, "agent", running(T0), T0)
    assert m.stoppable_phase(status) == "agent"
    stopped = done(143, files={"/logs/agent/command.txt": b"so far\n"})
    before = status.model_copy(deep=True)
    cancelled, outcome = m.cancel(status, at(5), plan, stopped)
    assert status == before  # the input is left alone
    assert outcome.logs == {"agent.log": "so far\n"}
    assert m.record(cancelled, "agent").exit_code == 143
    assert cond(cancelled, "Failed").reason == "Cancelled"


def test_a_trial_waits_for_its_pod_to_start_until_its_first_phase_is_launched() -> None:
    plan = plan_for()
    status = with_pod(plan)
    assert m.starting_pod(status)
    launched, _ = m.on_launch(status, "environment", running(), at(1))
    assert not m.starting_pod(launched)


def test_the_environment_pod_s_process_base_is_kept_from_its_first_launch_only() -> None:
    """The runner's base (the tick before which a process is the image's) is taken from the
    pod's first launch, while no task code has run: a base printed later (an agent can write
    the runner's copy) is never taken. A new pod starts without one."""
    plan = plan_for()
    status = with_pod(plan)
    status, _ = m.on_launch(status, "environment", replace(running(T0), base=4242), T0)
    assert status.pod_process_base == 4242
    status, _ = m.on_result(status, plan, "environment", done(), T0)
    status, _ = m.on_launch(status, "agent", replace(running(T0), base=9999999), T0)
    assert status.pod_process_base == 4242
    assert m.on_pod_stopped(status, m.Role.ENV).pod_process_base is None
    assert m.on_pod_created(status, m.Role.ENV, "pod-2", T0).pod_process_base is None


def test_a_write_before_an_exec_only_after_long_work_of_more_than_one_exec() -> None:
    assert not m.write_before_exec(30.0, 1)  # one slow exec: redone at once after a restart
    assert not m.write_before_exec(m.UNSAVED_WORK_SEC - 0.1, 5)
    assert m.write_before_exec(m.UNSAVED_WORK_SEC + 0.1, 2)


def test_a_fence_init_container_that_failed_fails_the_trial_unenforceable_in_its_words(
) -> None:
    """The pod's network policy was never in force: nothing of the task's image started, and
    the trial fails NetworkPolicyUnenforceable with the fence's own message (a compose
    sidecar that failed is another matter: EnvironmentSetupFailed)."""
    message = ("network policy not in force after 30 s: the pod still reached the apiserver "
               "at 10.96.0.1:443, which the phase's policy blocks. ...")
    status = {"phase": "Failed", "conditions": [{"type": "PodScheduled", "status": "True"}],
              "initContainerStatuses": [{"name": "fence", "state": {"terminated": {
                  "exitCode": 1, "reason": "Error", "message": message}}}],
              "containerStatuses": [{"name": "main", "state": {"waiting": {
                  "reason": "PodInitializing"}}}]}
    body = pod(status=status)
    body["spec"]["initContainers"] = [{"name": "fence"}]
    seen = observe_pod(body)
    assert seen.fence_failure == message and seen.service_failure is None
    plan = plan_for()
    action, decided, _ = m.next_action(with_pod(plan), plan, pods(seen), at(5))
    assert isinstance(action, m.Finish)
    failed = cond(decided, "Failed")
    assert failed.reason == "NetworkPolicyUnenforceable"
    assert failed.message == f"the environment pod: {message}"
    passed = {**status, "initContainerStatuses": [{"name": "fence", "state": {
        "terminated": {"exitCode": 0, "reason": "Completed"}}}]}
    assert observe_pod(pod(status=passed)).fence_failure is None


def test_a_main_container_whose_fence_failed_fails_the_trial_unenforceable() -> None:
    """Where the main container's command is the runner's fence (the image's ENTRYPOINT
    after it), its failure is the container's end, in the fence's words. A main container
    that is not the fence, or whose message is not the fence's, is a lost pod as before."""
    from shipyard.api.conventions import RUNNER_PATH

    message = ("network policy not in force after 60 s: the pod still reached the apiserver "
               "at 10.96.0.1:443, which the phase's policy blocks. ...")
    status = {"phase": "Failed", "conditions": [{"type": "PodScheduled", "status": "True"}],
              "containerStatuses": [{"name": "main", "state": {"terminated": {
                  "exitCode": 1, "reason": "Error", "message": message}}}]}
    body = pod(status=status)
    body["spec"]["containers"] = [{"name": "main", "command": [RUNNER_PATH, "fence", "60"]}]
    seen = observe_pod(body)
    assert seen.fence_failure == message
    plan = plan_for()
    action, decided, _ = m.next_action(with_pod(plan), plan, pods(seen), at(5))
    assert isinstance(action, m.Finish)
    assert cond(decided, "Failed").reason == "NetworkPolicyUnenforceable"
    body["spec"]["containers"] = [{"name": "main", "args": ["sleep", "infinity"]}]
    assert observe_pod(body).fence_failure is None  # the image's own program said it
    body["spec"]["containers"] = [{"name": "main", "command": [RUNNER_PATH, "fence", "60"]}]
    body["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = "segfault"
    assert observe_pod(body).fence_failure is None
