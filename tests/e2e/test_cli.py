"""The `shipyard` CLI against the real cluster and the checkout's operator (issue 7): task push
(bundles, .harborignore, the size limit), run --watch, logs, get, results --json, and errors
that are one line, never a traceback."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from shipyard.api.task_source import BUNDLE_KEY, files_from_bundle
from tests.e2e.conftest import ROOT, TASK_IMAGE, task_files

HELLO_TASK = ROOT / "examples" / "hello-world" / "task"


def cli_env(cluster) -> dict[str, str]:
    return dict(os.environ, KUBECONFIG=cluster.kubeconfig, COLUMNS="200")


def shipyard_cli(cluster, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shipyard", *args], capture_output=True,
                          text=True, timeout=timeout, env=cli_env(cluster),
                          stdin=subprocess.DEVNULL)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr
    return result.stdout


def one_line_error(result: subprocess.CompletedProcess[str], contains: str) -> str:
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert contains in lines[0], lines[0]
    return lines[0]


def bundle_files(shipyard, name: str) -> dict[str, bytes]:
    task = shipyard.get("tasks", name)
    cm = shipyard.core.read_namespaced_config_map(task["spec"]["source"]["configMap"]["name"],
                                                  shipyard.namespace)
    return files_from_bundle(base64.b64decode(cm.binary_data[BUNDLE_KEY]))


def bundles_of(shipyard, task: str) -> list:
    return shipyard.core.list_namespaced_config_map(
        shipyard.namespace, label_selector=f"shipyard.dev/task={task}").items


def test_push_creates_updates_and_prunes_bundles(cluster, shipyard, tmp_path):
    ns = shipyard.namespace
    out = ok(shipyard_cli(cluster, "task", "push", str(HELLO_TASK), "-n", ns))
    assert f"task {ns}/hello-world created" in out and "Ready" in out
    task = shipyard.get("tasks", "hello-world")
    assert task["status"]["conditions"][0]["status"] == "True"
    first = task["spec"]["source"]["configMap"]["name"]
    assert set(bundle_files(shipyard, "hello-world")) == {
        "task.toml", "instruction.md", "solution/solve.sh", "tests/test.sh"}
    owners = bundles_of(shipyard, "hello-world")[0].metadata.owner_references
    assert owners[0].kind == "Task" and owners[0].uid == task["metadata"]["uid"]

    assert "unchanged" in ok(shipyard_cli(cluster, "task", "push", str(HELLO_TASK), "-n", ns))

    changed = tmp_path / "hello"
    shutil.copytree(HELLO_TASK, changed)
    (changed / "instruction.md").write_text("Create /app/hello.txt saying Hello, world!\n")
    # Harbor applies .harborignore to the trees it uploads (tests/, solution/, steps/*/...).
    (changed / "tests" / "scratch").mkdir()
    (changed / "tests" / "scratch" / "big.bin").write_bytes(os.urandom(4096))
    (changed / "tests" / ".harborignore").write_text("scratch/\n")
    out = ok(shipyard_cli(cluster, "task", "push", str(changed), "-n", ns,
                          "--name", "hello-world"))
    assert "updated" in out
    task = shipyard.get("tasks", "hello-world")
    assert task["spec"]["source"]["configMap"]["name"] != first
    files = bundle_files(shipyard, "hello-world")
    assert files["instruction.md"].startswith(b"Create /app/hello.txt saying")
    assert not any("scratch" in path or "harborignore" in path for path in files)
    assert [cm.metadata.name for cm in bundles_of(shipyard, "hello-world")] == [
        task["spec"]["source"]["configMap"]["name"]]


def test_push_refuses_a_bundle_too_large_to_store(cluster, shipyard, tmp_path):
    big = tmp_path / "big"
    shutil.copytree(HELLO_TASK, big)
    (big / "data.bin").write_bytes(os.urandom(51_000_000))  # incompressible, > 48 MiB
    result = shipyard_cli(cluster, "task", "push", str(big), "-n", shipyard.namespace)
    line = one_line_error(result, "more than Shipyard stores")
    assert "data.bin" in line and ".harborignore" in line
    assert shipyard.api.list_namespaced_custom_object(
        "shipyard.dev", "v1alpha1", shipyard.namespace, "tasks")["items"] == []


def test_push_of_an_invalid_task_is_one_line(cluster, shipyard, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "task.toml").write_text("[agent\n")
    one_line_error(shipyard_cli(cluster, "task", "push", str(bad), "-n", shipyard.namespace),
                   "task.toml")


def test_run_watch_logs_get_and_results(cluster, shipyard):
    ns = shipyard.namespace
    oracle = shipyard_cli(cluster, "run", str(HELLO_TASK), "--agent", "oracle", "--name",
                          "cli-oracle", "--watch", "-n", ns)
    out = ok(oracle)
    assert "verifier: Succeeded" in out
    assert out.strip().splitlines()[-1] == "trial cli-oracle Completed: reward 1"
    nop = ok(shipyard_cli(cluster, "run", "hello-world", "--agent", "nop", "--name", "cli-nop",
                          "-w", "-n", ns))
    assert nop.strip().splitlines()[-1] == "trial cli-nop Completed: reward 0"
    cmd = ok(shipyard_cli(cluster, "run", "hello-world", "--agent-command",
                          "echo from-the-agent; echo 'Hello, world!' > /app/hello.txt",
                          "--name", "cli-cmd", "-w", "-n", ns))
    assert cmd.strip().endswith("reward 1")
    created = ok(shipyard_cli(cluster, "run", "hello-world", "-n", ns))
    assert "created" in created and "shipyard watch hello-world-oracle-" in created

    logs = ok(shipyard_cli(cluster, "logs", "cli-cmd", "-n", ns))
    assert "==> agent.log <==" in logs and "from-the-agent" in logs
    assert "hello.txt is correct" in logs
    verifier = ok(shipyard_cli(cluster, "logs", "cli-oracle", "--phase", "verifier", "-n", ns))
    assert verifier.strip() == "hello.txt is correct"

    table = ok(shipyard_cli(cluster, "get", "trials", "-n", ns)).splitlines()
    assert table[0].split() == ["NAME", "TASK", "AGENT", "PHASE", "REWARD", "REASON", "AGE"]
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert rows["cli-oracle"][1:5] == ["hello-world", "oracle", "Completed", "1"]
    assert rows["cli-nop"][4] == "0"
    tasks = ok(shipyard_cli(cluster, "get", "tasks", "-n", ns))
    assert "hello-world" in tasks and "True" in tasks

    job = json.loads(ok(shipyard_cli(cluster, "results", "cli-oracle", "cli-nop", "cli-cmd",
                                     "--json", "-n", ns)))
    results = {r["trial_name"]: r for r in job["trial_results"]}
    assert results["cli-oracle"]["verifier_result"] == {"rewards": {"reward": 1.0}}
    assert results["cli-nop"]["verifier_result"] == {"rewards": {"reward": 0.0}}
    assert results["cli-oracle"]["agent_info"]["name"] == "oracle"
    assert results["cli-oracle"]["task_checksum"]
    assert results["cli-oracle"]["verifier_environment_mode"] == "shared"
    assert results["cli-oracle"]["agent_execution"]["started_at"]
    assert job["n_total_trials"] == 3
    assert job["stats"]["evals"]["oracle__adhoc"]["metrics"] == [{"mean": 1.0}]
    assert job["stats"]["evals"]["nop__adhoc"]["metrics"] == [{"mean": 0.0}]
    summary = ok(shipyard_cli(cluster, "results", "-n", ns))
    oracle_line = next(line for line in summary.splitlines() if line.startswith("oracle__adhoc"))
    assert "with rewards, mean 1" in oracle_line  # the generated oracle trial may count too


def test_results_output_dir_is_a_harbor_job_dir(cluster, shipyard, tmp_path):
    ns = shipyard.namespace
    ok(shipyard_cli(cluster, "task", "push", str(HELLO_TASK), "-n", ns))
    ok(shipyard_cli(cluster, "run", "hello-world", "--name", "dir-oracle", "-w", "-n", ns))
    job_dir = tmp_path / "job"
    ok(shipyard_cli(cluster, "results", "-n", ns, "--output-dir", str(job_dir)))
    job = json.loads((job_dir / "result.json").read_text())
    assert "trial_results" not in job and job["n_total_trials"] == 1
    trial = json.loads((job_dir / "dir-oracle" / "result.json").read_text())
    assert trial["verifier_result"]["rewards"]["reward"] == 1.0


def test_a_failed_trial_exits_1_with_its_reason(cluster, shipyard, tmp_path):
    task = tmp_path / "noreward"
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text(
        f'schema_version = "1.4"\n[environment]\ndocker_image = "{TASK_IMAGE}"\n')
    (task / "instruction.md").write_text("Nothing.\n")
    (task / "tests" / "test.sh").write_text("#!/bin/bash\necho no reward written\n")
    result = shipyard_cli(cluster, "run", str(task), "--agent", "nop", "--name", "no-reward",
                          "-w", "-n", shipyard.namespace)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "trial no-reward Failed: RewardFileMissing" in result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["logs", "nope"], "trial nope not found"),
    (["run", "no-such-task"], "task no-such-task not found"),
    (["run", "hello-world", "--agent", "command"], "--agent command needs --agent-command"),
    (["watch", "nope", "--timeout", "5"], "not found"),
    (["results", "nope"], "trials not found: nope"),
])
def test_errors_are_one_line(cluster, shipyard, args, message):
    one_line_error(shipyard_cli(cluster, *args, "-n", shipyard.namespace), message)


def test_unreachable_cluster_is_one_line(tmp_path):
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n"
        "    server: https://127.0.0.1:1\n    insecure-skip-tls-verify: true\n"
        "users:\n- name: u\n  user: {token: x}\ncontexts:\n- name: c\n  context: "
        "{cluster: c, user: u}\ncurrent-context: c\n")
    env = dict(os.environ, KUBECONFIG=str(config))
    result = subprocess.run([sys.executable, "-m", "shipyard", "get", "trials", "-n", "x"],
                            capture_output=True, text=True, timeout=60, env=env,
                            stdin=subprocess.DEVNULL)
    one_line_error(result, "cannot reach the cluster")



def test_cancel_stops_a_running_trial_and_keeps_its_record(cluster, shipyard):
    ns = shipyard.namespace
    shipyard.task("cancel", task_files("echo 1 > /logs/verifier/reward.txt\n", agent_timeout=600))
    shipyard.trial("cancel-me", "cancel",
                   {"name": "command", "command": "echo started; sleep 300"})
    trial = shipyard.wait("cancel-me", timeout=60,
                          until=lambda t: t.get("status", {}).get("currentPhase") == "agent")
    pod = trial["status"]["podName"]
    out = ok(shipyard_cli(cluster, "cancel", "cancel-me", "-n", ns))
    assert "cancellation requested" in out
    trial = shipyard.wait("cancel-me", timeout=20)
    status = trial["status"]
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "Cancelled")
    assert failed["message"] == "cancelled by the shipyard.dev/cancel annotation during agent"
    assert {p["name"]: p["state"] for p in status["phases"]} == {
        "environment": "Succeeded", "agent": "Failed", "verifier": "Skipped"}
    assert status.get("currentPhase") is None
    assert "Cancelled" in {e.reason for e in shipyard.events("cancel-me")}
    pods = {p.metadata.name for p in shipyard.core.list_namespaced_pod(ns).items}
    deadline = time.monotonic() + 15
    while pod in pods and time.monotonic() < deadline:  # the pod goes, the record stays
        time.sleep(0.5)
        pods = {p.metadata.name for p in shipyard.core.list_namespaced_pod(ns).items}
    assert pod not in pods
    # The agent's log as far as it got is kept: the runner stopped the phase before the pod went.
    assert "started" in ok(shipyard_cli(cluster, "logs", "cancel-me", "--phase", "agent",
                                        "-n", ns))
    agent = next(p for p in status["phases"] if p["name"] == "agent")
    assert agent["exitCode"] == 143, agent  # SIGTERM to its process group
    again = ok(shipyard_cli(cluster, "cancel", "cancel-me", "-n", ns))
    assert "already finished (Failed)" in again
    one_line_error(shipyard_cli(cluster, "cancel", "no-such-trial", "-n", ns), "not found")


def test_watch_says_a_trial_waits_for_its_task_then_ends_with_the_reward(cluster, shipyard):
    ns = shipyard.namespace
    shipyard.trial("watch-early", "watch-late", {"name": "oracle"})
    watcher = subprocess.Popen(
        [sys.executable, "-m", "shipyard", "watch", "watch-early", "-n", ns, "--timeout", "120"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(cli_env(cluster), PYTHONUNBUFFERED="1"), stdin=subprocess.DEVNULL)
    # The Task appears only once the watcher has shown the waiting state (on a loaded machine
    # its start alone can outlast a fixed sleep).
    seen = []
    for line in watcher.stdout:
        seen.append(line)
        if "waiting until" in line:
            break
    shipyard.task("watch-late", task_files(
        "grep -q ok /app/out.txt && echo 1 > /logs/verifier/reward.txt || "
        "echo 0 > /logs/verifier/reward.txt\n", solve_sh="echo ok > /app/out.txt\n"))
    out = "".join(seen) + watcher.stdout.read()
    stderr = watcher.stderr.read()
    watcher.wait(150)
    assert watcher.returncode == 0, stderr
    assert "Task " + ns + "/watch-late not found; waiting until" in out, out
    assert out.strip().splitlines()[-1] == "trial watch-early Completed: reward 1", out
