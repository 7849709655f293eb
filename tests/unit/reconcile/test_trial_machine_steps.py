"""The pure trial state machine, driven through whole multi-step trials with synthetic runner
results (docs/harbor.md §b.4 multi-step flow, §b.4 stop conditions and reward strategies, §b.6 step
failure semantics). The slow end-to-end counterpart is tests/e2e/test_multi_step.py."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from datetime import timedelta

import pytest

from shipyard.api.models import StepRecord, TrialStatus
from shipyard.plan.phases import REWARD_JSON, REWARD_TXT, TEST_STDOUT, TrialPlan
from shipyard.reconcile import trial_machine as m
from shipyard.reconcile.pod_observation import PodObservation
from shipyard.reconcile.runner_output import PhaseStatus
from shipyard.render.phase_scripts import phase_scripts as scripts
from shipyard.taskformat import LoadedTask, load_task_files
from tests.unit.helpers import T0, done, plan_for, read_back, running

from .test_trial_machine import ABSENT, READY, cond
from .test_trial_machine import Run as SingleStepRun

ENV_POD = "steps-env"
VERIFIER_POD = "steps-verifier"
HEADER = ('schema_version = "1.4"\n[environment]\ndocker_image = "python:3.12-slim"\n'
          'workdir = "/app"\n')
SEPARATE = '[verifier]\nenvironment_mode = "separate"\n'


# ---------------------------------------------------------------- building tasks


def steps_task(steps: dict[str, str], *, strategy: str | None = None, root: str = "",
               extra: dict[str, str] | None = None) -> LoadedTask:
    """A multi-step task: `steps` maps each step name (in order) to extra `[[steps]]` TOML."""
    toml = "" if strategy is None else f'multi_step_reward_strategy = "{strategy}"\n'
    toml += HEADER + root
    for name, settings in steps.items():
        toml += (f'[[steps]]\nname = "{name}"\n{textwrap.dedent(settings)}'
                 "[steps.agent]\ntimeout_sec = 60.0\n")
    files = {"task.toml": toml}
    for name in steps:
        files[f"steps/{name}/instruction.md"] = f"Step {name}.\n"
        files[f"steps/{name}/tests/test.sh"] = (
            "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    files.update(extra or {})
    return load_task_files({k: v.encode() for k, v in files.items()}, name="steps")


def steps_plan(steps: dict[str, str], *, agent: str = "nop", strategy: str | None = None,
               root: str = "", extra: dict[str, str] | None = None) -> TrialPlan:
    spec = {"name": agent, "command": "./agent"} if agent == "command" else {"name": agent}
    return plan_for(steps_task(steps, strategy=strategy, root=root, extra=extra), agent=spec)


def rewarded(payload: str) -> PhaseStatus:
    """A verifier that wrote `payload` to reward.json."""
    return done(files={REWARD_JSON: payload.encode(), TEST_STDOUT: b"ok\n"})


def rewarded_txt(value: str) -> PhaseStatus:
    return done(files={REWARD_TXT: value.encode(), TEST_STDOUT: b"ok\n"})


# ---------------------------------------------------------------- driving


@dataclass
class Run(SingleStepRun):
    def launched(self) -> list[str]:
        return [a.split(":", 1)[1] for a in self.actions if a.startswith("Launch:")]


def label(action: m.Action) -> str:
    match action:
        case m.CreatePod():
            return f"CreatePod:{action.role}" + (f"@{action.step}" if action.step else "")
        case m.StopPod():
            return f"StopPod:{action.role}"
        case m.Launch() | m.ReadResult():
            return f"{type(action).__name__}:{action.phase}"
        case _:
            return type(action).__name__


def observed(status: TrialStatus) -> m.Pods:
    """Every pod the status names exists and is ready; the others are absent."""
    env: PodObservation = READY if status.pod_name else ABSENT
    verifier: PodObservation = READY if status.verifier_pod_name else ABSENT
    return m.Pods(env=env, verifier=verifier)


def drive_steps(plan: TrialPlan, results: dict[str, PhaseStatus] | None = None, *,
                round_trip: bool = False, stop_after: str | None = None,
                max_steps: int = 120) -> Run:
    """Run a multi-step trial to its end (or until the action labelled `stop_after` is carried
    out). Both pods are ready whenever they exist; every launched phase finishes with
    `results[phase id]`: by default exit 0, a verifier writing reward 1."""
    results = results or {}
    run = Run(m.start(TrialStatus(), plan, "sha256:digest", 1, T0))
    now = T0
    for _ in range(max_steps):
        now += timedelta(seconds=1)
        if round_trip:
            run.status = read_back(run.status)
        action, decided, outcome = m.next_action(run.status, plan, observed(run.status), now)
        if decided is not None:
            run.status = decided
        if outcome is not None:
            run.events += outcome.events
        run.actions.append(label(action))
        match action:
            case m.CreatePod():
                name = ENV_POD if action.role == "env" else VERIFIER_POD
                run.status = m.on_pod_created(run.status, action.role, name, now)
            case m.StopPod():
                run.status = m.on_pod_stopped(run.status, action.role)
            case m.Launch():
                run.status, outcome = m.on_launch(run.status, action.phase, running(now), now)
                run.events += outcome.events
            case m.ReadResult():
                default = rewarded_txt("1") if plan.phase(action.phase).name == "verifier" \
                    else done()
                result = results.get(action.phase, default)
                run.status, outcome = m.on_result(run.status, plan, action.phase, result, now)
                run.events += outcome.events
                run.logs.update(outcome.logs)
            case m.Finish():
                run.status = m.finished(run.status, now)
            case m.Done():
                return run
            case _:
                raise AssertionError(f"unexpected {action} after {run.actions}")
        if run.actions[-1] == stop_after:
            return run
    raise AssertionError(f"no end after {max_steps} steps: {run.actions}")


def step(status: TrialStatus, name: str) -> StepRecord:
    record = m.step_record(status, name)
    assert record is not None, f"no step {name} in {status.steps}"
    return record


def phase_states(status: TrialStatus) -> dict[str, str]:
    return {r.id: r.state for r in status.phases}


THREE = {"a": "", "b": "", "c": ""}
THREE_RESULTS = {
    "s1-verifier": rewarded('{"reward": 1}'),
    "s2-verifier": rewarded('{"reward": 0.5}'),
    "s3-verifier": rewarded('{"reward": 1, "style": 0.2}'),
}


# ---------------------------------------------------------------- reward strategies


@pytest.mark.parametrize("strategy", [None, "mean"], ids=["default", "explicit-mean"])
def test_mean_is_per_key_with_missing_keys_counting_as_zero(strategy: str | None) -> None:
    """Harbor's verified example (docs/harbor.md §b.4): {reward:1}, {reward:0.5}, {reward:1,
    style:0.2} → {reward: 0.8333, style: 0.0667}; mean is the default strategy."""
    plan = steps_plan(THREE, strategy=strategy)
    assert plan.reward_strategy == "mean"
    run = drive_steps(plan, THREE_RESULTS)
    status = run.status
    assert status.phase == "Completed"
    assert status.rewards == pytest.approx({"reward": 2.5 / 3, "style": 0.2 / 3})
    assert status.reward == pytest.approx(0.8333, abs=1e-4)
    assert status.rewards["style"] == pytest.approx(0.0667, abs=1e-4)
    assert [(s.name, s.state, s.rewards) for s in status.steps] == [
        ("a", "Succeeded", {"reward": 1.0}),
        ("b", "Succeeded", {"reward": 0.5}),
        ("c", "Succeeded", {"reward": 1.0, "style": 0.2}),
    ]
    assert all(s.error is None and s.message is None for s in status.steps)
    assert status.error is None
    complete = cond(status, "Complete")
    assert (complete.status, complete.reason) == ("True", "RewardRecorded")
    assert "stopped" not in complete.message
    assert cond(status, "Failed") is None
    assert [e for e in run.events if e[1] == "StepRewarded"] == [
        ("Normal", "StepRewarded", "step a: reward=1"),
        ("Normal", "StepRewarded", "step b: reward=0.5"),
        ("Normal", "StepRewarded", "step c: reward=1, style=0.2"),
    ]


def test_final_strategy_takes_the_last_steps_rewards() -> None:
    run = drive_steps(steps_plan(THREE, strategy="final"), THREE_RESULTS)
    assert run.status.phase == "Completed"
    assert run.status.rewards == {"reward": 1.0, "style": 0.2}
    assert run.status.reward == 1.0
    # The per-step records are the same whatever the strategy.
    assert [s.rewards for s in run.status.steps] == [
        {"reward": 1.0}, {"reward": 0.5}, {"reward": 1.0, "style": 0.2}]


def test_final_strategy_is_not_a_mean_even_when_the_last_step_scores_lowest() -> None:
    results = {"s1-verifier": rewarded_txt("1"), "s2-verifier": rewarded_txt("1"),
               "s3-verifier": rewarded_txt("0")}
    final = drive_steps(steps_plan(THREE, strategy="final"), results).status
    mean = drive_steps(steps_plan(THREE, strategy="mean"), results).status
    assert (final.phase, final.rewards) == ("Completed", {"reward": 0.0})
    assert mean.rewards == pytest.approx({"reward": 2 / 3})


def test_final_strategy_passes_an_empty_last_result_through() -> None:
    """Harbor's `final` is the last executed step's verifier_result, even `{}`: the trial is
    graded (Complete, no `reward` key), as a single-step `{}` is."""
    results = {"s1-verifier": rewarded_txt("1"), "s2-verifier": rewarded_txt("1"),
               "s3-verifier": rewarded("{}")}
    final = drive_steps(steps_plan(THREE, strategy="final"), results).status
    assert (final.phase, final.rewards, final.reward) == ("Completed", {}, None)


# ---------------------------------------------------------------- phases, ordering, records


def test_each_step_runs_setup_healthcheck_agent_verifier_in_order() -> None:
    """One environment pod for all steps, prepared once (docs/harbor.md §b.4); then per step: setup
    (its workdir and setup.sh), its own healthcheck, the agent, its verifier."""
    plan = steps_plan(
        {"a": "", "b": '[steps.healthcheck]\ncommand = "test -f /ready"\n'},
        root='[environment.healthcheck]\ncommand = "true"\n',
        extra={"steps/b/workdir/setup.sh": "echo seeding\n"},
    )
    run = drive_steps(plan)
    assert run.actions == [
        "CreatePod:env",
        "Launch:environment", "ReadResult:environment",
        "Launch:healthcheck", "ReadResult:healthcheck",
        "Launch:s1-setup", "ReadResult:s1-setup",
        "Launch:s1-agent", "ReadResult:s1-agent",
        "Launch:s1-verifier", "ReadResult:s1-verifier",
        "Launch:s2-setup", "ReadResult:s2-setup",
        "Launch:s2-healthcheck", "ReadResult:s2-healthcheck",
        "Launch:s2-agent", "ReadResult:s2-agent",
        "Launch:s2-verifier", "ReadResult:s2-verifier",
        "Finish", "Done",
    ]
    assert [(r.id, r.name, r.step, r.state) for r in run.status.phases] == [
        ("environment", "environment", None, "Succeeded"),
        ("healthcheck", "healthcheck", None, "Succeeded"),
        ("s1-setup", "setup", "a", "Succeeded"),
        ("s1-agent", "agent", "a", "Succeeded"),
        ("s1-verifier", "verifier", "a", "Succeeded"),
        ("s2-setup", "setup", "b", "Succeeded"),
        ("s2-healthcheck", "healthcheck", "b", "Succeeded"),
        ("s2-agent", "agent", "b", "Succeeded"),
        ("s2-verifier", "verifier", "b", "Succeeded"),
    ]
    assert all(r.launched and r.exit_code == 0 and r.finished_at for r in run.status.phases)
    assert run.status.phase == "Completed"
    assert run.status.rewards == {"reward": 1.0}
    # The step's setup phase runs the uploaded setup.sh only where there is one.
    assert "setup.sh" in scripts(plan.phase("s2-setup")).command
    assert "setup.sh" not in scripts(plan.phase("s1-setup")).command
    # Only after a shared verifier ran are /logs/verifier and /tests reset (docs/harbor.md §b.4
    # 2.2).
    assert "rm -rf /logs/verifier /tests" in scripts(plan.phase("s2-setup")).prepare
    assert "/tests" not in scripts(plan.phase("s1-setup")).prepare


def test_step_records_follow_the_run_and_current_phase_names_the_step() -> None:
    plan = steps_plan({"a": "", "b": ""})
    start = m.start(TrialStatus(), plan, "sha256:digest", 1, T0)
    assert [(s.name, s.state, s.rewards) for s in start.steps] == [
        ("a", "Pending", None), ("b", "Pending", None)]
    assert m.with_current_phase(start).current_phase == "environment"

    mid = drive_steps(plan, {"s1-verifier": rewarded_txt("0.75")},
                      stop_after="Launch:s2-agent").status
    assert [(s.name, s.state, s.rewards) for s in mid.steps] == [
        ("a", "Succeeded", {"reward": 0.75}), ("b", "Running", None)]
    assert m.with_current_phase(mid).current_phase == "b/agent"
    assert (cond(mid, "Running").status, cond(mid, "Running").reason) == ("True", "AgentRunning")
    assert cond(mid, "Running").message == "step b: agent running"
    assert mid.rewards is None and terminal_free(mid)

    end = drive_steps(plan, {"s1-verifier": rewarded_txt("0.75")}).status
    assert m.with_current_phase(end).current_phase is None
    assert end.rewards == {"reward": pytest.approx(0.875)}


def terminal_free(status: TrialStatus) -> bool:
    return m.terminal_condition(status) is None


def test_logs_are_kept_per_step() -> None:
    plan = steps_plan({"a": "", "b": ""}, agent="command")
    run = drive_steps(plan, {
        "s1-agent": done(files={"/logs/agent/command.txt": b"agent a\n"}),
        "s1-verifier": done(files={REWARD_TXT: b"1", TEST_STDOUT: b"tests a\n"}),
        "s2-agent": done(files={"/logs/agent/command.txt": b"agent b\n"}),
        "s2-verifier": done(files={REWARD_TXT: b"1", TEST_STDOUT: b"tests b\n"}),
    })
    assert run.logs == {"a.agent.log": "agent a\n", "a.verifier.log": "tests a\n",
                        "b.agent.log": "agent b\n", "b.verifier.log": "tests b\n"}


def test_separate_verifiers_get_a_pod_per_step_and_the_env_stops_before_the_last() -> None:
    """A fresh verifier environment per step (docs/harbor.md §b.4); with the release setting
    off, the agent environment is stopped only before the last step's separate verification
    (docs/harbor.md §b.4), its verifier pod created beside it."""
    from dataclasses import replace

    plan = replace(steps_plan({"a": "", "b": ""}, root=SEPARATE), release_environment=False)
    assert [s.verifier_mode for s in plan.steps] == ["separate", "separate"]
    run = drive_steps(plan, {"s1-verifier": rewarded_txt("1"),
                             "s2-verifier": rewarded_txt("0")})
    assert run.actions == [
        "CreatePod:env",
        "Launch:environment", "ReadResult:environment",
        "Launch:s1-setup", "ReadResult:s1-setup",
        "Launch:s1-agent", "ReadResult:s1-agent",
        "Launch:s1-collect", "ReadResult:s1-collect",
        "CreatePod:verifier@a",
        "Launch:s1-verifier-environment", "ReadResult:s1-verifier-environment",
        "Launch:s1-verifier", "ReadResult:s1-verifier",
        "StopPod:verifier",
        "Launch:s2-setup", "ReadResult:s2-setup",
        "Launch:s2-agent", "ReadResult:s2-agent",
        "Launch:s2-collect", "ReadResult:s2-collect",
        "CreatePod:verifier@b",
        "Launch:s2-verifier-environment", "ReadResult:s2-verifier-environment",
        "StopPod:env",
        "Launch:s2-verifier", "ReadResult:s2-verifier",
        "Finish", "Done",
    ]
    assert (run.status.phase, run.status.rewards) == ("Completed", {"reward": 0.5})
    assert [s.rewards for s in run.status.steps] == [{"reward": 1.0}, {"reward": 0.0}]
    assert [p.pod for p in plan.phases if p.name == "verifier"] == ["verifier", "verifier"]
    # The agent's pod never ran a shared verifier: nothing to reset before step b.
    assert "/tests" not in scripts(plan.phase("s2-setup")).prepare


# ---------------------------------------------------------------- min_reward


def test_with_the_release_setting_the_env_goes_before_the_last_verifier_pod_exists() -> None:
    """SHIPYARD_RELEASE_ENVIRONMENT (the default): as Harbor, the environment stops (its
    artifacts kept) before the last step's separate verifier pod is created, so the two never
    coexist."""
    from dataclasses import replace

    plan = replace(steps_plan({"a": "", "b": ""}, root=SEPARATE), release_environment=True)
    run = drive_steps(plan, {"s1-verifier": rewarded_txt("1"),
                             "s2-verifier": rewarded_txt("0")})
    at = run.actions.index("Launch:s2-collect")
    assert run.actions[at:at + 5] == [
        "Launch:s2-collect", "ReadResult:s2-collect", "StopPod:env", "CreatePod:verifier@b",
        "Launch:s2-verifier-environment"]
    assert run.actions.count("StopPod:env") == 1


def test_min_reward_scalar_stops_the_remaining_steps() -> None:
    """Harbor's verified example: an early stop after step 1 at 0.25 < 0.5 → {reward: 0.25}."""
    plan = steps_plan({"first": "min_reward = 0.5\n", "second": "", "third": ""})
    assert plan.step("first").min_reward == 0.5
    run = drive_steps(plan, {"s1-verifier": rewarded('{"reward": 0.25}')})
    status = run.status
    assert not [p for p in run.launched() if p.startswith(("s2-", "s3-"))]
    assert (status.phase, status.rewards, status.reward) == ("Completed", {"reward": 0.25}, 0.25)
    first, second, third = status.steps
    assert (first.state, first.rewards) == ("Succeeded", {"reward": 0.25})
    assert first.message == "stopped: reward 0.25 < min_reward 0.5"
    assert first.error is None
    assert (second.state, third.state) == ("Skipped", "Skipped")
    assert all(phase_states(status)[p] == "Skipped" for p in (
        "s2-setup", "s2-agent", "s2-verifier", "s3-setup", "s3-agent", "s3-verifier"))
    complete = cond(status, "Complete")
    assert complete.reason == "RewardRecorded"
    assert complete.message.endswith("; stopped after step first: reward 0.25 < min_reward 0.5")
    assert ("Warning", "MinRewardNotMet",
            "step first: reward 0.25 < min_reward 0.5; skipping the remaining steps") in run.events


