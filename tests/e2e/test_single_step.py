"""Single-step trials end to end on the real local cluster (issue 4)."""

from __future__ import annotations

import base64
import os
import time

from shipyard.api.conventions import RUNNER_INIT_CONTAINER
from shipyard.api.models import GROUP, VERSION
from shipyard.api.task_source import BUNDLE_KEY, build_bundle
from tests.e2e.conftest import ROOT, condition, own_operator, task_files

HELLO = ROOT / "examples" / "hello-world"
REWARD_FROM_FILE = 'if grep -q ok /app/out.txt 2>/dev/null; then echo 1; else echo 0; fi ' \
                   '> /logs/verifier/reward.txt\n'


def test_hello_world_oracle_and_nop_with_kubectl_wait(cluster, operator, namespace, shipyard):
    cluster.kubectl_run("-n", namespace, "apply", "-f", str(HELLO / "task.yaml"),
                        "-f", str(HELLO / "trial-oracle.yaml"), "-f", str(HELLO / "trial-nop.yaml"))
    for agent in ("oracle", "nop"):
        cluster.kubectl_run("-n", namespace, "wait", "--for=condition=Complete",
                            f"trial/hello-world-{agent}", "--timeout=120s", timeout=130)
    oracle = shipyard.wait("hello-world-oracle")
    nop = shipyard.wait("hello-world-nop")
    assert oracle["status"]["reward"] == 1.0
    assert oracle["status"]["rewards"] == {"reward": 1.0}
    assert nop["status"]["reward"] == 0.0
    assert [p["name"] for p in oracle["status"]["phases"]] == ["environment", "agent", "verifier"]
    assert all(p["state"] == "Succeeded" for p in oracle["status"]["phases"])
    assert condition(oracle, "Complete")["reason"] == "RewardRecorded"
    assert oracle["status"]["phase"] == "Completed"
    task = shipyard.wait_task("hello-world")
    assert condition(task, "Ready")["status"] == "True"
    events = shipyard.events("hello-world-oracle")
    assert {e.source.component for e in events} == {"shipyard-operator"}, events
    assert task["status"]["digest"].startswith("sha256:")
    assert task["status"]["summary"] == {"steps": 1, "verifierMode": "shared",
                                         "image": "localhost/shipyard/debian:bookworm",
                                         "network": "public"}
    # The pod goes right after the trial's end is written; the logs are kept.
    deadline = time.monotonic() + 10
    while [p for p in shipyard.core.list_namespaced_pod(namespace).items
           if p.metadata.deletion_timestamp is None]:
        assert time.monotonic() < deadline, "the trial's pod is still there"
        time.sleep(0.2)
    logs = shipyard.core.read_namespaced_config_map(oracle["status"]["logsConfigMap"], namespace)
    assert "hello.txt is correct" in logs.data["verifier.log"]
    # The story in four Events (issue 14: a handful per trial, not one per internal step).
    story = {e.reason: e for e in shipyard.events("hello-world-oracle")}
    assert sorted(story) == ["AgentStarted", "RewardRecorded", "Started", "VerifierStarted"]
    assert "environment pod hello-world-oracle-env created" in story["Started"].message
    printed = cluster.kubectl_run("-n", namespace, "get", "trials").stdout
    assert "hello-world-oracle" in printed and "Completed" in printed


def test_reward_json_keeps_every_key(shipyard):
    shipyard.task("multi", task_files(
        'echo \'{"reward": 0.75, "style": 0.5, "passed": 3}\' > /logs/verifier/reward.json\n'
        "echo 0 > /logs/verifier/reward.txt\n"))
    shipyard.trial("multi-nop", "multi", {"name": "nop"})
    status = shipyard.wait("multi-nop")["status"]
    assert status["phase"] == "Completed"
    assert status["rewards"] == {"reward": 0.75, "style": 0.5, "passed": 3.0}
    assert status["reward"] == 0.75


def test_missing_reward_file_fails_with_reward_file_missing(shipyard):
    shipyard.task("noreward", task_files("echo no reward written\n"))
    shipyard.trial("noreward-nop", "noreward", {"name": "nop"})
    trial = shipyard.wait("noreward-nop")
    assert trial["status"]["phase"] == "Failed"
    failed = condition(trial, "Failed")
    assert failed["reason"] == "RewardFileMissing"
    assert "reward.txt" in failed["message"]
    assert "reward" not in trial["status"]


