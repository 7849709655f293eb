"""docker-compose tasks end to end (issue 25): the services run as the containers of one trial
pod (no Docker daemon, no privileged pod); what one pod cannot honour is refused at the Task's
Ready condition, by `shipyard task lint` and by `push`, and a trial of it fails at once (never
run without its services)."""

from __future__ import annotations

import time

import pytest

from tests.e2e.conftest import ROOT, condition, task_files
from tests.e2e.test_cli import shipyard_cli

EXAMPLE = ROOT / "examples" / "compose" / "task"


def _example_files(**replace: tuple[str, str]) -> dict[str, str]:
    """examples/compose's files, with (old, new) text replacements per file."""
    files = {str(p.relative_to(EXAMPLE)): p.read_text() for p in EXAMPLE.rglob("*")
             if p.is_file()}
    for path, (old, new) in replace.items():
        path = path.replace("__", "/")
        assert old in files[path], (path, old)
        files[path] = files[path].replace(old, new)
    return files


def _oracle_one_nop_zero(shipyard, task: str, files: dict[str, str]) -> dict:
    """The task pushed, its oracle trial scoring 1 and its nop trial 0; the oracle trial."""
    shipyard.task(task, files)
    shipyard.trial(f"{task}-oracle", task)
    shipyard.trial(f"{task}-nop", task, {"name": "nop"})
    oracle = shipyard.wait(f"{task}-oracle", timeout=300)
    nop = shipyard.wait(f"{task}-nop", timeout=300)
    assert oracle["status"].get("reward") == 1.0, oracle["status"]
    assert nop["status"].get("reward") == 0.0, nop["status"]
    return oracle


def test_compose_example_sidecar_holds_what_the_agent_wrote(cluster, operator, shipyard):
    oracle = _oracle_one_nop_zero(shipyard, "notes", _example_files())
    logs = shipyard.core.read_namespaced_config_map(oracle["status"]["logsConfigMap"],
                                                    shipyard.namespace)
    assert "the notes service holds: hello from main" in logs.data["verifier.log"]
    task = shipyard.get("tasks", "notes")
    assert set(task["status"]["images"]) == {"environment", "service.notes"}, task["status"]
    # The sidecar's log is kept with the trial's logs after its pod is gone.
    out = shipyard_cli(cluster, "logs", "notes-oracle", "--service", "notes",
                       "-n", shipyard.namespace)
    assert out.returncode == 0, out
    assert "notes: listening on 8080" in out.stdout and "stored greeting" in out.stdout
    missing = shipyard_cli(cluster, "logs", "notes-oracle", "--service", "db",
                           "-n", shipyard.namespace)
    assert missing.returncode != 0 and "services with a log: notes" in missing.stderr, missing


def test_a_file_naming_only_its_sidecars_runs_main_from_the_tasks_image(shipyard):
    """Harbor merges a task's compose file over its base file, whose `main` is the task's
    Dockerfile or docker_image: a file that names only its sidecars (as two of Harbor's own
    example tasks do) runs, it is not refused for a missing `main`."""
    main_block = ("  main:\n    image: ${PREBUILT_IMAGE_NAME}\n    environment:\n"
                  "      NOTES_URL: http://notes:${NOTES_PORT}\n    depends_on:\n"
                  "      notes:\n        condition: service_healthy\n")
    files = _example_files(**{"environment__docker-compose.yaml": (main_block, "")},
                           **{"task.toml": ('NOTES_PORT = "8080"\n',
                                            'NOTES_PORT = "8080"\n'
                                            'NOTES_URL = "http://notes:8080"\n')})
    _oracle_one_nop_zero(shipyard, "sidecars-only", files)


def test_a_sidecar_that_never_becomes_healthy_fails_the_environment_naming_it(shipyard):
    files = _example_files(**{"environment__docker-compose.yaml": (
        "      retries: 30", "      retries: 2")})
    files["environment/docker-compose.yaml"] = files["environment/docker-compose.yaml"].replace(
        "'/health')", "'/nowhere')")
    shipyard.task("unhealthy", files)
    shipyard.trial("unhealthy-oracle", "unhealthy")
    trial = shipyard.wait("unhealthy-oracle", timeout=300)
    failed = condition(trial, "Failed")
    assert failed is not None and failed["reason"] == "EnvironmentSetupFailed", trial["status"]
    assert "service notes never became healthy" in failed["message"], failed
    # The tail of its log: its first line is printed before any probe, so it is always there
    # (whether the service got as far as listening before its 2 failures is a race).
    assert "notes: warming up" in failed["message"], failed
    assert not any(p["name"] == "agent" and p.get("startedAt")
                   for p in trial["status"].get("phases", [])), "the agent must not run"