@pytest.mark.parametrize(
    ("min_reward", "rewards", "why"),
    [
        ("{ correctness = 0.1 }", '{"reward": 0.25}', "correctness missing < min_reward 0.1"),
        ("{ reward = 0.1, style = 0.5 }", '{"reward": 1, "style": 0.4}',
         "style 0.4 < min_reward 0.5"),
        ("0.5", '{"accuracy": 1}', "reward missing < min_reward 0.5"),
    ],
    ids=["table-missing-key", "table-one-key-below", "scalar-without-reward-key"],
)
def test_min_reward_missing_key_counts_as_minus_infinity(min_reward: str, rewards: str,
                                                         why: str) -> None:
    """A float checks `reward`, a table checks every key; a missing key is -inf (docs/harbor.md
    §b.4)."""
    plan = steps_plan({"first": f"min_reward = {min_reward}\n", "second": ""})
    run = drive_steps(plan, {"s1-verifier": rewarded(rewards)})
    status = run.status
    first, second = status.steps
    assert first.message == f"stopped: {why}"
    assert (first.state, second.state) == ("Succeeded", "Skipped")
    assert "Launch:s2-setup" not in run.actions
    assert status.phase == "Completed"
    assert status.rewards == first.rewards
    assert f"stopped after step first: {why}" in cond(status, "Complete").message


