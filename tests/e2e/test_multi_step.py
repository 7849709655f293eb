"""Multi-step tasks, separate verifiers and retries end to end (issue 5)."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import TASK_IMAGE, brief, condition, task_files

HEADER = f'schema_version = "1.4"\n[environment]\ndocker_image = "{TASK_IMAGE}"\nworkdir = "/app"\n'


def step_toml(name: str, extra: str = "") -> str:
    return f'[[steps]]\nname = "{name}"\n{extra}[steps.agent]\ntimeout_sec = 60.0\n'


def reward_json(payload: str) -> str:
    return f"#!/bin/bash\necho '{payload}' > /logs/verifier/reward.json\n"


def three_steps(strategy: str | None) -> dict[str, str]:
    root = "" if strategy is None else f'multi_step_reward_strategy = "{strategy}"\n'
    files = {"task.toml": root + HEADER + "".join(step_toml(n) for n in ("a", "b", "c"))}
    for name, payload in (
        ("a", '{"reward": 1}'),
        ("b", '{"reward": 0.5}'),
        ("c", '{"reward": 1, "style": 0.2}'),
    ):
        files[f"steps/{name}/instruction.md"] = f"Step {name}.\n"
        files[f"steps/{name}/tests/test.sh"] = reward_json(payload)
    return files


@pytest.mark.parametrize("strategy", [None, "final"])
def test_three_steps_mean_and_final(shipyard, strategy):
    name = f"three-{strategy or 'mean'}"
    shipyard.task(name, three_steps(strategy))
    shipyard.trial(f"{name}-nop", name, {"name": "nop"})
    status = shipyard.wait(f"{name}-nop", timeout=180)["status"]
    assert status["phase"] == "Completed", status
    if strategy is None:  # mean is Harbor's default
        assert status["rewards"]["reward"] == pytest.approx(0.8333, abs=1e-3)
        assert status["rewards"]["style"] == pytest.approx(0.0667, abs=1e-3)
    else:
        assert status["rewards"] == {"reward": 1.0, "style": 0.2}
    assert [s["name"] for s in status["steps"]] == ["a", "b", "c"]
    assert [s["rewards"] for s in status["steps"]] == [
        {"reward": 1.0},
        {"reward": 0.5},
        {"reward": 1.0, "style": 0.2},
    ]
    steps_of_phases = [p["step"] for p in status["phases"] if p["name"] == "agent"]
    assert steps_of_phases == ["a", "b", "c"]


@pytest.mark.parametrize("min_reward", ["0.5", "{ correctness = 0.1 }"])
def test_min_reward_stops_the_remaining_steps(shipyard, min_reward):
    name = "gate-scalar" if min_reward == "0.5" else "gate-dict"
    files = {
        "task.toml": HEADER
        + step_toml("first", f"min_reward = {min_reward}\n")
        + step_toml("second")
    }
    for step in ("first", "second"):
        files[f"steps/{step}/instruction.md"] = "Go.\n"
        files[f"steps/{step}/tests/test.sh"] = reward_json('{"reward": 0.25}')
    shipyard.task(name, files)
    shipyard.trial(f"{name}-nop", name, {"name": "nop"})
    status = shipyard.wait(f"{name}-nop", timeout=120)["status"]
    assert status["rewards"] == {"reward": 0.25}
    first, second = status["steps"]
    assert second["state"] == "Skipped"
    assert "min_reward" in first["message"]
    key = "reward 0.25" if min_reward == "0.5" else "correctness missing"
    assert key in first["message"]
    assert (
        f"stopped after step first: {key}" in condition({"status": status}, "Complete")["message"]
    )


def test_setup_failure_stops_the_trial_with_its_stderr(shipyard):
    files = {"task.toml": HEADER + step_toml("prep") + step_toml("later")}
    for step in ("prep", "later"):
        files[f"steps/{step}/instruction.md"] = "Go.\n"
        files[f"steps/{step}/tests/test.sh"] = reward_json('{"reward": 1}')
    files["steps/prep/workdir/setup.sh"] = "echo 'database seed failed' >&2\nexit 3\n"
    shipyard.task("setup-fails", files)
    shipyard.trial("setup-fails-nop", "setup-fails", {"name": "nop"})
    trial = shipyard.wait("setup-fails-nop", timeout=120)
    status = trial["status"]
    assert status["phase"] == "Failed"
    prep = status["steps"][0]
    assert prep["state"] == "Failed"
    assert "setup.sh exited with code 3" in prep["error"]["message"]
    assert "database seed failed" in prep["error"]["message"]
    assert status["steps"][1]["state"] == "Skipped"
    assert condition(trial, "Failed")["reason"] == "StepFailed"


def test_files_persist_across_steps_but_tests_do_not(shipyard):
    files = {"task.toml": HEADER + step_toml("write") + step_toml("read")}
    files["steps/write/instruction.md"] = "Write.\n"
    files["steps/read/instruction.md"] = "Read.\n"
    files["steps/write/tests/test.sh"] = reward_json('{"reward": 1}')
    files["steps/write/tests/secret-answer.txt"] = "42\n"
    files["steps/read/workdir/data.txt"] = "from the step-2 workdir\n"
    files["steps/read/tests/test.sh"] = (
        "#!/bin/bash\nr=/app/report.txt\n"
        "if grep -q seen $r && grep -q nosecret $r && grep -q workdir $r; "
        "then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
    )
    agent = {
        "name": "command",
        "command": (
            'if [ "$(cat $SHIPYARD_INSTRUCTION_FILE)" = "Write." ]; '
            "then echo step1 > /app/note.txt; "
            "else { grep -q step1 /app/note.txt && echo seen; "
            "[ -e /tests/secret-answer.txt ] || echo nosecret; cat /app/data.txt; } "
            "> /app/report.txt; fi"
        ),
    }
    shipyard.task("persist", files)
    shipyard.trial("persist-cmd", "persist", agent)
    status = shipyard.wait("persist-cmd", timeout=120)["status"]
    assert status["steps"][1]["rewards"] == {"reward": 1.0}, status
    assert status["rewards"] == {"reward": 1.0}


SEPARATE = (
    f'schema_version = "1.4"\n[verifier]\nenvironment_mode = "separate"\ntimeout_sec = 60.0\n'
    f'[agent]\ntimeout_sec = 60.0\n[environment]\ndocker_image = "{TASK_IMAGE}"\n'
    'workdir = "/app"\nartifacts = ["/app/answer.txt"]\n'
)


def test_separate_verifier_reads_artifacts_and_never_sees_the_solution(shipyard):
    files = task_files(
        'if [ -e /solution ]; then echo "solution visible" >&2; echo 0; '
        "elif grep -q 42 /app/answer.txt && grep -q published /logs/artifacts/note.txt "
        "&& grep -q run-level /app/extra/trial.txt && [ ! -e /app/extra/scratch.tmp ]; "
        "then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
        solve_sh="echo 42 > /app/answer.txt; echo published > /logs/artifacts/note.txt; "
        "mkdir -p /app/extra && echo run-level > /app/extra/trial.txt; "
        "echo scratch > /app/extra/scratch.tmp\n",
    )
    files["task.toml"] = SEPARATE.replace('artifacts = ["/app/answer.txt"]\n', "")
    files["task.toml"] = 'artifacts = ["/app/answer.txt"]\n' + files["task.toml"]
    shipyard.task("separate", files)
    task = shipyard.wait_task("separate")
    assert task["status"]["summary"]["verifierMode"] == "separate"
    # A Trial-level artifact (a directory) is re-materialized too, without its excludes.
    run_artifacts = [{"source": "/app/extra", "destination": "extra", "exclude": ["*.tmp"]}]
    shipyard.trial("separate-oracle", "separate", artifacts=run_artifacts)
    shipyard.trial("separate-nop", "separate", {"name": "nop"}, artifacts=run_artifacts)
    oracle = shipyard.wait("separate-oracle", timeout=150)["status"]
    nop = shipyard.wait("separate-nop", timeout=150)["status"]
    assert oracle["reward"] == 1.0, oracle
    assert nop["reward"] == 0.0
    names = [p["name"] for p in oracle["phases"]]
    assert names == ["environment", "agent", "collect", "verifier-environment", "verifier"]
    reasons = [e.message for e in shipyard.events("separate-oracle") if e.reason == "PodCreated"]
    assert any("verifier pod" in m for m in reasons)


def test_retry_after_pod_loss_succeeds_with_both_attempts_recorded(shipyard):
    shipyard.task(
        "flaky",
        task_files(
            "if grep -q ok /app/out.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
        ),
    )
    shipyard.trial(
        "flaky-cmd",
        "flaky",
        {"name": "command", "command": "sleep 8; echo ok > out.txt"},
        retries=1,
    )

    def agent_running(t):
        return any(
            p["name"] == "agent" and p.get("startedAt")
            for p in t.get("status", {}).get("phases", [])
        )

    first_pod = shipyard.wait("flaky-cmd", timeout=60, until=agent_running)["status"]["podName"]
    shipyard.core.delete_namespaced_pod(first_pod, shipyard.namespace, grace_period_seconds=0)
    status = shipyard.wait("flaky-cmd", timeout=150)["status"]
    assert status["phase"] == "Completed", status
    assert status["reward"] == 1.0
    assert status["attempt"] == 2
    assert len(status["attempts"]) == 1
    assert status["attempts"][0]["reason"] == "PodLost"
    assert status["attempts"][0]["podName"] == first_pod
    assert status["podName"] != first_pod


def test_operator_restarted_at_every_phase_of_a_separate_verifier_multi_step_trial(
        operator, shipyard):
    """Kill the operator each time the trial moves to a new phase (pod creation, collect,
    verifier pods, step changes): it still ends with the right rewards and no phase ran twice."""
    files = {"task.toml": (
        'schema_version = "1.4"\nartifacts = ["/app/runs"]\n'
        '[verifier]\nenvironment_mode = "separate"\n'
        f'[environment]\ndocker_image = "{TASK_IMAGE}"\nworkdir = "/app"\n'
        + step_toml("one") + step_toml("two"))}
    for i, name in enumerate(("one", "two"), start=1):
        files[f"steps/{name}/instruction.md"] = f"Step {name}.\n"
        # The agent appends one line per run; the verifier pod gets /app/runs as an artifact.
        files[f"steps/{name}/tests/test.sh"] = (
            f'#!/bin/bash\ncat /app/runs\nif [ "$(wc -l < /app/runs)" -eq {i} ]; then echo 1; '
            "else echo 0; fi > /logs/verifier/reward.txt\n")
    shipyard.task("restarts", files)
    shipyard.trial("restarts-cmd", "restarts",
                   {"name": "command", "command": "echo run >> /app/runs; sleep 3"})
    seen: set[str] = set()

    def new_phase(trial) -> bool:
        status = trial.get("status", {})
        current = status.get("currentPhase")
        return status.get("phase") in ("Completed", "Failed") or (
            current is not None and current not in seen)

    while True:
        trial = shipyard.wait("restarts-cmd", timeout=120, until=new_phase)
        status = trial["status"]
        if status.get("phase") in ("Completed", "Failed"):
            break
        seen.add(status["currentPhase"])
        operator.kill()
        operator.start()
    assert status["phase"] == "Completed", brief(status)
    assert [s.get("rewards") for s in status["steps"]] == [{"reward": 1.0}, {"reward": 1.0}], (
        brief(status))
    assert status["reward"] == 1.0
    assert len(seen) >= 4, seen  # restarts happened across the trial, not just once
    started = [e.reason for e in shipyard.events("restarts-cmd")
               if e.reason in ("AgentStarted", "VerifierStarted")]
    assert sorted(started) == ["AgentStarted"] * 2 + ["VerifierStarted"] * 2, started