def test_garbage_reward_fails_with_reward_file_invalid(shipyard):
    shipyard.task("garbage", task_files("echo 'not a number' > /logs/verifier/reward.txt\n"))
    shipyard.trial("garbage-nop", "garbage", {"name": "nop"})
    trial = shipyard.wait("garbage-nop")
    assert condition(trial, "Failed")["reason"] == "RewardFileInvalid"


def test_agent_timeout_still_verifies(shipyard):
    shipyard.task("slow", task_files(REWARD_FROM_FILE, agent_timeout=3))
    agent = {"name": "command", "command": "echo ok > /app/out.txt; sleep 60; echo late"}
    shipyard.trial("slow-cmd", "slow", agent)
    trial = shipyard.wait("slow-cmd", timeout=90)
    status = trial["status"]
    assert status["phase"] == "Completed", status
    assert status["reward"] == 1.0
    agent_phase = next(p for p in status["phases"] if p["name"] == "agent")
    assert agent_phase["timedOut"] is True
    assert status["error"]["type"] == "AgentTimeoutError"
    assert "timed out after 3 seconds" in status["error"]["message"]
    assert "AgentTimeout" in {e.reason for e in shipyard.events("slow-cmd")}


def test_command_agent_sees_instruction_and_nonzero_exit_still_verifies(shipyard):
    shipyard.task("instr", task_files(REWARD_FROM_FILE, instruction="please write ok\n"))
    agent = {"name": "command",
             "command": 'grep -q "please write ok" "$SHIPYARD_INSTRUCTION_FILE" && '
                        'case "$SHIPYARD_INSTRUCTION" in *"write ok"*) echo ok > /app/out.txt;; '
                        "esac; exit 3"}
    shipyard.trial("instr-cmd", "instr", agent)
    status = shipyard.wait("instr-cmd")["status"]
    assert status["reward"] == 1.0
    assert next(p for p in status["phases"] if p["name"] == "agent")["exitCode"] == 3
    assert status["error"]["type"] == "NonZeroAgentExitCodeError"


def test_failing_healthcheck_fails_with_a_clear_reason(shipyard):
    toml = '[environment.healthcheck]\ncommand = "test -f /ready"\ninterval_sec = 0.2\n' \
           "retries = 2\ntimeout_sec = 2\n"
    shipyard.task("unhealthy", task_files("echo 1 > /logs/verifier/reward.txt\n",
                                          toml_extra=toml))
    shipyard.trial("unhealthy-nop", "unhealthy", {"name": "nop"})
    trial = shipyard.wait("unhealthy-nop")
    failed = condition(trial, "Failed")
    assert failed["reason"] == "HealthcheckFailed"
    assert "Healthcheck failed after 2 consecutive retries: test -f /ready" in failed["message"]
    states = {p["name"]: p["state"] for p in trial["status"]["phases"]}
    assert states == {"environment": "Succeeded", "healthcheck": "Failed", "agent": "Skipped",
                      "verifier": "Skipped"}


def test_invalid_task_toml_is_not_ready_and_trials_fail_at_once(shipyard):
    files = task_files("true\n", toml_extra='network_mode = "public"\nallowed_hosts = ["x.com"]\n')
    shipyard.task("bad", files)
    task = shipyard.wait_task("bad")
    ready = condition(task, "Ready")
    assert ready["status"] == "False"
    assert ready["reason"] == "TaskInvalid"
    assert "environment.allowed_hosts" in ready["message"]
    began = time.monotonic()
    shipyard.trial("bad-oracle", "bad")
    trial = shipyard.wait("bad-oracle", timeout=30)
    assert time.monotonic() - began < 15
    failed = condition(trial, "Failed")
    assert failed["reason"] == "TaskInvalid"
    assert "task.toml" in failed["message"] and "environment.allowed_hosts" in failed["message"]
    assert "TaskInvalid" in {e.reason for e in shipyard.events("bad")}


def test_missing_task_is_waited_for_then_fails_with_task_not_found(shipyard):
    shipyard.trial("orphan", "does-not-exist")
    waiting = shipyard.wait("orphan", timeout=15, until=lambda t: (
        (condition(t, "Running") or {}).get("reason") == "WaitingForTask"))
    assert waiting["status"]["phase"] == "Pending"
    failed = condition(shipyard.wait("orphan", timeout=30), "Failed")
    assert failed["reason"] == "TaskNotFound"
    assert failed["message"].endswith("not found (waited 10s for it to be created)")
    assert "WaitingForTask" in {e.reason for e in shipyard.events("orphan")}