@pytest.mark.parametrize(
    ("min_reward", "rewards"),
    [("0.5", '{"reward": 0.5}'), ("0", '{"reward": 0}'),
     ("{ reward = 0.5, style = 0.1 }", '{"reward": 0.5, "style": 0.1, "extra": 0}')],
    ids=["scalar-equal", "zero-threshold", "table-all-met"],
)
def test_min_reward_met_exactly_lets_the_next_steps_run(min_reward: str, rewards: str) -> None:
    plan = steps_plan({"first": f"min_reward = {min_reward}\n", "second": ""})
    run = drive_steps(plan, {"s1-verifier": rewarded(rewards)})
    assert "Launch:s2-agent" in run.actions
    assert [s.state for s in run.status.steps] == ["Succeeded", "Succeeded"]
    assert all(s.message is None for s in run.status.steps)
    assert "MinRewardNotMet" not in run.reasons()
    assert "stopped" not in cond(run.status, "Complete").message


def test_min_reward_stop_with_final_takes_the_stopped_step() -> None:
    """`final` is the last *executed* step's result, which may be the one that stopped."""
    plan = steps_plan({"a": "", "b": "min_reward = 0.9\n", "c": ""}, strategy="final")
    run = drive_steps(plan, {"s1-verifier": rewarded('{"reward": 1}'),
                             "s2-verifier": rewarded('{"reward": 0.3, "style": 1}')})
    assert [s.state for s in run.status.steps] == ["Succeeded", "Succeeded", "Skipped"]
    assert run.status.rewards == {"reward": 0.3, "style": 1.0}
    assert "stopped after step b: reward 0.3 < min_reward 0.9" in cond(
        run.status, "Complete").message