def test_operator_killed_while_the_sidecars_start_resumes(operator, shipyard):
    files = _example_files(**{"environment__notes__notes.py": (
        "time.sleep(2)", "time.sleep(12)")})
    shipyard.task("slow-notes", files)
    shipyard.trial("slow-notes-oracle", "slow-notes")

    def pod_created(t):
        return bool(t.get("status", {}).get("podName"))

    shipyard.wait("slow-notes-oracle", timeout=240, until=pod_created)
    operator.kill()
    time.sleep(5)
    operator.start()
    status = shipyard.wait("slow-notes-oracle", timeout=240)["status"]
    assert status.get("reward") == 1.0, status


REFUSALS = {
    # service body line, the field named, words of the reason
    "privileged": ("privileged: true", "services.db.privileged", "privileged containers"),
    "cap-add": ("cap_add: [NET_ADMIN]", "services.db.cap_add", "beyond the trial pod's policy"),
    "pid-host": ("pid: host", "services.db.pid", "PID namespace"),
    "devices": ("devices: ['/dev/kvm:/dev/kvm']", "services.db.devices", "host devices"),
    "network-mode": ("network_mode: host", "services.db.network_mode",
                     "share the trial pod's network"),
    "ports": ("expose: ['8080']\n    ports: ['9000:8080']", "services.db.ports",
              "port 8080 is used by services 'main' and 'db'"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refused_compose_task_is_not_ready_and_its_trial_fails_at_once(shipyard, case):
    line, field, words = REFUSALS[case]
    compose = ("services:\n  main:\n    image: ${PREBUILT_IMAGE_NAME}\n    expose: ['8080']\n"
               f"  db:\n    image: localhost/shipyard/debian:bookworm\n    {line}\n")
    if case != "ports":
        compose = compose.replace("    expose: ['8080']\n", "", 1)
    files = task_files("echo 1 > /logs/verifier/reward.txt\n", "true\n")
    files["environment/docker-compose.yaml"] = compose
    shipyard.task(case, files)
    ready = condition(shipyard.wait_task(case), "Ready")
    assert ready["status"] == "False" and ready["reason"] == "TaskInvalid", ready
    assert f"environment/docker-compose.yaml: {field}: " in ready["message"], ready
    assert words in ready["message"], ready
    began = time.monotonic()
    shipyard.trial(f"{case}-oracle", case)
    trial = shipyard.wait(f"{case}-oracle", timeout=30)
    assert time.monotonic() - began < 15
    failed = condition(trial, "Failed")
    assert failed["reason"] == "TaskInvalid" and field in failed["message"], failed
    assert not trial["status"].get("phases"), "a refused compose task must never run"


def test_reserved_service_name_is_refused_by_lint_and_push(cluster, shipyard, tmp_path):
    directory = tmp_path / "composed"
    files = task_files("echo 1 > /logs/verifier/reward.txt\n", "true\n")
    files["environment/docker-compose.yaml"] = (
        "services:\n  main: {image: x}\n  secrets: {image: localhost/shipyard/debian:bookworm}\n")
    for path, text in files.items():
        (directory / path).parent.mkdir(parents=True, exist_ok=True)
        (directory / path).write_text(text)
    lint = shipyard_cli(cluster, "task", "lint", str(directory))
    assert lint.returncode == 1 and "Traceback" not in lint.stderr, lint
    assert (f"error: {directory}/environment/docker-compose.yaml: services.secrets: the name "
            "'secrets' is reserved") in lint.stderr, lint.stderr
    assert "ok" not in lint.stdout
    push = shipyard_cli(cluster, "task", "push", str(directory), "-n", shipyard.namespace)
    assert push.returncode != 0 and "Traceback" not in push.stderr, push
    assert "services.secrets" in push.stderr, push.stderr
    assert shipyard.api.list_namespaced_custom_object(
        "shipyard.dev", "v1alpha1", shipyard.namespace, "tasks")["items"] == []


TAMPERING_AGENT = (
    "python3 -c \"import urllib.request as u; u.urlopen(u.Request('http://notes:8080/notes/"
    "greeting', data=b'good', method='PUT'))\"\n"
    # Left behind: keeps overwriting the evidence from 1 s after the agent phase, forever.
    "nohup sh -c \"sleep 1; while true; do python3 -c \\\"import urllib.request as u; "
    "u.urlopen(u.Request('http://notes:8080/notes/greeting', data=b'tampered', "
    "method='PUT'))\\\"; sleep 0.2; done\" >/dev/null 2>&1 &\n"
)


def test_sidecar_artifact_reaches_the_separate_verifier_untouched_by_the_agent(shipyard):
    files = _example_files(**{"task.toml": (
        '[verifier]\n', '[verifier]\nenvironment_mode = "separate"\n')})
    files["task.toml"] = files["task.toml"].replace(
        'schema_version = "1.4"\n',
        'schema_version = "1.4"\nartifacts = [{ source = "/data", service = "notes" }]\n')
    files["tests/test.sh"] = (
        "#!/bin/bash\n# The sidecar's /data, copied out after main's agent phase.\n"
        'got=$(cat /data/greeting 2>&1)\necho "the evidence: ${got}"\n'
        'if [ "$got" = good ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n')
    shipyard.task("evidence", files)
    shipyard.trial("evidence-cmd", "evidence", {"name": "command", "command": TAMPERING_AGENT})
    # The same agent, still in its phase when the loop starts writing: the evidence is the
    # sidecar's real state, so that tampering shows (reward 0).
    shipyard.trial("evidence-late", "evidence",
                   {"name": "command", "command": TAMPERING_AGENT + "sleep 3\n"})
    trial = shipyard.wait("evidence-cmd", timeout=300)
    status = trial["status"]
    assert status.get("reward") == 1.0, status
    logs = shipyard.core.read_namespaced_config_map(status["logsConfigMap"], shipyard.namespace)
    assert "the evidence: good" in logs.data["verifier.log"]
    late = shipyard.wait("evidence-late", timeout=300)["status"]
    assert late.get("reward") == 0.0, late
    logs = shipyard.core.read_namespaced_config_map(late["logsConfigMap"], shipyard.namespace)
    assert "the evidence: tampered" in logs.data["verifier.log"]


def test_a_sidecar_that_crashes_mid_trial_is_restarted_with_its_volume(shipyard):
    """The agent stores its note, then kills the notes server: the kubelet restarts the native
    sidecar (its named volume, an emptyDir, keeps the data), the verifier reads the note."""
    files = _example_files()
    files["tests/test.sh"] = (
        "#!/bin/bash\nfor i in $(seq 60); do\n"
        "  got=$(python3 -c \"import urllib.request as u; print(u.urlopen("
        "'http://notes:8080/notes/greeting', timeout=2).read().decode())\" 2>/dev/null) "
        "&& break\n  sleep 0.5\ndone\n"
        'echo "the notes service holds: ${got}"\n'
        'if [ "$got" = "hello from main" ]; then echo 1; else echo 0; fi '
        "> /logs/verifier/reward.txt\n")
    shipyard.task("crash", files)
    agent = ("python3 -c \"import urllib.request as u; "
             "u.urlopen(u.Request('http://notes:8080/notes/greeting', data=b'hello from main',"
             " method='PUT'))\"\npkill -f '/srv/notes[.]py'; sleep 1\n\n")
    shipyard.trial("crash-cmd", "crash", {"name": "command", "command": agent})
    status = shipyard.wait("crash-cmd", timeout=300)["status"]
    assert status.get("reward") == 1.0, status


def test_a_shared_verifiers_sidecar_hooks_run_before_it_and_its_artifacts_are_exported(
        cluster, shipyard, tmp_path):
    """Harbor runs a sidecar's collect hooks and copies its artifacts out before a shared
    verifier too: the hook's file is in the sidecar when the tests read it, and the sidecar's
    artifacts are in the export beside the main container's."""
    import json

    files = _example_files(**{"task.toml": (
        "[environment]\n",
        '[[verifier.collect]]\ncommand = "ls /data > /data/listing"\nservice = "notes"\n'
        "timeout_sec = 30\n[environment]\n")})
    files["task.toml"] = files["task.toml"].replace(
        'schema_version = "1.4"\n',
        'schema_version = "1.4"\nartifacts = [{ source = "/data", service = "notes" }]\n', 1)
    files["tests/test.sh"] = (
        "#!/bin/bash\n# The hook ran in the sidecar before the tests: its listing is there.\n"
        'got=$(python3 -c "import urllib.request as u; print(u.urlopen('
        "'http://notes:8080/notes/listing').read().decode().split())\" 2>&1)\n"
        'echo "the listing: ${got}"\n'
        "if [[ $got == *greeting* ]]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n")
    shipyard.task("shared-evidence", files)
    shipyard.trial("shared-evidence-oracle", "shared-evidence")
    trial = shipyard.wait("shared-evidence-oracle", timeout=300)
    status = trial["status"]
    logs = shipyard.core.read_namespaced_config_map(status["logsConfigMap"], shipyard.namespace)
    assert status.get("reward") == 1.0, (status, logs.data.get("verifier.log"))
    out = tmp_path / "job"
    result = shipyard_cli(cluster, "results", "shared-evidence-oracle", "-n",
                          shipyard.namespace, "--output-dir", str(out))
    assert result.returncode == 0, result.stderr
    art = out / "shared-evidence-oracle" / "artifacts"
    rows = {r["source"]: r for r in json.loads((art / "manifest.json").read_text())}
    assert rows["/data"]["status"] == "ok" and rows["/data"]["service"] == "notes", rows
    assert rows["/logs/artifacts"]["status"] in ("ok", "empty"), rows
    assert (art / "data" / "greeting").read_text() == "hello from main"
    assert "greeting" in (art / "data" / "listing").read_text()


ROOT_CONTEXT_TASK = {
    "task.toml": 'schema_version = "1.4"\n[agent]\ntimeout_sec = 60\n'
                 '[verifier]\ntimeout_sec = 60\n',
    "instruction.md": "Write the sum of the numbers in /app/numbers.txt to /app/sum.txt.\n",
    # The terminal-bench layout: the image COPYs app/ from beside environment/.
    "app/numbers.txt": "2\n3\n",
    "environment/Dockerfile": "FROM debian:bookworm\nCOPY app/ /app/\n",
    "environment/docker-compose.yaml": (
        "services:\n  main:\n    build:\n      context: ${CONTEXT_DIR}/..\n"
        "      dockerfile: ${CONTEXT_DIR}/Dockerfile\n    image: ${MAIN_IMAGE_NAME}\n"
        "    command: [sh, -c, sleep infinity]\n    network_mode: none\n"),
    "solution/solve.sh": "#!/bin/bash\nawk '{s+=$1} END {print s}' /app/numbers.txt "
                         "> /app/sum.txt\n",
    # Harbor's main has no network at all: neither the agent nor the shared verifier.
    "tests/test.sh": "#!/bin/bash\nif getent hosts kubernetes.default.svc.cluster.local; then "
                     "echo 'the verifier resolved a name'; echo 0 > /logs/verifier/reward.txt; "
                     "exit 0; fi\n"
                     "[ \"$(cat /app/sum.txt 2>/dev/null)\" = 5 ] && r=1 || r=0\n"
                     "echo $r > /logs/verifier/reward.txt\n",
}


def test_a_task_built_from_its_own_directory_with_an_offline_main_runs_as_under_harbor(
        shipyard):
    """Public terminal-bench-style tasks build main from the task's directory
    (`context: ${CONTEXT_DIR}/..`, `dockerfile: ${CONTEXT_DIR}/Dockerfile`) to COPY app/, and
    some cut main off the network (`network_mode: none`). Both were refused; Harbor runs them."""
    _oracle_one_nop_zero(shipyard, "rootctx", ROOT_CONTEXT_TASK)


def test_binds_of_the_tasks_own_files_reach_main_and_a_sidecar_read_only(shipyard):
    """Harbor runs compose with environment/ as the project directory, so `./seed` is the
    task's folder there: the sidecar copies a bound folder and a bound file into its store
    before it serves, and main reads a bound file; the oracle scores 1 only when all three
    arrived, and nop 0. Bound task files are read-only (a pod has no host folder behind
    them)."""
    compose = _example_files()["environment/docker-compose.yaml"]
    compose = compose.replace(
        '    command: ["python3", "/srv/notes.py", "${NOTES_PORT}"]\n',
        '    command: ["sh", "-c", "cp /seed/word.txt /data/word && cp /setup.json /data/setup'
        ' && exec python3 /srv/notes.py ${NOTES_PORT}"]\n')
    compose = compose.replace("      - notes-data:/data\n",
                              "      - notes-data:/data\n      - ./seed:/seed:ro\n"
                              "      - ${CONTEXT_DIR}/setup.json:/setup.json\n")
    compose = compose.replace("    depends_on:\n      notes:\n",
                              "    volumes:\n      - ./seed/word.txt:/app/word.txt\n"
                              "    depends_on:\n      notes:\n")
    files = {**_example_files(), "environment/docker-compose.yaml": compose,
             "environment/seed/word.txt": "hello\n", "environment/setup.json": '{"n": 7}\n'}
    files["solution/solve.sh"] = """#!/bin/bash
set -euo pipefail
if echo changed > /app/word.txt; then echo "the bound file was writable"; exit 1; fi
python3 - <<'PY'
import os
import urllib.request

base = os.environ["NOTES_URL"] + "/notes/"
word = open("/app/word.txt").read().strip()
served = urllib.request.urlopen(base + "word", timeout=10).read().decode().strip()
setup = urllib.request.urlopen(base + "setup", timeout=10).read().decode().strip()
assert (word, served, setup) == ("hello", "hello", '{"n": 7}'), (word, served, setup)
request = urllib.request.Request(base + "greeting", data=b"hello from main", method="PUT")
urllib.request.urlopen(request, timeout=10)
PY
"""
    _oracle_one_nop_zero(shipyard, "binds", files)
