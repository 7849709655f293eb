"""`shipyard results --json`: Trials in the shape of Harbor's TrialResult / JobResult."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from shipyard.cli.harbor_results import (
    exception_info,
    job_result,
    outcome,
    trial_files,
    trial_result,
)

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
TRIAL_RESULT_FIELDS = {
    "id", "task_name", "trial_name", "trial_uri", "task_id", "source", "task_checksum", "config",
    "agent_info", "agent_result", "verifier_result", "verifier_environment_mode",
    "exception_info", "started_at", "finished_at", "environment_setup", "agent_setup",
    "agent_execution", "verifier", "step_results",
}
JOB_STATS_FIELDS = {
    "n_completed_trials", "n_errored_trials", "n_running_trials", "n_pending_trials",
    "n_cancelled_trials", "n_retries", "n_input_tokens", "n_cache_tokens", "n_output_tokens",
    "cost_usd", "evals",
}


def record(name, start, end, step=None, **extra):
    return {"name": name, "step": step, "state": "Succeeded", "startedAt": start,
            "finishedAt": end, **extra}


def trial(name, agent="oracle", task="hello", rewards=None, phase="Completed", failed=None,
          phases=None, steps=None, labels=None, attempts=None):
    conditions = []
    if failed:
        conditions.append({"type": "Failed", "status": "True", "reason": failed[0],
                           "message": failed[1], "lastTransitionTime": "2026-11-22T11:00:09Z"})
    elif phase == "Completed":
        conditions.append({"type": "Complete", "status": "True", "reason": "RewardRecorded"})
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                     "labels": labels or {}},
        "spec": {"taskRef": {"name": task}, "agent": {"name": agent}, "timeoutMultiplier": 2.0},
        "status": {
            "phase": phase, "rewards": rewards,
            "reward": None if rewards is None else rewards.get("reward"),
            "conditions": conditions, "taskDigest": "sha256:abc",
            "startedAt": "2026-11-22T11:00:00Z",
            "finishedAt": "2026-11-22T11:00:10Z" if phase in ("Completed", "Failed") else None,
            "phases": phases if phases is not None else [
                record("environment", "2026-11-22T11:00:00Z", "2026-11-22T11:00:02Z"),
                record("agent", "2026-11-22T11:00:02Z", "2026-11-22T11:00:05Z"),
                record("verifier", "2026-11-22T11:00:05Z", "2026-11-22T11:00:09Z"),
            ],
            "steps": steps or [], "attempts": attempts or [],
        },
    }


TASK = {"metadata": {"name": "hello", "namespace": "ns"},
        "status": {"digest": "sha256:abc", "summary": {"steps": 1, "verifierMode": "shared"}}}


def test_trial_result_has_harbors_fields_and_timings():
    result = trial_result(trial("t1", rewards={"reward": 1.0}), TASK)
    assert set(result) == TRIAL_RESULT_FIELDS
    assert result["id"] == "uid-t1"
    assert result["task_name"] == "hello"
    assert result["task_checksum"] == "abc"
    assert result["verifier_result"] == {"rewards": {"reward": 1.0}}
    assert result["verifier_environment_mode"] == "shared"
    assert result["exception_info"] is None
    assert result["agent_info"] == {"name": "oracle", "version": "unknown", "model_info": None}
    assert result["config"] == {"task": {"path": "ns/hello"}, "trial_name": "t1",
                                "agent": {"name": "oracle"}, "timeout_multiplier": 2.0}
    assert result["environment_setup"] == {"started_at": "2026-11-22T11:00:00Z",
                                           "finished_at": "2026-11-22T11:00:02Z"}
    assert result["agent_execution"]["started_at"] == "2026-11-22T11:00:02Z"
    assert result["verifier"]["finished_at"] == "2026-11-22T11:00:09Z"
    assert result["agent_setup"] is None
    assert result["step_results"] == []
    json.dumps(result)  # JSON-able


@pytest.mark.parametrize(("reason", "harbor"), [
    ("RewardFileMissing", "RewardFileNotFoundError"),
    ("RewardFileEmpty", "RewardFileEmptyError"),
    ("RewardFileInvalid", "VerifierOutputParseError"),
    ("VerifierTimeout", "VerifierTimeoutError"),
    ("EnvironmentStartTimeout", "EnvironmentStartTimeoutError"),
    ("PodLost", "PodLostError"),
])
def test_failures_become_harbor_exceptions(reason, harbor):
    info = exception_info(trial("t", phase="Failed", failed=(reason, "why")))
    assert info == {"exception_type": harbor, "exception_message": "why",
                    "exception_traceback": "", "occurred_at": "2026-11-22T11:00:09Z"}


def test_agent_timeout_is_recorded_although_the_trial_has_a_reward():
    phases = [record("agent", "2026-11-22T11:00:02Z", "2026-11-22T11:00:05Z", timedOut=True,
                     message="agent timed out after 3s")]
    info = exception_info(trial("t", rewards={"reward": 1.0}, phases=phases))
    assert info["exception_type"] == "AgentTimeoutError"
    assert info["exception_message"] == "agent timed out after 3s"


def test_the_recorded_error_wins():
    t = trial("t", rewards={"reward": 0.0})
    t["status"]["error"] = {"type": "NonZeroAgentExitCodeError", "message": "exit 3"}
    assert exception_info(t)["exception_type"] == "NonZeroAgentExitCodeError"
    t = trial("t", phase="Failed", failed=("PodLost", "gone"))
    t["status"]["error"] = {"type": "PodLost", "message": "gone"}
    assert exception_info(t) == {"exception_type": "PodLostError", "exception_message": "gone",
                                 "exception_traceback": "",
                                 "occurred_at": "2026-11-22T11:00:09Z"}


def test_multi_step_results_go_per_step():
    phases = [
        record("environment", "2026-11-22T11:00:00Z", "2026-11-22T11:00:01Z"),
        record("agent", "2026-11-22T11:00:01Z", "2026-11-22T11:00:02Z", step="one"),
        record("verifier", "2026-11-22T11:00:02Z", "2026-11-22T11:00:03Z", step="one"),
        record("agent", "2026-11-22T11:00:03Z", "2026-11-22T11:00:04Z", step="two"),
    ]
    steps = [{"name": "one", "rewards": {"reward": 1.0}},
             {"name": "two", "state": "Failed", "error": {"type": "RewardFileMissing",
                                                          "message": "no reward"}}]
    task = {"status": {"summary": {"steps": 2, "verifierMode": "shared"}}}
    result = trial_result(trial("m", rewards={"reward": 0.5}, phases=phases, steps=steps), task)
    assert result["verifier_environment_mode"] is None
    assert result["agent_execution"] is None and result["verifier"] is None
    one, two = result["step_results"]
    assert one["step_name"] == "one"
    assert one["verifier_result"] == {"rewards": {"reward": 1.0}}
    assert one["agent_execution"]["finished_at"] == "2026-11-22T11:00:02Z"
    assert two["exception_info"]["exception_type"] == "RewardFileNotFoundError"
    assert two["verifier"] is None


def pass_at_k(results):
    from shipyard.reconcile.sweep_results import eval_results

    base = {"trial_name": "t", "agent_info": {"name": "oracle"}, "exception_info": None}
    evals = eval_results([outcome({**base, **r}) for r in results])
    return evals["oracle__adhoc"].harbor()["pass_at_k"]


def test_pass_at_k():
    results = [
        {"task_name": "x", "verifier_result": {"rewards": {"reward": v}}} for v in (1, 0, 0, 0)
    ] + [{"task_name": "y", "verifier_result": None}] * 4
    # x: n=4, c=1 → pass@2 = 1 - (3/4 · 2/3) = 0.5, pass@4 = 1; y: 0. Means over tasks.
    assert pass_at_k(results) == {"2": 0.25, "4": 0.5}
    assert pass_at_k([{"task_name": "x", "verifier_result": {"rewards": {"reward": 0.5}}}]) == {}


def test_job_result_groups_evals_by_agent_and_dataset():
    trials = [
        trial("o1", rewards={"reward": 1.0}),
        trial("o2", rewards={"reward": 1.0}, labels={"shipyard.dev/sweep": "s1"}),
        trial("n1", agent="nop", rewards={"reward": 0.0}),
        trial("f1", agent="nop", phase="Failed", failed=("RewardFileMissing", "none")),
        trial("r1", agent="nop", phase="Running", rewards=None,
              attempts=[{"attempt": 1, "reason": "PodLost", "message": "gone"}]),
    ]
    job = job_result(trials, {"ns/hello": TASK}, NOW)
    assert job["n_total_trials"] == 5
    assert job["finished_at"] is None  # one is still running
    assert job["updated_at"] == "2026-11-22T12:00:00Z"
    stats = job["stats"]
    assert set(stats) == JOB_STATS_FIELDS
    assert stats["n_completed_trials"] == 4
    assert stats["n_running_trials"] == 1
    assert stats["n_errored_trials"] == 1
    assert stats["n_retries"] == 1
    assert set(stats["evals"]) == {"oracle__adhoc", "oracle__s1", "nop__adhoc"}
    nop = stats["evals"]["nop__adhoc"]
    assert nop["n_trials"] == 1 and nop["n_errors"] == 1
    assert nop["metrics"] == [{"mean": 0.0}]
    assert nop["reward_stats"] == {"reward": {"0.0": ["n1"]}}  # a float key, as Harbor's
    assert nop["exception_stats"] == {"RewardFileNotFoundError": ["f1"]}
    assert stats["evals"]["oracle__adhoc"]["metrics"] == [{"mean": 1.0}]
    assert [r["trial_name"] for r in job["trial_results"]] == ["o1", "o2", "n1", "f1", "r1"]
    json.dumps(job)


def test_installed_agent_tokens_and_cost_are_harbors_agent_context_summed_per_eval():
    def agent_trial(name, inputs, cost, model="anthropic/claude-sonnet-4-5"):
        t = trial(name, agent="claude-code", rewards={"reward": 1.0})
        t["spec"]["agent"].update({"model": model, "version": "2.1.330",
                                   "kwargs": {"max_turns": "5"}})
        t["status"]["agentResult"] = {"inputTokens": inputs, "cacheTokens": 0,
                                      "outputTokens": 10, "costUsd": cost, "turns": 2,
                                      "model": model}
        return t

    trials = [agent_trial("a1", 100, 0.5), agent_trial("a2", 50, None),
              trial("o1", rewards={"reward": 1.0})]
    result = trial_result(trials[0], TASK)
    assert result["agent_info"] == {"name": "claude-code", "version": "2.1.330",
                                    "model_info": {"name": "claude-sonnet-4-5",
                                                   "provider": "anthropic"}}
    assert result["agent_result"] == {"n_input_tokens": 100, "n_cache_tokens": 0,
                                      "n_output_tokens": 10, "cost_usd": 0.5,
                                      "metadata": {"turns": 2}}
    assert result["config"]["agent"]["model_name"] == "anthropic/claude-sonnet-4-5"
    assert result["config"]["agent"]["kwargs"] == {"max_turns": "5"}
    stats = job_result(trials, {"ns/hello": TASK}, NOW)["stats"]
    assert (stats["n_input_tokens"], stats["n_output_tokens"], stats["cost_usd"]) == (
        150, 20, 0.5)
    claude = stats["evals"]["claude-code__claude-sonnet-4-5__adhoc"]
    assert (claude["n_input_tokens"], claude["cost_usd"]) == (150, 0.5)
    assert stats["evals"]["oracle__adhoc"]["cost_usd"] is None


def test_trial_files_follow_harbors_layout() -> None:
    result = {"trial_name": "t", "agent_info": {"name": "oracle"},
              "verifier_result": {"rewards": {"reward": 1.0}}, "step_results": []}
    files = trial_files(result, {"agent.log": "a", "verifier.log": "v",
                                     "s1.agent.log": "x", "verifier.ctrf.json": "{}",
                                     "verifier.test-stderr.txt": "e"})
    assert files["verifier/ctrf.json"] == "{}" and files["verifier/test-stderr.txt"] == "e"
    assert json.loads(files["result.json"])["trial_name"] == "t"
    assert files["verifier/reward.txt"] == "1\n"
    assert files["agent/oracle.txt"] == "a"
    assert files["verifier/test-stdout.txt"] == "v"
    assert files["steps/s1/agent/oracle.txt"] == "x"
    multi = dict(result, verifier_result={"rewards": {"a": 1, "b": 0.5}})
    assert json.loads(trial_files(multi, None)["verifier/reward.json"]) == {"a": 1, "b": 0.5}


def test_a_job_of_unstarted_trials_has_a_start_time() -> None:
    pending = trial("p1", phase="Pending", rewards=None)
    pending["metadata"]["creationTimestamp"] = "2026-11-22T11:59:00Z"
    pending["status"].pop("startedAt", None)
    job = job_result([pending], {"ns/hello": TASK}, NOW)
    assert job["started_at"] == "2026-11-22T11:59:00Z"  # Harbor's JobResult requires one