def test_min_reward_on_another_step_does_not_apply() -> None:
    plan = steps_plan({"a": "", "b": "min_reward = 0.9\n", "c": ""})
    run = drive_steps(plan, {"s1-verifier": rewarded_txt("0"),
                             "s2-verifier": rewarded_txt("1"),
                             "s3-verifier": rewarded_txt("0.5")})
    assert [s.state for s in run.status.steps] == ["Succeeded"] * 3
    assert run.status.rewards == pytest.approx({"reward": 0.5})


# ---------------------------------------------------------------- failing steps


def test_setup_failure_stops_the_trial_with_its_stderr() -> None:
    plan = steps_plan({"prep": "", "later": ""},
                      extra={"steps/prep/workdir/setup.sh": "echo seed failed >&2\nexit 3\n"})
    run = drive_steps(plan, {"s1-setup": done(3, output="database seed failed\n")})
    status = run.status
    assert run.launched() == ["environment", "s1-setup"]
    assert status.phase == "Failed"
    prep, later = status.steps
    assert prep.state == "Failed"
    assert prep.error.type == "RuntimeError"
    assert prep.error.message == (
        "Step 'prep' setup.sh exited with code 3: database seed failed")
    assert prep.message == "Step 'prep' failed, aborting remaining steps"
    assert prep.rewards is None
    assert later.state == "Skipped"
    assert phase_states(status) == {
        "environment": "Succeeded", "s1-setup": "Failed", "s1-agent": "Skipped",
        "s1-verifier": "Skipped", "s2-setup": "Skipped", "s2-agent": "Skipped",
        "s2-verifier": "Skipped"}
    assert m.record(status, "s1-setup").exit_code == 3
    failed = cond(status, "Failed")
    assert (failed.reason, failed.message) == (
        "StepFailed", "step prep: Step 'prep' setup.sh exited with code 3: database seed failed")
    assert (status.error.type, status.reward, status.rewards) == ("RuntimeError", None, None)
    assert cond(status, "Complete") is None
    assert "StepFailed" in run.reasons()


