"""The CLI's pure formatting: tables, ages, phase lines, trial manifests, log selection."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from click import ClickException
from rich.console import Console

from shipyard.api.conventions import bundle_configmap_name
from shipyard.cli.formatting import (
    TrialView,
    age,
    duration,
    outcome_line,
    phase_event,
    table,
    task_row,
    trial_row,
    waiting_note,
)
from shipyard.cli.get_cmd import log_keys
from shipyard.cli.pushing import task_resource_name
from shipyard.cli.run_cmd import parse_env, trial_body

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)


def trial(name="t1", phase="Completed", reward=1.0, conditions=None, phases=None, steps=None,
          **status):
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": "u-1",
                     "creationTimestamp": "2026-11-22T11:58:30Z"},
        "spec": {"taskRef": {"name": "hello"}, "agent": {"name": "oracle"}},
        "status": {
            "phase": phase, "reward": reward,
            "rewards": None if reward is None else {"reward": reward},
            "conditions": conditions or [], "phases": phases or [], "steps": steps or [],
            **status,
        },
    }


@pytest.mark.parametrize(("stamp", "expected"), [
    ("2026-11-22T11:59:58Z", "2s"), ("2026-11-22T11:55:00Z", "5m"),
    ("2026-11-22T09:00:00Z", "3h"), ("2026-11-19T12:00:00Z", "3d"), (None, "-"),
    ("garbage", "-"), ("2026-11-22T12:00:05Z", "0s"),
])
def test_age(stamp, expected):
    assert age(stamp, NOW) == expected


@pytest.mark.parametrize(("start", "end", "expected"), [
    ("2026-11-22T11:59:59Z", "2026-11-22T11:59:59Z", "<1s"),
    ("2026-11-22T11:59:50Z", "2026-11-22T11:59:53Z", "3s"),
    ("2026-11-22T11:59:50.000Z", "2026-11-22T11:59:51.500Z", "1.5s"),
    ("2026-11-22T11:50:00Z", "2026-11-22T11:53:04Z", "3m04s"),
    ("2026-11-22T09:00:00Z", None, "3h00m"),  # still running: up to now
    (None, None, ""),
])
def test_duration(start, end, expected):
    assert duration(start, end, NOW) == expected


def test_table_is_aligned_and_never_truncated():
    long = "x" * 150
    text = table(["NAME", "REWARD"], [[long, "1"], ["b", "0.5"]])
    lines = text.splitlines()
    assert lines[0] == "NAME" + " " * (150 - 4) + "   REWARD"
    assert lines[1] == long + "   1"
    assert lines[2].startswith("b ") and lines[2].endswith("   0.5")


def test_trial_rows_show_failure_reason_or_running_phase():
    done = trial()
    assert trial_row(done, NOW) == ["t1", "hello", "oracle", "Completed", "1", "", "1m"]
    failed = trial(phase="Failed", reward=None, conditions=[
        {"type": "Failed", "status": "True", "reason": "AgentFailed", "message": "exit 3"}])
    assert trial_row(failed, NOW)[3:6] == ["Failed", "-", "AgentFailed"]
    running = trial(phase="Running", reward=None, phases=[
        {"name": "environment", "state": "Succeeded"},
        {"name": "agent", "step": "build", "state": "Running"}])
    running["status"]["currentPhase"] = "build/agent"
    assert trial_row(running, NOW, namespace=True)[0] == "ns"
    assert trial_row(running, NOW)[5] == "build/agent"


def test_task_row():
    task = {"metadata": {"name": "hello", "creationTimestamp": "2026-11-22T11:00:00Z"},
            "status": {"digest": "sha256:0123456789abcdef", "conditions": [
                {"type": "Ready", "status": "False", "reason": "TaskInvalid"}],
                "summary": {"steps": 2, "verifierMode": "separate", "image": "img",
                            "network": "no-network"}}}
    assert task_row(task, NOW) == ["hello", "False (TaskInvalid)", "2", "separate", "img",
                                   "no-network", "0123456789ab", "1h"]


def test_phase_events():
    assert phase_event({"name": "agent", "state": "Running"}, NOW) == "agent: Running"
    record = {"name": "agent", "step": "s1", "state": "Failed", "exitCode": 3,
              "startedAt": "2026-11-22T11:59:50Z", "finishedAt": "2026-11-22T11:59:52Z",
              "timedOut": True, "message": "agent timed out"}
    assert phase_event(record, NOW) == "s1/agent: Failed (2s, exit 3, timed out, agent timed out)"


def test_outcome_lines():
    assert outcome_line(trial()) == "trial t1 Completed: reward 1"
    multi = trial(rewards={"reward": 0.5, "style": 1.0}, reward=0.5)
    multi["status"]["rewards"] = {"reward": 0.5, "style": 1.0}
    assert outcome_line(multi) == 'trial t1 Completed: reward 0.5 {"reward": 0.5, "style": 1.0}'
    failed = trial(phase="Failed", reward=None, conditions=[
        {"type": "Failed", "status": "True", "reason": "RewardFileMissing", "message": "none"}])
    assert outcome_line(failed) == "trial t1 Failed: RewardFileMissing: none"


def test_trial_view_renders_phases():
    view = TrialView()
    view.clock = lambda: NOW
    console = Console(width=120, record=True, color_system=None)
    console.print(view)
    assert "waiting for the trial" in console.export_text()
    view.update(trial(phase="Running", phases=[
        {"name": "environment", "state": "Succeeded", "exitCode": 0,
         "startedAt": "2026-11-22T11:59:00Z", "finishedAt": "2026-11-22T11:59:02Z"},
        {"name": "agent", "state": "Running", "startedAt": "2026-11-22T11:59:30Z"}],
        startedAt="2026-11-22T11:59:00Z"))
    console.print(view)
    text = console.export_text()
    assert "trial t1" in text and "Running" in text
    assert "environment" in text and "2s" in text and "30s" in text


def test_trial_view_and_waiting_note_say_why_nothing_runs():
    waiting = {"type": "Running", "status": "False", "reason": "WaitingForTask",
               "message": "Task ns/t not found; waiting until 2026-11-22T12:01:00Z"}
    pending = trial(phase="Pending", reward=None, conditions=[waiting])
    assert waiting_note(pending["status"]) == waiting["message"]
    assert waiting_note(trial()["status"]) is None
    view = TrialView()
    view.clock = lambda: NOW
    view.update(pending)
    console = Console(width=120, record=True, color_system=None)
    console.print(view)
    assert "Task ns/t not found; waiting until" in console.export_text()


def test_waiting_for_the_tasks_image_is_shown():
    waiting = {"type": "Running", "status": "False", "reason": "WaitingForImage",
               "message": "waiting for the task's images: waiting for environment (Building: "
                          "r/p/t:abc)"}
    pending = trial(phase="Pending", reward=None, conditions=[waiting])
    assert waiting_note(pending["status"]) == waiting["message"]


def test_trial_body():
    body = trial_body("hello", "command", name=None, command="echo hi", env={"A": "1"},
                      image="img:1", pull_policy="Never", keep_pods=True, timeout_multiplier=2)
    assert body["metadata"]["generateName"] == "hello-command-"
    assert body["spec"] == {
        "taskRef": {"name": "hello"},
        "agent": {"name": "command", "command": "echo hi", "env": [{"name": "A", "value": "1"}]},
        "environment": {"image": "img:1", "imagePullPolicy": "Never"},
        "keepPods": True, "timeoutMultiplier": 2,
    }
    plain = trial_body("hello", "oracle", name="x", command=None, env={}, image=None,
                       pull_policy=None, keep_pods=False, timeout_multiplier=None)
    assert plain["metadata"]["name"] == "x"
    assert plain["spec"] == {"taskRef": {"name": "hello"}, "agent": {"name": "oracle"}}
    keep = trial_body("hello", "oracle", name=None, command=None, env={}, image=None,
                      pull_policy=None, keep_pods=False, timeout_multiplier=None,
                      keep_agent_processes=True)
    assert keep["spec"]["verifier"] == {"agentProcesses": "Keep"}


def test_parse_env():
    assert parse_env(("A=1", "B=x=y", "C=")) == {"A": "1", "B": "x=y", "C": ""}
    with pytest.raises(ClickException, match="NAME=VALUE"):
        parse_env(("1A=x",))


def test_log_keys_follow_the_phase_order():
    single = trial()
    data = {"verifier.log": "v", "agent.log": "a", "extra.log": "e"}
    assert log_keys(single, data, None, None) == ["agent.log", "verifier.log", "extra.log"]
    assert log_keys(single, data, "verifier", None) == ["verifier.log"]
    with pytest.raises(ClickException, match="single-step"):
        log_keys(single, data, None, "s1")
    multi = trial(steps=[{"name": "build"}, {"name": "grade it"}])
    data = {"build.agent.log": "", "build.verifier.log": "", "grade_it.agent.log": ""}
    assert log_keys(multi, data, None, None) == [
        "build.agent.log", "build.verifier.log", "grade_it.agent.log"]
    assert log_keys(multi, data, "agent", "grade it") == ["grade_it.agent.log"]
    with pytest.raises(ClickException, match="no step 'nope'"):
        log_keys(multi, data, None, "nope")


class _Loaded:
    def __init__(self, task_name):
        self.config = type("C", (), {"task": object() if task_name else None})()
        self.short_name = (task_name or "").split("/")[-1]


def test_task_resource_names(tmp_path):
    directory = tmp_path / "My_Task Dir"
    assert task_resource_name(_Loaded("org/Hello_World"), directory) == "hello-world"
    assert task_resource_name(_Loaded(None), directory) == "my-task-dir"
    assert len(task_resource_name(_Loaded("a/" + "x" * 90), directory)) == 40


def test_bundle_configmap_names_are_content_addressed_dns_names():
    a = bundle_configmap_name("hello", b"one")
    assert a.startswith("hello-bundle-") and len(a) == len("hello-bundle-") + 10
    assert a != bundle_configmap_name("hello", b"two")
    assert len(bundle_configmap_name("x" * 63, b"one")) <= 63