def test_trial_applied_before_its_task_runs_once_the_task_exists(shipyard):
    shipyard.trial("early-oracle", "late", {"name": "oracle"})
    shipyard.wait("early-oracle", timeout=15, until=lambda t: (
        (condition(t, "Running") or {}).get("reason") == "WaitingForTask"))
    shipyard.task("late", task_files(REWARD_FROM_FILE, solve_sh="echo ok > /app/out.txt\n"))
    status = shipyard.wait("early-oracle", timeout=90)["status"]
    assert (status["phase"], status["reward"]) == ("Completed", 1.0), status


def test_operator_killed_mid_agent_resumes_without_rerunning_a_phase(operator, shipyard):
    counting = 'echo run >> /app/agent-runs; sleep 20; echo ok > /app/out.txt'
    test_sh = ('if [ "$(wc -l < /app/agent-runs)" -eq 1 ] && grep -q ok /app/out.txt; '
               "then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n")
    shipyard.task("resume", task_files(test_sh))
    shipyard.trial("resume-cmd", "resume", {"name": "command", "command": counting})

    def agent_running(t):
        return any(p["name"] == "agent" and p.get("startedAt") for p in
                   t.get("status", {}).get("phases", []))

    shipyard.wait("resume-cmd", timeout=60, until=agent_running)
    operator.kill()
    time.sleep(5)
    operator.start()
    status = shipyard.wait("resume-cmd", timeout=120)["status"]
    assert status["phase"] == "Completed", status
    assert status["reward"] == 1.0  # the agent ran exactly once, and finished
    assert len({e.reason for e in shipyard.events("resume-cmd")
                if e.reason == "AgentStarted"}) == 1


def test_pod_deleted_mid_agent_fails_fast_with_pod_lost(shipyard):
    shipyard.task("lost", task_files("echo 1 > /logs/verifier/reward.txt\n", agent_timeout=600))
    shipyard.trial("lost-cmd", "lost", {"name": "command", "command": "sleep 300"})

    def agent_running(t):
        return any(p["name"] == "agent" and p.get("startedAt") for p in
                   t.get("status", {}).get("phases", []))

    pod = shipyard.wait("lost-cmd", timeout=60, until=agent_running)["status"]["podName"]
    shipyard.core.delete_namespaced_pod(pod, shipyard.namespace, grace_period_seconds=0)
    began = time.monotonic()
    trial = shipyard.wait("lost-cmd", timeout=30)
    assert time.monotonic() - began < 15
    failed = condition(trial, "Failed")
    assert failed["reason"] == "PodLost"
    assert pod in failed["message"] or "deleted" in failed["message"]


def test_secret_printed_by_the_agent_appears_nowhere(operator, shipyard):
    value = "sk-test-7f3a9c1e5b2d"
    shipyard.core.create_namespaced_secret(shipyard.namespace, {
        "metadata": {"name": "model-key"}, "stringData": {"MODEL_API_KEY": value}})
    shipyard.task("leaky", task_files(
        '[ -s /logs/agent/command.txt ] && echo 1 > /logs/verifier/reward.txt\n'))
    agent = {"name": "command", "command": 'echo "key is $MODEL_API_KEY"; env | grep MODEL',
             "envFrom": [{"secretRef": {"name": "model-key"}}]}
    shipyard.trial("leaky-cmd", "leaky", agent)
    trial = shipyard.wait("leaky-cmd")
    assert trial["status"]["reward"] == 1.0  # the agent did print something
    assert value not in str(trial)
    assert value not in str([(e.reason, e.message) for e in shipyard.events("leaky-cmd")])
    logs = shipyard.core.read_namespaced_config_map(trial["status"]["logsConfigMap"],
                                                    shipyard.namespace)
    assert "key is [REDACTED]" in logs.data["agent.log"]
    assert value not in str(logs.data)
    assert value not in operator.log()


def test_deleting_a_running_trial_stops_its_pod(shipyard):
    shipyard.task("endless", task_files("echo 1 > /logs/verifier/reward.txt\n", agent_timeout=600))
    shipyard.trial("endless-cmd", "endless", {"name": "command", "command": "sleep 300"})

    def agent_running(t):
        return any(p["name"] == "agent" and p.get("startedAt")
                   for p in t.get("status", {}).get("phases", []))

    pod = shipyard.wait("endless-cmd", timeout=60, until=agent_running)["status"]["podName"]
    shipyard.api.delete_namespaced_custom_object(
        "shipyard.dev", "v1alpha1", shipyard.namespace, "trials", "endless-cmd")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        names = [p.metadata.name for p in shipyard.core.list_namespaced_pod(
            shipyard.namespace).items]
        if pod not in names:
            break
        time.sleep(0.5)
    assert pod not in names