@pytest.mark.parametrize(("strategy", "phase", "rewards"),
                         [("mean", "Completed", {"reward": 0.75}), ("final", "Failed", None)])
def test_setup_failure_in_a_later_step_keeps_the_earlier_rewards_for_mean_only(
        strategy: str, phase: str, rewards: dict[str, float] | None) -> None:
    """mean averages the steps with a result; final takes the last executed step, the failed
    one, which has none (docs/harbor.md §b.4)."""
    plan = steps_plan({"a": "", "b": "", "c": ""}, strategy=strategy,
                      extra={"steps/b/workdir/setup.sh": "exit 1\n"})
    run = drive_steps(plan, {"s1-verifier": rewarded_txt("0.75"),
                             "s2-setup": done(1, output="no db")})
    status = run.status
    assert [s.state for s in status.steps] == ["Succeeded", "Failed", "Skipped"]
    assert step(status, "b").error.message == "Step 'b' setup.sh exited with code 1: no db"
    assert "Launch:s2-agent" not in run.actions
    assert (status.phase, status.rewards) == (phase, rewards)
    if phase == "Completed":
        assert cond(status, "Complete").message.endswith("; stopped after step b failed")
    else:
        assert cond(status, "Failed").reason == "StepFailed"
        assert status.error.type == "RuntimeError"


