"""The Sweep's reconcile: admission under the limits, and the status (counts, indexes, Harbor's
stats per eval key, conditions, size)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from shipyard.api.sweep import SweepSpec
from shipyard.plan.sweep import expand, trial_body
from shipyard.reconcile.sweep_status import (
    TaskState,
    admit,
    compress,
    is_settled,
    observe,
    pause_after,
    resolve_tasks,
    sweep_status,
    wakes,
    write_delay,
)

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def make_spec(**extra: Any) -> SweepSpec:
    base = {"tasks": {"names": ["a", "b"]}, "agents": [{"name": "oracle"}, {"name": "nop"}],
            "attempts": 2, "parallelism": 3}
    return SweepSpec.model_validate({**base, **extra})


def sweep_of(spec: SweepSpec, status: dict | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "sw", "namespace": "ns", "uid": "u", "generation": 1},
            "spec": spec.model_dump(by_alias=True), "status": status or {}}


def ready(*names: str) -> list[TaskState]:
    return [TaskState(n, "ready") for n in names]


def trial(spec: SweepSpec, slot, phase: str = "Pending", reward: float | None = None,
          generation: int = 0, reason: str | None = None, rewards: dict | None = None,
          agent_result: dict | None = None):
    body = trial_body(sweep_of(spec), spec, slot, generation)
    status: dict[str, Any] = {"phase": phase}
    if rewards is not None or reward is not None:
        status["rewards"] = rewards if rewards is not None else {"reward": reward}
        status["reward"] = reward
    if phase == "Completed":
        status["conditions"] = [{"type": "Complete", "status": "True",
                                 "reason": "RewardRecorded"}]
    if phase == "Failed":
        status["conditions"] = [{"type": "Failed", "status": "True",
                                 "reason": reason or "RewardFileMissing", "message": "x"}]
    if agent_result:
        status["agentResult"] = agent_result
    body["status"] = status
    return observe(body)


def test_admission_fills_parallelism_in_plan_order() -> None:
    spec = make_spec()
    slots = expand(["a", "b"], spec)
    assert [s.index for s, g in admit(spec, slots, ready("a", "b"), [])] == [0, 1, 2]
    running = [trial(spec, slots[0], "Running"), trial(spec, slots[1], "Completed", 1)]
    assert [s.index for s, _ in admit(spec, slots, ready("a", "b"), running)] == [2, 3]


def test_admission_honours_suspend_agent_and_task_limits() -> None:
    assert admit(make_spec(suspend=True), expand(["a", "b"], make_spec()), ready("a", "b"),
                 []) == []
    spec = make_spec(parallelism=10, perTaskParallelism=1)
    slots = expand(["a", "b"], spec)
    # one trial per task at once: attempts (and agents) of a task are serialized
    assert [(s.task, s.agent_key) for s, _ in admit(spec, slots, ready("a", "b"), [])] == [
        ("a", "oracle"), ("b", "oracle")]
    spec = make_spec(parallelism=10, agents=[{"name": "oracle", "parallelism": 1},
                                             {"name": "nop"}])
    slots = expand(["a", "b"], spec)
    picked = admit(spec, slots, ready("a", "b"), [])
    assert [s.agent_key for s, _ in picked].count("oracle") == 1
    assert [s.agent_key for s, _ in picked].count("nop") == 4


def test_admission_skips_tasks_that_are_not_ready() -> None:
    spec = make_spec(parallelism=10)
    slots = expand(["a", "b"], spec)
    states = [TaskState("a", "ready"), TaskState("b", "invalid", "task b: TaskInvalid: bad")]
    assert {s.task for s, _ in admit(spec, slots, states, [])} == {"a"}


def test_retry_unscored_creates_a_new_generation_only_for_slots_without_reward() -> None:
    spec = make_spec(parallelism=10, retryUnscored=1)
    slots = expand(["a", "b"], spec)
    trials = [trial(spec, s, "Completed", 1.0) for s in slots]
    trials[2] = trial(spec, slots[2], "Failed", reason="VerifierTimeout")
    assert [(s.index, g) for s, g in admit(spec, slots, ready("a", "b"), trials)] == [(2, 1)]
    trials.append(trial(spec, slots[2], "Failed", generation=1))  # the retry failed too
    assert admit(spec, slots, ready("a", "b"), trials) == []  # one round only
    status = sweep_status(sweep_of(spec), spec, ready("a", "b"), slots, trials, NOW)
    assert status.counts.retried == 1
    assert status.counts.failed == 1
    assert status.failed_indexes == "2"


def test_status_counts_indexes_evals_and_complete() -> None:
    spec = make_spec(attempts=5, parallelism=100)
    slots = expand(["a", "b"], spec)
    trials = []
    for s in slots:
        if s.agent_key == "oracle":
            trials.append(trial(spec, s, "Completed", 1.0))
        elif s.task == "b" and s.attempt == 3:
            trials.append(trial(spec, s, "Failed", reason="RewardFileMissing"))
        else:
            trials.append(trial(spec, s, "Completed", 0.0))
    status = sweep_status(sweep_of(spec), spec, ready("a", "b"), slots, trials, NOW)
    assert status.counts.planned == status.counts.completed == 20
    assert status.counts.failed == status.counts.errored == 1
    assert status.progress == "20/20"
    assert status.mean == 0.5
    assert status.completed_indexes == "0-19"
    assert status.failed_indexes == str(next(s.index for s in slots if s.task == "b"
                                             and s.attempt == 3 and s.agent_key == "nop"))
    evals = {e.key: e for e in status.evals}
    assert set(evals) == {"oracle__sw", "nop__sw"}
    assert evals["oracle__sw"].metrics == [{"mean": 1.0}]
    assert evals["oracle__sw"].pass_at_k == {"2": 1.0, "4": 1.0, "5": 1.0}
    assert evals["nop__sw"].n_trials == 9 and evals["nop__sw"].n_errors == 1
    assert evals["nop__sw"].exception_counts == {"RewardFileNotFoundError": 1}
    assert evals["nop__sw"].pass_at_k == {"2": 0.0, "4": 0.0, "5": 0.0}
    assert [c.type for c in status.conditions] == ["Complete", "TasksReady"]


def test_status_in_progress_and_suspended() -> None:
    spec = make_spec(suspend=True)
    slots = expand(["a", "b"], spec)
    trials = [trial(spec, slots[0], "Running"), trial(spec, slots[1], "Completed", 0.0)]
    status = sweep_status(sweep_of(spec), spec, ready("a", "b"), slots, trials, NOW)
    assert (status.counts.running, status.counts.completed, status.counts.created) == (1, 1, 2)
    assert status.completed_indexes == "1"
    assert status.progress == "1/8"
    types = {c.type: c for c in status.conditions}
    assert "Complete" not in types and types["Suspended"].status == "True"
    resumed = make_spec()
    status = sweep_status(sweep_of(resumed, {"conditions": [c.model_dump(by_alias=True)
                                                            for c in status.conditions]}),
                          resumed, ready("a", "b"), slots, trials, NOW)
    assert next(c for c in status.conditions if c.type == "Suspended").status == "False"
    again = sweep_status(sweep_of(resumed, {"conditions": [c.model_dump(by_alias=True)
                                                           for c in status.conditions]}),
                         resumed, ready("a", "b"), slots, trials, NOW)
    assert next(c for c in again.conditions if c.type == "Suspended").reason == "Resumed"


def test_bad_tasks_count_as_errors_and_are_named() -> None:
    spec = make_spec(tasks={"names": ["a", "gone", "bad"]}, attempts=1, parallelism=10)
    tasks = [{"metadata": {"name": "a", "generation": 1}, "status": {"observedGeneration": 1,
              "conditions": [{"type": "Ready", "status": "True"}]}},
             {"metadata": {"name": "bad", "generation": 1}, "status": {"observedGeneration": 1,
              "conditions": [{"type": "Ready", "status": "False", "reason": "TaskInvalid",
                              "message": "task.toml: [agent].timeout_sec: not a number"}]}}]
    states = resolve_tasks(spec, tasks, waited=120)
    assert [(t.name, t.state) for t in states] == [("a", "ready"), ("gone", "missing"),
                                                   ("bad", "invalid")]
    assert resolve_tasks(spec, tasks, waited=5)[1].state == "pending"
    slots = expand([t.name for t in states], spec)
    trials = [trial(spec, s, "Completed", 1.0 if s.agent_key == "oracle" else 0.0)
              for s in slots if s.task == "a"]
    status = sweep_status(sweep_of(spec), spec, states, slots, trials, NOW)
    assert status.counts.completed == 6 and status.counts.errored == 4
    cond = next(c for c in status.conditions if c.type == "TasksReady")
    assert cond.status == "False" and cond.reason == "TaskInvalid"
    assert "task gone not found" in cond.message and "task bad: TaskInvalid" in cond.message
    assert any(c.type == "Complete" for c in status.conditions)
    oracle = next(e for e in status.evals if e.agent == "oracle")
    assert oracle.exception_counts == {"TaskInvalidError": 1, "TaskNotFoundError": 1}
    assert oracle.metrics == [{"mean": pytest.approx(1 / 3)}]


def test_empty_selection_and_duplicate_agents_fail_the_sweep() -> None:
    spec = make_spec(tasks={"selector": {"matchLabels": {"dataset": "none"}}})
    status = sweep_status(sweep_of(spec), spec, [], [], [], NOW)
    failed = next(c for c in status.conditions if c.type == "Failed")
    assert failed.reason == "NoTasks" and "dataset" in failed.message
    spec = make_spec(agents=[{"name": "nop"}, {"name": "nop"}])
    slots = expand(["a"], spec)
    status = sweep_status(sweep_of(spec), spec, ready("a"), slots, [], NOW)
    assert next(c for c in status.conditions if c.type == "Failed").reason == "DuplicateAgents"
    assert admit(spec, slots, ready("a"), []) == []


def test_a_plan_over_the_limit_holds_no_slot_and_fails_the_sweep_saying_why() -> None:
    """attempts: 1,000,000,000 used to be expanded slot by slot: the operator's memory grew
    by 340 MB in 20 s until it was killed."""
    import time

    from shipyard.api.sweep import MAX_TRIALS

    with pytest.raises(ValueError, match="less than or equal to 100000"):
        make_spec(attempts=10**9)
    spec = make_spec(attempts=MAX_TRIALS)  # x 2 tasks x 2 agents
    names = ready("a", "b")
    started = time.monotonic()
    slots = expand(["a", "b"], spec)
    assert slots == [] and time.monotonic() - started < 0.1
    status = sweep_status(sweep_of(spec), spec, names, slots, [], NOW)
    failed = next(c for c in status.conditions if c.type == "Failed")
    assert failed.reason == "TooManyTrials"
    assert "100,000 attempts x 2 tasks x 2 agents is 400,000 trials: more than the 100,000" \
        in failed.message
    assert admit(spec, slots, names, []) == []
    assert len(expand(["a", "b"], make_spec(attempts=MAX_TRIALS // 4))) == MAX_TRIALS


def test_selector_and_names_resolve_in_order() -> None:
    spec = make_spec(tasks={"names": ["z"], "selector": {
        "matchLabels": {"ds": "x"},
        "matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]}})
    def task(name, labels):
        return {"metadata": {"name": name, "labels": labels}, "status": {"conditions": [
            {"type": "Ready", "status": "True"}]}}
    tasks = [task("b", {"ds": "x"}), task("a", {"ds": "x"}), task("c", {"ds": "y"}),
             task("d", {"ds": "x", "skip": "1"}), task("z", {})]
    assert [t.name for t in resolve_tasks(spec, tasks, 0)] == ["z", "a", "b"]


def test_tokens_and_cost_are_summed_when_reported() -> None:
    spec = make_spec(attempts=1)
    slots = expand(["a"], spec)
    trials = [trial(spec, slots[0], "Completed", 1.0,
                    agent_result={"inputTokens": 10, "outputTokens": 5, "costUsd": 0.5}),
              trial(spec, slots[1], "Completed", 0.0,
                    agent_result={"inputTokens": 1, "cacheTokens": 2})]
    status = sweep_status(sweep_of(spec), spec, ready("a"), slots, trials, NOW)
    assert (status.n_input_tokens, status.n_cache_tokens, status.n_output_tokens,
            status.cost_usd) == (11, 2, 5, 0.5)


def test_tokens_and_cost_are_summed_per_eval_key() -> None:
    """Two installed agents x 3 attempts: each eval key sums its own Trials' agentResult
    (a Trial that reports no cost leaves its key's cost null, a superseded retry counts not)."""
    spec = make_spec(tasks={"names": ["hello"]}, attempts=3, agents=[
        {"name": "claude-code", "model": "anthropic/stub-solve-cc"},
        {"name": "codex", "model": "stub-solve-cx"}])
    slots = expand(["hello"], spec)
    usage = {"claude-code": {"inputTokens": 200, "cacheTokens": 20, "outputTokens": 30,
                             "costUsd": 0.1},
             "codex": {"inputTokens": 150, "cacheTokens": 0, "outputTokens": 15}}
    trials = [trial(spec, s, "Completed", 1.0 if s.agent == 0 else 0.0,
                    agent_result=usage[spec.agents[s.agent].name]) for s in slots]
    trials.append(trial(spec, slots[0], "Failed", generation=-1,  # an older, superseded try
                        agent_result={"inputTokens": 10**6, "costUsd": 9.0}))
    status = sweep_status(sweep_of(spec), spec, ready("hello"), slots, trials, NOW)
    evals = {e.key: e for e in status.evals}
    assert set(evals) == {"claude-code__stub-solve-cc__sw", "codex__stub-solve-cx__sw"}
    cc, cx = evals["claude-code__stub-solve-cc__sw"], evals["codex__stub-solve-cx__sw"]
    assert (cc.planned, cc.finished, cc.n_trials, cc.metrics) == (3, 3, 3, [{"mean": 1.0}])
    assert (cx.planned, cx.finished, cx.n_trials, cx.metrics) == (3, 3, 3, [{"mean": 0.0}])
    assert (cc.n_input_tokens, cc.n_cache_tokens, cc.n_output_tokens) == (600, 60, 90)
    # Added trial by trial from 0.0, as Harbor's JobStats: its float noise too.
    assert cc.cost_usd == 0.30000000000000004
    assert (cx.n_input_tokens, cx.n_cache_tokens, cx.n_output_tokens, cx.cost_usd) == (
        450, 0, 45, None)
    assert (status.n_input_tokens, status.n_output_tokens, status.cost_usd) == (
        1050, 135, 0.30000000000000004)
    dumped = status.model_dump(by_alias=True, mode="json")["evals"][0]
    assert {"nInputTokens", "nCacheTokens", "nOutputTokens", "costUsd"} <= set(dumped)


def test_compress() -> None:
    assert compress([]) == ""
    assert compress([3, 0, 1, 2, 5, 7, 8]) == "0-3,5,7-8"
    assert compress([4]) == "4"


def test_status_stays_under_64_kib_at_10000_planned_trials() -> None:
    # 500 tasks x 4 agents (with models) x 5 attempts, every other slot finished (the worst
    # case for the index ranges), half of those without a reward, several exception types.
    agents = [{"name": "command", "command": "x", "model": f"provider/model-{i}"}
              for i in range(4)]
    spec = make_spec(tasks={"names": [f"task-{i:04d}" for i in range(500)]}, agents=agents,
                     attempts=5, parallelism=1000)
    names = spec.tasks.names
    slots = expand(names, spec)
    assert len(slots) == 10_000
    reasons = ["RewardFileMissing", "VerifierTimeout", "AgentFailed", "PodLost"]
    trials = []
    for s in slots:
        if s.index % 2:
            continue
        if s.index % 4:
            trials.append(trial(spec, s, "Failed", reason=reasons[s.index % 3]))
        else:
            trials.append(trial(spec, s, "Completed", 1.0))
    status = sweep_status(sweep_of(spec), spec, ready(*names), slots, trials, NOW)
    size = len(json.dumps(status.model_dump(by_alias=True, mode="json")))
    assert status.counts.completed == 5000
    assert size <= 64 * 1024, size


def _status(completed: int, planned: int = 1000, conditions: list | None = None,
            running: int = 20) -> dict[str, Any]:
    return {"counts": {"planned": planned, "completed": completed, "running": running},
            "conditions": conditions or []}


def test_status_writes_are_spaced_by_progress_and_time_and_conditions_go_first() -> None:
    assert write_delay(_status(5), _status(5), 0.0, 10.0) is None  # nothing changed
    assert write_delay(None, _status(0), 1e9, 10.0) == 0.0  # the first one
    # 10 more slots finished: at most every `interval`
    assert write_delay(_status(0), _status(10), 4.0, 10.0) == 6.0
    assert write_delay(_status(0), _status(10), 12.0, 10.0) == 0.0
    # fewer: only after the heartbeat (running counts, mean)
    assert write_delay(_status(0), _status(3, running=19), 12.0, 10.0) == 48.0
    # a small plan moves in 5 % steps
    assert write_delay(_status(0, planned=40), _status(2, planned=40), 12.0, 10.0) == 0.0
    assert write_delay(_status(0, planned=12), _status(1, planned=12), 12.0, 10.0) == 0.0
    # a condition changes: within 2 s whatever the interval
    done = [{"type": "Complete", "status": "True", "reason": "AllTrialsFinished"}]
    assert write_delay(_status(999), _status(1000, conditions=done), 0.5, 10.0) == 1.5


def test_a_complete_sweep_is_settled_until_its_spec_changes() -> None:
    complete = {"observedGeneration": 2,
                "conditions": [{"type": "Complete", "status": "True", "reason": "x"}]}
    assert is_settled({"generation": 2}, complete)
    assert not is_settled({"generation": 3}, complete)  # retried or resumed since
    assert not is_settled({"generation": 2}, {"observedGeneration": 2, "conditions": []})
    assert not is_settled({"generation": 1}, None)



def test_only_a_new_trial_a_new_phase_or_a_result_wakes_the_sweep() -> None:
    spec = make_spec()
    slot = expand(["a", "b"], spec)[0]
    pending = trial(spec, slot)
    running = trial(spec, slot, "Running")
    assert wakes(None, pending)  # a Trial the Sweep did not know
    assert wakes(pending, running)  # the running count
    assert wakes(running, trial(spec, slot, "Completed", 1.0))  # a freed slot, a reward
    assert not wakes(running, trial(spec, slot, "Running"))  # its progress within a phase
    assert not wakes(running, running)  # an older event the index did not take
    assert not wakes(running, None)  # not a Trial of a sweep slot
    done = trial(spec, slot, "Completed", 1.0)
    assert wakes(done, trial(spec, slot, "Completed", 0.0))


def test_the_pause_between_passes_keeps_a_pass_a_tenth_of_the_time() -> None:
    assert pause_after(0.0) == pytest.approx(0.05)  # cheap: a freed slot is refilled at once
    assert pause_after(0.02) == pytest.approx(0.2)
    assert pause_after(0.2) == pytest.approx(0.5)  # 10,000 slots: at most every half second
    for spent in (0.001, 0.01, 0.04):
        assert spent / (spent + pause_after(spent)) <= 0.1