def test_trial_spec_is_immutable(shipyard):
    from kubernetes.client.rest import ApiException

    shipyard.task("fixed", task_files("echo 1 > /logs/verifier/reward.txt\n"))
    shipyard.trial("fixed-nop", "fixed", {"name": "nop"})
    try:
        shipyard.api.patch_namespaced_custom_object(
            "shipyard.dev", "v1alpha1", shipyard.namespace, "trials", "fixed-nop",
            {"spec": {"agent": {"name": "oracle"}}})
    except ApiException as e:
        assert e.status == 422
        assert "spec is immutable" in e.body
    else:
        raise AssertionError("changing a Trial's spec was accepted")


def test_agent_and_verifier_users_env_and_workdir(shipyard):
    toml = 'env = { GREETING = "hi" }\n'
    files = task_files(
        'if [ "$(cat /tmp/who)" = nobody ] && [ "$(id -un)" = root ] && '
        '[ "$(cat /tmp/where)" = /app ] && [ "$(cat /tmp/greeting)" = hi ]; '
        "then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
        toml_extra=toml)
    files["task.toml"] = files["task.toml"].replace("[agent]\n", '[agent]\nuser = "nobody"\n')
    shipyard.task("users", files)
    agent = {"name": "command",
             "command": 'id -un > /tmp/who; pwd > /tmp/where; echo "$GREETING" > /tmp/greeting'}
    shipyard.trial("users-cmd", "users", agent)
    status = shipyard.wait("users-cmd")["status"]
    assert status["reward"] == 1.0, status


def test_keep_pods_and_ttl_after_finished(cluster, shipyard):
    shipyard.task("kept", task_files("echo 1 > /logs/verifier/reward.txt\n"))
    # The agent leaves an orphan behind; the pod's PID 1 (pause, in the shared PID namespace)
    # reaps it and every process the phases started, so no zombie remains.
    orphan = {"name": "command", "command": "(sleep 1 &); true"}
    shipyard.trial("kept-nop", "kept", orphan, keepPods=True)
    pod = shipyard.wait("kept-nop")["status"]["podName"]
    assert shipyard.core.read_namespaced_pod(pod, shipyard.namespace).metadata.deletion_timestamp \
        is None
    time.sleep(2)
    states = cluster.kubectl_run(
        "-n", shipyard.namespace, "exec", pod, "--", "sh", "-c",
        "cat /proc/[0-9]*/status 2>/dev/null | grep ^State:").stdout
    assert "S (sleeping)" in states and "zombie" not in states, states
    # A TTL with room for the poll to see the trial finished (a trivial trial ends in ~2 s).
    shipyard.trial("short-lived", "kept", {"name": "nop"}, ttlSecondsAfterFinished=10)
    shipyard.wait("short-lived")
    deadline = time.monotonic() + 45
    remaining = ["short-lived"]
    while time.monotonic() < deadline and remaining:
        items = shipyard.api.list_namespaced_custom_object(
            "shipyard.dev", "v1alpha1", shipyard.namespace, "trials")["items"]
        remaining = [t for t in items if t["metadata"]["name"] == "short-lived"]
        time.sleep(0.5)
    assert not remaining, "ttlSecondsAfterFinished did not delete the trial"