def test_step_healthcheck_failure_aborts_the_remaining_steps() -> None:
    plan = steps_plan({"a": '[steps.healthcheck]\ncommand = "test -f /ready"\n', "b": ""})
    message = "Healthcheck failed after 3 consecutive retries: test -f /ready"
    run = drive_steps(plan, {"s1-healthcheck": done(1, output=message)})
    a, b = run.status.steps
    assert (a.state, a.error.type, a.error.message) == ("Failed", "HealthcheckError", message)
    assert b.state == "Skipped"
    assert "Launch:s1-agent" not in run.actions
    assert cond(run.status, "Failed").reason == "StepFailed"
    assert run.status.error.type == "HealthcheckError"


def test_step_verifier_failure_aborts_and_mean_keeps_the_steps_with_a_result() -> None:
    """A verifier exception leaves the step without a result: it aborts (docs/harbor.md §b.4)."""
    plan = steps_plan({"a": "", "b": "", "c": ""})
    run = drive_steps(plan, {"s1-verifier": rewarded_txt("1"),
                             "s2-verifier": done(files={TEST_STDOUT: b"crashed\n"})})
    status = run.status
    a, b, c = status.steps
    assert (a.state, a.rewards) == ("Succeeded", {"reward": 1.0})
    assert (b.state, b.rewards, b.error.type) == ("Failed", None, "RewardFileNotFoundError")
    assert m.record(status, "s2-verifier").state == "Failed"
    assert c.state == "Skipped"
    assert "Launch:s3-setup" not in run.actions
    assert (status.phase, status.rewards) == ("Completed", {"reward": 1.0})


def test_verifier_failure_in_the_only_scored_step_fails_the_trial() -> None:
    plan = steps_plan({"a": "", "b": ""}, root="[verifier]\ntimeout_sec = 1200.0\n")
    run = drive_steps(plan, {"s1-verifier": done(143, timed_out=True)})
    status = run.status
    assert [s.state for s in status.steps] == ["Failed", "Skipped"]
    assert step(status, "a").error.type == "VerifierTimeoutError"
    assert status.phase == "Failed"
    assert cond(status, "Failed").reason == "StepFailed"
    assert status.error.type == "VerifierTimeoutError"
    # The step verifier's timeout (600 s default, not [verifier].timeout_sec: docs/harbor.md §a.5).
    assert status.error.message == "step a: Verifier execution timed out after 600 seconds"


@pytest.mark.parametrize(
    ("agent", "result", "error_type"),
    [
        ("nop", done(143, timed_out=True), "AgentTimeoutError"),
        ("command", done(2), "NonZeroAgentExitCodeError"),
        ("command", done(126, output="shipyard runner: preparing phase s1-agent failed\n"),
         "AgentError"),
    ],
    ids=["timeout", "non-zero-exit", "runner-failure"],
)
def test_agent_error_in_a_step_is_recorded_on_the_step_and_the_step_is_still_verified(
        agent: str, result: PhaseStatus, error_type: str) -> None:
    """Multi-step: every agent exception is recorded on the step, the step verifier still
    runs and its reward counts; it never stops the loop by itself (docs/harbor.md §b.4, §b.6)."""
    plan = steps_plan({"a": "", "b": ""}, agent=agent)
    run = drive_steps(plan, {"s1-agent": result, "s1-verifier": rewarded_txt("0.5"),
                             "s2-verifier": rewarded_txt("1")})
    status = run.status
    assert run.launched()[:5] == ["environment", "s1-setup", "s1-agent", "s1-verifier",
                                  "s2-setup"]
    a, b = status.steps
    assert (a.state, a.rewards, a.error.type) == ("Succeeded", {"reward": 0.5}, error_type)
    assert (b.state, b.rewards, b.error) == ("Succeeded", {"reward": 1.0}, None)
    assert m.record(status, "s1-agent").state == "Failed"
    assert status.phase == "Completed"
    assert status.rewards == {"reward": 0.75}
    assert status.error is None  # on the step, not the trial: never a trial retry


def test_agent_timeout_message_names_the_step_timeout() -> None:
    plan = steps_plan({"a": "", "b": ""})
    run = drive_steps(plan, {"s2-agent": done(143, timed_out=True)})
    b = step(run.status, "b")
    assert b.error.message == "Agent execution timed out after 60 seconds"
    assert m.record(run.status, "s2-agent").timed_out is True
    assert ("Warning", "AgentTimeout",
            "Agent execution timed out after 60 seconds; verifying anyway") in run.events
    assert "Launch:s2-verifier" in run.actions


# ---------------------------------------------------------------- restarts and retries


@pytest.mark.parametrize(
    ("steps", "root", "extra", "results"),
    [
        ({"a": "", "b": "min_reward = 0.9\n", "c": ""}, "",
         {"steps/b/workdir/setup.sh": "true\n"},
         {"s1-agent": done(143, timed_out=True), "s2-verifier": rewarded_txt("0.5")}),
        ({"a": "", "b": ""}, SEPARATE, {}, {"s2-verifier": rewarded('{"reward": 0.5}')}),
        ({"a": "", "b": ""}, "", {"steps/b/workdir/setup.sh": "exit 1\n"},
         {"s2-setup": done(1, output="boom")}),
    ],
    ids=["min-reward-stop", "separate-verifiers", "setup-failure"],
)
def test_status_read_back_from_the_api_at_every_step_changes_no_decision(
        steps: dict[str, str], root: str, extra: dict[str, str],
        results: dict[str, PhaseStatus]) -> None:
    """All multi-step state (step records, rewards, errors) survives the JSON round trip: a
    restarted operator resumes exactly."""
    plan = plan_for(steps_task(steps, root=root, extra=extra), agent={"name": "nop"})
    direct = drive_steps(plan, results)
    restarted = drive_steps(plan, results, round_trip=True)
    assert restarted.actions == direct.actions
    assert restarted.events == direct.events
    assert restarted.status.model_dump() == direct.status.model_dump()
    assert direct.status.steps and all(s.state != "Pending" for s in direct.status.steps)