def test_task_whose_bundle_configmap_comes_later_becomes_ready_and_runs(shipyard):
    """GitOps tools apply objects in their own order: a Task (and a Trial on it) created
    before its bundle ConfigMap wait for it instead of failing."""
    ns = shipyard.namespace
    shipyard.api.create_namespaced_custom_object(GROUP, VERSION, ns, "tasks", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": {"name": "bundled"},
        "spec": {"source": {"configMap": {"name": "bundled-files"}}}})
    ready = condition(shipyard.wait_task("bundled"), "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "BundleNotFound")
    assert "ConfigMap bundled-files (the task bundle) not found" in ready["message"]
    shipyard.trial("bundled-oracle", "bundled")
    shipyard.wait("bundled-oracle", timeout=15, until=lambda t: (
        (condition(t, "Running") or {}).get("reason") == "WaitingForTask"))
    files = task_files(REWARD_FROM_FILE, solve_sh="echo ok > /app/out.txt\n")
    bundle = build_bundle({k: v.encode() for k, v in files.items()})
    shipyard.core.create_namespaced_config_map(ns, {
        "metadata": {"name": "bundled-files"},
        "binaryData": {BUNDLE_KEY: base64.b64encode(bundle).decode()}})
    status = shipyard.wait("bundled-oracle", timeout=90)["status"]
    assert (status["phase"], status["reward"]) == ("Completed", 1.0), status
    deadline = time.monotonic() + 30  # the Task's own timer re-checks every 10 s
    while condition(shipyard.get("tasks", "bundled"), "Ready")["status"] != "True":
        assert time.monotonic() < deadline, "the Task never became Ready"
        time.sleep(1)


def test_pods_left_behind_by_an_operator_stopped_after_the_end_go_when_it_starts(
        operator, shipyard):
    """A driver writes its trial's end, then deletes its pods: an operator stopped in between
    leaves a finished trial with a live pod. Made here by writing the end while the operator
    is down: at its start the pod goes, and the record stays as written."""
    shipyard.task("leftover", task_files("echo 1 > /logs/verifier/reward.txt\n",
                                         agent_timeout=600))
    shipyard.trial("leftover-cmd", "leftover", {"name": "command", "command": "sleep 300"})

    def agent_running(t):
        return any(p["name"] == "agent" and p.get("startedAt") for p in
                   t.get("status", {}).get("phases", []))

    pod = shipyard.wait("leftover-cmd", timeout=60, until=agent_running)["status"]["podName"]
    operator.kill()
    end = {"phase": "Completed", "reward": 1.0, "finishedAt": "2026-01-01T00:00:00Z"}
    try:
        shipyard.api.patch_namespaced_custom_object_status(
            GROUP, VERSION, shipyard.namespace, "trials", "leftover-cmd", {"status": end})
    finally:
        operator.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pods = shipyard.core.list_namespaced_pod(shipyard.namespace).items
        if not any(p.metadata.name == pod and not p.metadata.deletion_timestamp for p in pods):
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"pod {pod} of the finished trial is still there")
    after = shipyard.get("trials", "leftover-cmd")["status"]
    assert {k: after[k] for k in end} == end


def test_the_runner_comes_from_configmaps_or_an_init_container_and_scores_alike(
        cluster, core_v1, custom_objects, tmp_path_factory, shipyard):
    """The default (the tests' operator): the Go runner from immutable ConfigMaps the operator
    made in the namespace, no init container (a run with SHIPYARD_RUNNER=sh: none made); an
    operator with the Go runner and SHIPYARD_RUNNER_FILES=none copies it with the init
    container instead. hello-world scores 1 / 0 either way."""
    files = {p.relative_to(HELLO / "task").as_posix(): p.read_text()
             for p in (HELLO / "task").rglob("*") if p.is_file()}
    shipyard.task("delivery", files)
    shipyard.trial("delivery-oracle", "delivery")
    assert shipyard.wait("delivery-oracle")["status"]["reward"] == 1.0
    parts = [cm for cm in core_v1.list_namespaced_config_map(shipyard.namespace).items
             if cm.metadata.name.startswith("shipyard-runner-go-")]
    if os.environ.get("SHIPYARD_RUNNER", "go") == "sh":
        assert not parts, parts
    else:
        assert len(parts) >= 3 and all(cm.immutable for cm in parts), parts
        assert sum(len(base64.b64decode(v)) for cm in parts
                   for v in cm.binary_data.values()) > 2e6

    ns, operator = own_operator(cluster, core_v1, tmp_path_factory.mktemp("init") / "operator.log",
                                "init", {"SHIPYARD_RUNNER": "go", "SHIPYARD_RUNNER_FILES": "none"})
    try:
        other = type(shipyard)(custom_objects, core_v1, ns)
        other.task("delivery", files)
        other.trial("delivery-oracle", "delivery")
        other.trial("delivery-nop", "delivery", {"name": "nop"})
        deadline, inits = time.monotonic() + 60, set()
        while not inits and time.monotonic() < deadline:  # the pod, while it runs
            for pod in core_v1.list_namespaced_pod(ns).items:
                inits |= {c.name for c in pod.spec.init_containers or []}
            time.sleep(0.2)
        assert RUNNER_INIT_CONTAINER in inits, inits
        assert other.wait("delivery-oracle")["status"]["reward"] == 1.0
        assert other.wait("delivery-nop")["status"]["reward"] == 0.0
        assert not [cm for cm in core_v1.list_namespaced_config_map(ns).items
                    if cm.metadata.name.startswith("shipyard-runner-go-")]
    finally:
        operator.stop()
        core_v1.delete_namespace(ns)