def test_a_retry_after_a_lost_pod_starts_every_step_again() -> None:
    plan = steps_plan({"a": "", "b": ""})
    mid = drive_steps(plan, {"s1-verifier": rewarded_txt("1")},
                      stop_after="Launch:s2-agent").status
    lost = m.Pods(env=ABSENT, verifier=ABSENT)
    action, retried, outcome = m.next_action(mid, plan, lost, T0 + timedelta(minutes=5),
                                             retries=1)
    assert isinstance(action, m.Wait)
    assert retried is not None and outcome is not None
    assert (retried.attempt, len(retried.attempts), retried.attempts[0].reason) == (
        2, 1, "PodLost")
    assert [(s.name, s.state, s.rewards, s.error) for s in retried.steps] == [
        ("a", "Pending", None, None), ("b", "Pending", None, None)]
    assert [r.state for r in retried.phases] == ["Running"] + ["Pending"] * 6
    assert retried.rewards is None and retried.pod_name is None
    assert outcome.delete_pods == [ENV_POD]


def test_a_lost_pod_without_retries_marks_the_running_step_failed_not_skipped() -> None:
    plan = steps_plan({"a": "", "b": "", "c": ""})
    mid = drive_steps(plan, {"s1-verifier": rewarded_txt("1")},
                      stop_after="Launch:s2-agent").status
    action, decided, _ = m.next_action(mid, plan, m.Pods(env=ABSENT, verifier=ABSENT),
                                       T0 + timedelta(minutes=5))
    assert isinstance(action, m.Finish)
    assert cond(decided, "Failed").reason == "PodLost"
    assert m.record(decided, "s2-agent").state == "Failed"
    assert step(decided, "a").state == "Succeeded"
    assert step(decided, "c").state == "Skipped"
    assert step(decided, "b").state == "Failed"
    assert step(decided, "b").error.type == "PodLost"


def test_a_chain_is_the_environment_and_the_first_step_s_first_phase() -> None:
    plan = steps_plan({"one": "", "two": ""})
    assert m.chained_phases(plan, "environment") == ["environment", "s1-setup"]
    assert m.chained_phases(plan, "s1-verifier") == ["s1-verifier"]


# ---------------------------------------------------------------- issue 22 (class 6)


def test_the_logs_of_a_many_step_trial_fit_one_configmap() -> None:
    """Every step's agent and verifier logs at their limit stay under the apiserver's 1 MiB:
    the budget is split across the keys (above it, every write failed and the trial never
    ended)."""
    from shipyard.plan.phases import LOGS_BUDGET_BYTES

    names = {f"s{i}": "" for i in range(4)}
    plan = steps_plan(names, agent="command")
    assert plan.log_key_bytes < plan.log_limit_bytes
    big = "x" * (2 * plan.log_limit_bytes)
    results = {}
    for i in range(1, 5):
        results[f"s{i}-agent"] = done(files={"/logs/agent/command.txt": big.encode()})
        results[f"s{i}-verifier"] = done(files={REWARD_TXT: b"1", TEST_STDOUT: big.encode()})
    run = drive_steps(plan, results)
    assert run.status.phase == "Completed", run.status
    assert len(run.logs) == 8
    assert sum(len(k) + len(v.encode()) for k, v in run.logs.items()) <= LOGS_BUDGET_BYTES


def test_integer_rewards_stay_integers_across_steps_with_final() -> None:
    plan = steps_plan({"a": "", "b": ""}, strategy="final")
    run = drive_steps(plan, {"s2-verifier": rewarded('{"reward": 1, "tests": 7}')})
    assert run.status.rewards == {"reward": 1, "tests": 7}
    assert [type(v) for v in run.status.rewards.values()] == [int, int]


def test_a_driver_given_up_ends_the_trial_with_the_phase_s_reason() -> None:
    from datetime import UTC, datetime

    plan = steps_plan({"a": ""}, agent="command")
    run = drive_steps(plan, stop_after="Launch:s1-agent")
    status, outcome = m.given_up(run.status, "the operator failed 5 times in a row",
                                 datetime.now(UTC))
    assert status.phase == "Failed" or m.terminal_condition(status) is not None
    assert m.terminal_condition(status).reason == "AgentFailed"
    assert outcome.events[0][1] == "AgentFailed"
