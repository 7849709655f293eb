"""Rewards that hold against a root agent, an unprivileged agent and a malicious task (issue 22),
on the real local cluster. Each test is an attack of its own; every forger must be scored by the
real test."""

from __future__ import annotations

import base64
import json
import os
import re
import time

import pytest

from shipyard.api.conventions import LABEL_TRIAL, label_value
from tests.e2e.conftest import TASK_IMAGE, brief, condition, task_files

EXPECTED = "7c1e-answer-key"

# A separate verifier that scores 1 only when an artifact holds the answer key (which only
# /tests has), and says what it saw: its bash, /usr/bin and /logs untouched by the agent.
SEPARATE_TEST = (
    "#!/bin/bash\n"
    "exp=$(cat /tests/expected.txt)\n"
    'got=$(cat /app/out/answer.txt 2>/dev/null); note=$(cat /logs/artifacts/answer.txt '
    "2>/dev/null)\n"
    'echo "got=[$got] note=[$note]"\n'
    'echo "tool=$(cat /app/out/bin/tool.sh 2>/dev/null) mode=$(stat -c %a /app/out/bin/tool.sh '
    '2>/dev/null) deep=$(cat /app/out/a/b/c.txt 2>/dev/null)"\n'
    'echo "links=$(find /app /logs/artifacts -type l 2>/dev/null | wc -l)"\n'
    'echo "forged-bash=$(grep -c forged /usr/bin/bash /bin/bash 2>/dev/null | grep -vc :0)"\n'
    'if [ -n "$exp" ] && { [ "$got" = "$exp" ] || [ "$note" = "$exp" ]; }; then echo 1; '
    "else echo 0; fi > /logs/verifier/reward.txt\n"
)


def separate_task(user: str | None = None) -> dict[str, str]:
    agent_user = f'user = "{user}"\n' if user else ""
    return {
        "task.toml": (
            f'schema_version = "1.4"\nartifacts = ["/app/out"]\n[agent]\ntimeout_sec = 60\n'
            f"{agent_user}"
            '[verifier]\ntimeout_sec = 60\nenvironment_mode = "separate"\n'
            f'[environment]\ndocker_image = "{TASK_IMAGE}"\nworkdir = "/app"\n'
        ),
        "instruction.md": "Write the answer key into /app/out/answer.txt.\n",
        "tests/test.sh": SEPARATE_TEST,
        "tests/expected.txt": EXPECTED + "\n",
        "solution/solve.sh": (
            f"#!/bin/bash\nmkdir -p /app/out/bin /app/out/a/b && echo {EXPECTED} > "
            "/app/out/answer.txt\nprintf 'echo tool' > /app/out/bin/tool.sh && chmod 750 "
            "/app/out/bin/tool.sh\necho deep > /app/out/a/b/c.txt\n"
        ),
    }


# A tar forged by the agent: the verifier's bash replaced, a reward planted, paths that climb
# out, absolute names, and a link to the answer key.
EVIL_TAR = r"""
cat > /tmp/mk.py <<'EOF'
import io, tarfile
forge = b"#!/bin/sh\necho forged; echo 1 > /logs/verifier/reward.txt\n"
with tarfile.open("/tmp/evil.tar", "w", format=tarfile.GNU_FORMAT) as t:
    for name in ["bin/bash", "usr/bin/bash", "/usr/bin/bash", "app/out/../../usr/bin/bash",
                 "logs/verifier/reward.txt", "tests/test.sh", "app/out/../../../tests/x"]:
        i = tarfile.TarInfo(name); i.size = len(forge); i.mode = 0o4755
        t.addfile(i, io.BytesIO(forge))
    for name, target in [("app/out/answer.txt", "/tests/expected.txt"),
                         ("logs/artifacts/answer.txt", "../../tests/expected.txt")]:
        i = tarfile.TarInfo(name); i.type = tarfile.SYMTYPE; i.linkname = target; t.addfile(i)
    i = tarfile.TarInfo("app/out/hard"); i.type = tarfile.LNKTYPE; i.linkname = "tests/expected.txt"
    t.addfile(i)
EOF
python3 /tmp/mk.py
"""

AGENTS = {
    # Links among its artifacts, to the answer key the verifier pod will have.
    "links": ("mkdir -p /app/out; ln -s /tests/expected.txt /app/out/answer.txt; "
              "ln -s /tests/expected.txt /logs/artifacts/answer.txt; "
              "ln -s / /app/out/root; ln /etc/passwd /logs/artifacts/hard"),
    # The image's tar replaced: the collect phase packs the agent's own tar.
    "tar": EVIL_TAR + (
        "cp /usr/bin/tar /usr/bin/tar.real\n"
        "cat > /usr/bin/tar <<'EOF'\n#!/bin/sh\nfor a; do case $a in */artifacts.tar) "
        "cp /tmp/evil.tar \"$a\"; exit 0;; esac; "
        "done\nexec /usr/bin/tar.real \"$@\"\nEOF\nchmod 755 /usr/bin/tar\n"),
    # The tar the runner reads written over, as root, and /shipyard's folders tampered with.
    "swap": EVIL_TAR + (
        "mkdir -p /shipyard/state; cp /tmp/evil.tar /shipyard/state/artifacts.tar; "
        "cp /tmp/evil.tar /shipyard/artifacts.tar\n"
        "(while sleep 0.05; do cp /tmp/evil.tar /shipyard/state/artifacts.tar; done) "
        ">/dev/null 2>&1 &\nsleep 1"),
    # The image's programs the runner and the operator use (sh, awk, tar, cat, su), replaced
    # with forgers that still do their job otherwise (the runner keeps working for them).
    "tools": EVIL_TAR + r"""
B=/usr/local/bin
real() { f=$(readlink -f "$(command -v "$1")"); cp "$f" "$B/$1.real"; echo "$f"; }
put() { rm -f "$1"; cp "$2" "$1"; chmod 755 "$1"; }
sh_=$(real sh); tar_=$(real tar); cat_=$(real cat); awk_=$(real awk); su_=$(real su)
cat > /tmp/tar <<'X'
#!/usr/local/bin/sh.real
echo 1 > /logs/verifier/reward.txt 2>/dev/null
for a; do
  case $a in */artifacts.tar) /usr/local/bin/cat.real /tmp/evil.tar > "$a"; exit 0;; esac
done
exec /usr/local/bin/tar.real "$@"
X
cat > /tmp/cat <<'X'
#!/usr/local/bin/sh.real
case "$*" in
  *artifacts.tar*) exec /usr/local/bin/cat.real /tmp/evil.tar;;
  *reward*) echo 1; exit 0;;
esac
exec /usr/local/bin/cat.real "$@"
X
for p in awk su sh; do
  printf '#!/usr/local/bin/sh.real\necho 1 > /logs/verifier/reward.txt 2>/dev/null\n' > /tmp/$p
  echo "exec $B/$p.real \"\$@\"" >> /tmp/$p
done
put "$tar_" /tmp/tar; put "$cat_" /tmp/cat; put "$awk_" /tmp/awk; put "$su_" /tmp/su
put "$sh_" /tmp/sh
echo replaced: $sh_ $tar_ $cat_ $awk_ $su_
""",
}


def _verifier_log(shipyard, trial: dict) -> str:
    return shipyard.core.read_namespaced_config_map(
        trial["status"]["logsConfigMap"], shipyard.namespace).data.get("verifier.log", "")


def test_a_separate_verifier_gets_only_the_declared_artifacts_at_their_paths(shipyard):
    """Harbor's behaviour kept: the oracle's artifacts (a folder with a script keeping its
    mode and a nested folder) are re-materialised at their own paths; forgers, root or not,
    are scored 0 by the real test and the verifier's own programs are untouched."""
    shipyard.task("art", separate_task())
    shipyard.task("art-nobody", separate_task("nobody"))
    shipyard.trial("art-oracle", "art")
    names = []
    for name, command in AGENTS.items():
        shipyard.trial(f"art-{name}", "art", {"name": "command", "command": command})
        names.append(f"art-{name}")
    # An unprivileged agent: links among its artifacts, and /shipyard written to.
    shipyard.trial("art-nobody-links", "art-nobody", {"name": "command", "command": (
        AGENTS["links"] + "; for d in /shipyard /shipyard/state /shipyard/phases; do "
        "touch $d/planted 2>/dev/null && echo \"wrote $d\" || echo \"denied $d\"; done")})
    oracle = shipyard.wait("art-oracle", timeout=180)
    assert oracle["status"]["reward"] == 1.0, brief(oracle["status"])
    log = _verifier_log(shipyard, oracle)
    assert f"got=[{EXPECTED}]" in log and "tool=echo tool mode=750 deep=deep" in log, log
    for name in [*names, "art-nobody-links"]:
        trial = shipyard.wait(name, timeout=180)
        assert trial["status"]["phase"] == "Completed", (name, brief(trial["status"]))
        assert trial["status"]["reward"] == 0.0, (name, brief(trial["status"]))
        log = _verifier_log(shipyard, trial)
        assert "links=0" in log and "forged-bash=0" in log, (name, log)
        assert "forged" not in log.replace("forged-bash", ""), (name, log)
    nobody = shipyard.wait("art-nobody-links", timeout=10)
    agent_log = shipyard.core.read_namespaced_config_map(
        nobody["status"]["logsConfigMap"], shipyard.namespace).data["agent.log"]
    for d in ("/shipyard", "/shipyard/state", "/shipyard/phases"):
        assert f"denied {d}" in agent_log, agent_log
    # What was left out is said in an Event of the trial: the links an agent put among its
    # artifacts; with runner.sh also the agent's own tar, which the image's replaced `tar`
    # packed (the Go runner packs the artifacts itself: the forged `tar` never runs).
    def skipped(trial: str) -> list[str]:
        return [e.message for e in shipyard.events(trial) if e.reason == "ArtifactsSkipped"]

    assert any("a link" in m for m in skipped("art-links")), skipped("art-links")
    if os.environ.get("SHIPYARD_RUNNER", "go") == "sh":
        assert any("not under a declared artifact path" in m for m in skipped("art-tar")), \
            skipped("art-tar")
    else:
        assert not any("not under" in m for m in skipped("art-tar")), skipped("art-tar")


def test_artifacts_over_the_limit_reach_no_verifier_and_say_why(shipyard):
    """40 MB of artifacts (over the 32 MiB limit): the runner refuses to send them, the
    verifier runs without them, an Event says how large they were; nothing hangs."""
    files = separate_task()
    shipyard.task("art-big", files)
    shipyard.trial("art-big-cmd", "art-big", {"name": "command", "command": (
        "mkdir -p /app/out && head -c 40000000 /dev/urandom > /app/out/big.bin")})
    trial = shipyard.wait("art-big-cmd", timeout=240)
    assert trial["status"]["phase"] == "Completed", brief(trial["status"])
    assert trial["status"]["reward"] == 0.0
    skipped = [e.message for e in shipyard.events("art-big-cmd")
               if e.reason == "ArtifactsSkipped"]
    assert any("over the limit" in m for m in skipped), skipped
    assert condition(trial, "Complete") is not None


def test_trials_that_used_to_never_end_now_end_with_a_reason(shipyard):
    """Class 6, a malicious task: an integer too large for a float in reward.json, a
    reward.json nested 100,000 deep, and a multi-step trial whose logs (3 steps x agent and
    verifier, 600 KB each) are over 1 MiB in all. Each ends, with a reason, and leaves no pod
    running."""
    big_int = "1" + "0" * 400
    huge = {
        "task.toml": (f'schema_version = "1.4"\n[agent]\ntimeout_sec = 60\n[verifier]\n'
                      f'timeout_sec = 60\n[environment]\ndocker_image = "{TASK_IMAGE}"\n'),
        "instruction.md": "Nothing.\n",
        "tests/test.sh": f"#!/bin/bash\necho '{{\"reward\": {big_int}}}' > "
                         "/logs/verifier/reward.json\n",
    }
    shipyard.task("huge-int", huge)
    # reward.json nested 100,000 deep: a RecursionError in the operator's parse, before
    nested = ("{ printf '{\"reward\":'; printf '[%.0s' $(seq 100000); printf ']%.0s' "
              "$(seq 100000); printf '}'; } > /logs/verifier/reward.json\n")
    shipyard.task("nested", {**huge, "tests/test.sh": "#!/bin/bash\n" + nested})
    shipyard.trial("nested-nop", "nested", {"name": "nop"})
    steps = "".join(f'[[steps]]\nname = "s{i}"\n[steps.agent]\ntimeout_sec = 60.0\n'
                    for i in range(3))
    chatty = {"task.toml": (f'schema_version = "1.4"\n[verifier]\ntimeout_sec = 60\n'
                            f'[environment]\ndocker_image = "{TASK_IMAGE}"\n' + steps)}
    for i in range(3):
        chatty[f"steps/s{i}/instruction.md"] = f"Step {i}.\n"
        chatty[f"steps/s{i}/tests/test.sh"] = (
            "#!/bin/bash\nhead -c 600000 /dev/zero | tr '\\0' v\necho 1 > "
            "/logs/verifier/reward.txt\n")
    shipyard.task("chatty", chatty)
    shipyard.trial("huge-int-nop", "huge-int", {"name": "nop"})
    shipyard.trial("chatty-cmd", "chatty", {
        "name": "command", "command": "head -c 600000 /dev/zero | tr '\\0' a"})
    huge_trial = shipyard.wait("huge-int-nop", timeout=120)
    cond = condition(huge_trial, "Failed")
    assert cond is not None and cond["reason"] == "RewardFileInvalid", brief(huge_trial["status"])
    assert "beyond 64 bits" in cond["message"], cond
    nested_trial = shipyard.wait("nested-nop", timeout=120)
    cond = condition(nested_trial, "Failed")
    assert cond is not None and cond["reason"] == "RewardFileInvalid", brief(nested_trial["status"])
    assert "nested too deeply" in cond["message"], cond
    chatty_trial = shipyard.wait("chatty-cmd", timeout=240)
    assert chatty_trial["status"]["phase"] == "Completed", brief(chatty_trial["status"])
    assert chatty_trial["status"]["rewards"] == {"reward": 1}
    logs = shipyard.core.read_namespaced_config_map(chatty_trial["status"]["logsConfigMap"],
                                                    shipyard.namespace).data
    assert len(logs) == 6 and all("truncated by shipyard" in v for v in logs.values()), list(logs)
    for name in ("huge-int-nop", "nested-nop", "chatty-cmd"):
        assert no_pod_left(shipyard, name), name


def test_timeouts_past_a_year_are_held_as_a_year_and_the_trial_runs(shipyard):
    """Bad input, numbers: every timeout of a task at 1e308 seconds and a billion-billion
    healthcheck retries (the runner refused the healthcheck: `cannot unmarshal number … into
    Go struct field op.timeout of type int`, HealthcheckFailed), and a Trial's
    `timeoutMultiplier: 1e308` (an OverflowError in the operator, retried five times, then
    EnvironmentSetupFailed). Both now run as Harbor would, to reward 1."""
    huge = {
        "task.toml": (
            f'schema_version = "1.4"\n[agent]\ntimeout_sec = 1e308\n[verifier]\n'
            f'timeout_sec = 1e308\n[environment]\ndocker_image = "{TASK_IMAGE}"\n'
            "build_timeout_sec = 1e308\n[environment.healthcheck]\ncommand = \"true\"\n"
            "interval_sec = 1e308\ntimeout_sec = 1e308\nstart_period_sec = 1e308\n"
            f"start_interval_sec = 1e308\nretries = {10**30}\n"),
        "instruction.md": "Nothing.\n",
        "tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
        "solution/solve.sh": "#!/bin/bash\ntrue\n",
    }
    shipyard.task("huge-timeouts", huge)
    shipyard.task("plain-timeouts", {**huge, "task.toml": (
        f'schema_version = "1.4"\n[environment]\ndocker_image = "{TASK_IMAGE}"\n')})
    shipyard.trial("huge-timeouts-oracle", "huge-timeouts")
    shipyard.trial("huge-multiplier", "plain-timeouts", timeoutMultiplier=1e308)
    for name in ("huge-timeouts-oracle", "huge-multiplier"):
        trial = shipyard.wait(name, timeout=120)
        assert trial["status"].get("reward") == 1, (name, brief(trial["status"]))


def test_a_container_that_cannot_start_says_why(shipyard):
    """Failures explained: a task whose workdir is a file. The container cannot start, and
    the Trial said only `container main terminated (StartError, exit code 128)`; it now
    carries the runtime's reason (`mkdir /etc/passwd: not a directory`)."""
    shipyard.task("file-workdir", {
        "task.toml": (f'schema_version = "1.4"\n[environment]\ndocker_image = "{TASK_IMAGE}"\n'
                      'workdir = "/etc/passwd"\n'),
        "instruction.md": "Nothing.\n",
        "tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
        "solution/solve.sh": "#!/bin/bash\ntrue\n"})
    shipyard.trial("file-workdir-oracle", "file-workdir")
    trial = shipyard.wait("file-workdir-oracle", timeout=120)
    failed = condition(trial, "Failed")
    assert failed is not None and "StartError" in failed["message"], brief(trial["status"])
    assert "/etc/passwd: not a directory" in failed["message"], failed
    assert no_pod_left(shipyard, "file-workdir-oracle")


def no_pod_left(shipyard, trial: str, timeout: float = 30) -> bool:
    """Within `timeout`, the trial's pods are all gone or going."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = shipyard.core.list_namespaced_pod(
            shipyard.namespace, label_selector=f"{LABEL_TRIAL}={label_value(trial)}").items
        if not [p for p in pods if not p.metadata.deletion_timestamp]:
            return True
        time.sleep(1)
    return False


KILL = ("for p in /proc/[0-9]*; do c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null); "
        "case \"$c\" in {pattern}) echo \"killing $c\"; kill -9 ${{p#/proc/}};; esac; done; "
        "sleep 20")


def test_an_agent_that_ends_its_own_container_gets_no_free_retry(shipyard):
    """Class 7: a losing agent kills its pod's keep-alive (root) or the probe container's
    httpd (as nobody, the probe's own user): its failure, AgentFailed, not a retried PodLost,
    although the Trial allows retries."""
    test_sh = "echo 0 > /logs/verifier/reward.txt\n"
    root = {"task.toml": (f'schema_version = "1.4"\n[agent]\ntimeout_sec = 60\n[verifier]\n'
                          f'timeout_sec = 60\n[environment]\ndocker_image = "{TASK_IMAGE}"\n'),
            "instruction.md": "Lose.\n", "tests/test.sh": "#!/bin/bash\n" + test_sh}
    # A long agent timeout: the pod gets the probe container (its httpd runs as nobody).
    nobody = dict(root, **{"task.toml": root["task.toml"].replace(
        "[agent]\ntimeout_sec = 60\n", '[agent]\ntimeout_sec = 600\nuser = "nobody"\n')})
    shipyard.task("reroll", root)
    shipyard.task("reroll-nobody", nobody)
    # Each first writes its key into the container's termination log, which the kubelet
    # copies into the pod's status when the container ends: it must not reach the Trial.
    value = "sk-reroll-5be07a1d"
    shipyard.core.create_namespaced_secret(shipyard.namespace, {
        "metadata": {"name": "reroll-key"}, "stringData": {"MODEL_API_KEY": value}})
    leak = 'echo "$MODEL_API_KEY" > /dev/termination-log 2>/dev/null; '
    key = [{"secretRef": {"name": "reroll-key"}}]
    shipyard.trial("reroll-root", "reroll", {"name": "command", "envFrom": key,
                                             "command": leak + KILL.format(
                                                 pattern="'sleep infinity '")}, retries=2)
    shipyard.trial("reroll-probe", "reroll-nobody", {"name": "command", "envFrom": key,
                                                     "command": leak + KILL.format(
                                                         pattern="httpd*")}, retries=2)
    for name in ("reroll-root", "reroll-probe"):
        trial = shipyard.wait(name, timeout=180)
        assert value not in json.dumps(trial["status"]), (name, brief(trial["status"]))
        assert not [e for e in shipyard.events(name) if value in (e.message or "")], name
        failed = condition(trial, "Failed")
        assert failed is not None and failed["reason"] == "AgentFailed", (
            name, brief(trial["status"]))
        assert "not retried" in failed["message"], failed
        assert trial["status"]["attempt"] == 1 and not trial["status"].get("attempts"), name
        assert no_pod_left(shipyard, name), name


DISK_HOG = "dd if=/dev/zero of=/hog bs=1M count=200 2>&1; sync; sleep 100"


def _hog_fails_once(shipyard, task: str, files: dict[str, str], trial: str
                    ) -> tuple[dict, dict]:
    """A Trial (retries allowed) whose agent writes 200 MiB under a 64 MiB limit: it fails
    AgentFailed, not retried; the Trial and its Failed condition."""
    shipyard.task(task, files)
    shipyard.trial(trial, task, {"name": "command", "command": DISK_HOG}, retries=2)
    body = shipyard.wait(trial, timeout=240)
    failed = condition(body, "Failed")
    assert failed is not None and failed["reason"] == "AgentFailed", brief(body["status"])
    assert "not retried" in failed["message"], failed
    assert body["status"]["attempt"] == 1 and not body["status"].get("attempts"), (
        brief(body["status"]))
    assert no_pod_left(shipyard, trial)
    return body, failed


def test_an_agent_over_its_storage_limit_gets_no_free_retry(shipyard):
    """The kubelet evicts a pod that writes past its own ephemeral-storage limit (the task's
    storage_mb): that is the agent's doing, like an OOM kill, so the trial fails AgentFailed
    naming the limit, and is not retried as a PodLost although the Trial allows retries
    (it was: each retry a free re-roll for an agent that filled its disk)."""
    _, failed = _hog_fails_once(shipyard, "disk", task_files(
        "echo 1 > /logs/verifier/reward.txt\n", toml_extra="storage_mb = 64\n",
        agent_timeout=120), "disk-hog")
    assert "ephemeral local storage" in failed["message"], failed
    assert "storage_mb" in failed["message"], failed
    # A task that declares no storage_mb is bounded by the namespace's LimitRange default, as
    # operations.md advises for trial namespaces (Harbor sets no storage limit): the same.
    shipyard.core.create_namespaced_limit_range(shipyard.namespace, {
        "metadata": {"name": "trial-disk"},
        "spec": {"limits": [{"type": "Container", "default": {"ephemeral-storage": "64Mi"},
                             "defaultRequest": {"ephemeral-storage": "16Mi"}}]}})
    _, failed = _hog_fails_once(shipyard, "disk-undeclared", task_files(
        "echo 1 > /logs/verifier/reward.txt\n", agent_timeout=120), "disk-hog-ns")
    assert "LimitRange" in failed["message"], failed


def test_an_agent_that_floods_the_runners_output_keeps_its_storage_and_its_reward(shipyard):
    """The runner's file of a phase's output (what the phase prints outside its own log, here
    reached as the phase's shell's stdout, /proc/$$/fd/1) is the pod's storage, and only its
    tail is ever read: 1 GB appended to it under a 256 MiB storage limit could get the pod
    evicted, and without a limit fill the node's disk. The runner keeps the file near 4 MiB
    while the phase runs: the agent finishes, the trial is rewarded, and the agent's log
    carries the runner's line saying how much it dropped."""
    from shipyard.api.conventions import logs_configmap_name

    shipyard.task("chatty", task_files(
        "test -f /app/done && echo 1 > /logs/verifier/reward.txt"
        " || echo 0 > /logs/verifier/reward.txt\n",
        toml_extra="storage_mb = 256\n", agent_timeout=240))
    shipyard.trial("chatty-agent", "chatty", {
        "name": "command",
        "command": "yes shipyard-chatter | head -c 1000000000 >> /proc/$$/fd/1; touch /app/done"},
        retries=0)
    body = shipyard.wait("chatty-agent", timeout=300)
    assert body["status"].get("reward") == 1, brief(body["status"])
    log = shipyard.core.read_namespaced_config_map(
        logs_configmap_name("chatty-agent"), shipyard.namespace).data["agent.log"]
    dropped = re.search(r"shipyard runner: phase \S+: (\d+) bytes of its output dropped", log)
    assert dropped and int(dropped.group(1)) > 900_000_000, log


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_a_gzip_bomb_task_bundle_is_refused_with_the_operator_s_memory_bounded(
        operator, shipyard, namespace):
    """Class 5: a ~500 KB bundle that decompresses to 512 MiB. The Task says why it is invalid,
    a Trial of it fails TaskInvalid at once, and the operator's RSS grows by less than
    100 MiB (the limit is 128 MiB, measured before anything is kept)."""
    import base64
    import gzip
    import io
    import tarfile

    from shipyard.api.models import GROUP, VERSION
    from shipyard.api.task_source import BUNDLE_KEY, split_bundle

    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9) as gz:
        info = tarfile.TarInfo("environment/big.bin")
        info.size = 512 << 20
        gz.write(info.tobuf(format=tarfile.GNU_FORMAT))
        chunk = b"\0" * (1 << 20)
        for _ in range(512):
            gz.write(chunk)
    bomb = buf.getvalue()
    parts = split_bundle(bomb)
    assert operator.proc is not None
    before = _rss_kib(operator.proc.pid)
    for i, part in enumerate(parts):
        shipyard.core.create_namespaced_config_map(namespace, {
            "metadata": {"name": f"bomb-files-{i}"},
            "binaryData": {BUNDLE_KEY: base64.b64encode(part).decode()}})
    shipyard.api.create_namespaced_custom_object(GROUP, VERSION, namespace, "tasks", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": {"name": "bomb"},
        "spec": {"source": {"configMap": {"name": "bomb-files", "parts": len(parts)}}}})
    ready = condition(shipyard.wait_task("bomb"), "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "TaskInvalid"), ready
    assert "once decompressed (limit 128 MiB)" in ready["message"], ready
    shipyard.trial("bomb-oracle", "bomb")
    trial = shipyard.wait("bomb-oracle", timeout=60)
    assert condition(trial, "Failed")["reason"] == "TaskInvalid", brief(trial["status"])
    grown = _rss_kib(operator.proc.pid) - before
    assert grown < 100 * 1024, f"the operator's RSS grew by {grown} KiB"


def test_task_documents_that_never_end_are_refused_while_the_operator_goes_on(
        operator, shipyard):
    """Class 5, a malicious task's documents: a compose file of nine levels of nine YAML
    aliases (600 bytes, a billion values for whatever walks it: it used to hang the Task's
    check and each trial's load, a CPU-bound thread each), an alias inside itself, and a
    task.toml nested 3,000 deep (a RecursionError), a .harborignore with a bad range (a
    traceback). Each Task is refused naming its file and the reason, its Trial fails
    TaskInvalid, and a plain trial beside them scores 1, its .harborignore's pattern that
    backtracks (`*a` twelve times: 200 s with Python's `re`) matched at once."""
    from tests.unit.taskformat.test_documents import laughs

    base = {"task.toml": (f'schema_version = "1.4"\n[agent]\ntimeout_sec = 60\n[verifier]\n'
                          f'timeout_sec = 60\n[environment]\ndocker_image = "{TASK_IMAGE}"\n'),
            "instruction.md": "Nothing.\n",
            "tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
            "solution/solve.sh": "#!/bin/bash\ntrue\n"}
    bad = {
        "laughs": ({"environment/docker-compose.yaml": laughs()},
                   "environment/docker-compose.yaml: expands to more than 100,000 values"),
        "itself": ({"environment/docker-compose.yaml":
                    "x: &a [1, *a]\nservices:\n  main:\n    image: busybox\n"},
                   "environment/docker-compose.yaml: an alias refers to a value that contains"),
        "deep": ({"task.toml": base["task.toml"] + "[metadata]\nx = " + "[" * 3000
                  + "]" * 3000 + "\n"}, "task.toml: nested more than 64 levels deep"),
        "range": ({"tests/.harborignore": "[z-a]\n"},
                  "tests/.harborignore: its patterns cannot be matched: bad character range"),
    }
    started = time.monotonic()
    for name, (files, _) in bad.items():
        shipyard.task(name, {**base, **files})
        shipyard.trial(f"{name}-oracle", name)
    # A pattern that backtracks (200 s with Python's re against this name): matched by RE2.
    shipyard.task("plain", {**base, "tests/.harborignore": "*a" * 12 + "c\n",
                            f"tests/{'a' * 200}": "kept\n"})
    shipyard.trial("plain-oracle", "plain")
    for name, (_, words) in bad.items():
        ready = condition(shipyard.wait_task(name), "Ready")
        assert (ready["status"], ready["reason"]) == ("False", "TaskInvalid"), ready
        assert words in ready["message"], ready
        trial = shipyard.wait(f"{name}-oracle", timeout=60)
        failed = condition(trial, "Failed")
        assert failed["reason"] == "TaskInvalid" and words in failed["message"], failed
    plain = shipyard.wait("plain-oracle", timeout=120)
    assert plain["status"].get("reward") == 1, brief(plain["status"])
    assert time.monotonic() - started < 120


def test_a_shared_verifier_finds_no_secret_in_the_files_the_agent_left(shipyard):
    """Class 3: an agent (root, then as nobody) writes its key into files under /logs/agent
    (printenv, base64); a shared verifier that searches /logs for it finds nothing, and the
    logs hold it redacted."""
    value = "sk-trust-7f3a91c2d4e5"
    core = base64.b64encode(value.encode()).decode()[:20]
    shipyard.core.create_namespaced_secret(shipyard.namespace, {
        "metadata": {"name": "trust-key"}, "stringData": {"MODEL_API_KEY": value}})
    test_sh = (f"found=$(grep -rl -e {value} -e {core} /logs 2>/dev/null)\n"
               'echo "found: [$found]"\n'
               'if [ -z "$found" ] && [ -s /logs/agent/env.txt ]; then echo 1; else echo 0; fi '
               "> /logs/verifier/reward.txt\n")
    files = {
        "task.toml": (f'schema_version = "1.4"\n[agent]\ntimeout_sec = 60\n[verifier]\n'
                      f'timeout_sec = 60\n[environment]\ndocker_image = "{TASK_IMAGE}"\n'),
        "instruction.md": "Leak.\n", "tests/test.sh": "#!/bin/bash\n" + test_sh}
    shipyard.task("leak", files)
    nobody = dict(files, **{"task.toml": files["task.toml"].replace(
        "[agent]\n", '[agent]\nuser = "nobody"\n')})
    shipyard.task("leak-nobody", nobody)
    agent = {"name": "command", "envFrom": [{"secretRef": {"name": "trust-key"}}],
             "command": ("printenv > /logs/agent/env.txt; mkdir -p /logs/agent/d; "
                         "echo \"$MODEL_API_KEY\" | base64 > /logs/agent/d/k.b64; "
                         "echo \"$MODEL_API_KEY\" > /logs/artifacts/k.txt")}
    shipyard.trial("leak-root", "leak", agent)
    shipyard.trial("leak-nobody", "leak-nobody", agent)
    for name in ("leak-root", "leak-nobody"):
        trial = shipyard.wait(name, timeout=180)
        assert trial["status"].get("reward") == 1, (name, brief(trial["status"]))
        logs = shipyard.core.read_namespaced_config_map(
            trial["status"]["logsConfigMap"], shipyard.namespace).data
        assert "found: []" in logs["verifier.log"], logs
        assert value not in str(logs) and core not in str(logs)


# The structural fix: a root agent replaces the image's programs that runner.sh runs on (sh,
# awk, tar, cat, su, and tail, wc, base64 that its results go through) with forgers that still
# do their job. Each forger writes reward 1 where runner.sh would let it: a loop started from
# the operator's own execs of the runner (kept by the sweep as an exec session's child), after
# `su` (the verifier user's switch) and `awk` return, into the test script a bundle unpacked by
# `tar` carries, and `cat`/`tail`/`base64` reading a reward. Shipyard's own steps before and
# after a phase (files into place, collect hooks) go through forgers too: `cp` rewrites the
# verifier's tests as it copies them, `timeout` (a collect hook's) leaves a loop writing the
# reward, and `mkdir`, `chmod`, `chown`, `rm`, `find` write it once their job is done. The Go
# runner (an ELF on a read-only mount) runs none of them, so the real test scores the agent.
TOOL_FORGERS = r"""
B=/usr/local/bin
real() { f=$(readlink -f "$(command -v "$1")"); cp "$f" "$B/$1.real"; echo "$f"; }
sh_=$(real sh); tar_=$(real tar); cat_=$(real cat); awk_=$(real awk); su_=$(real su)
tail_=$(real tail); wc_=$(real wc); b64_=$(real base64); real sleep >/dev/null
cp_=$(real cp); mkdir_=$(real mkdir); chmod_=$(real chmod); chown_=$(real chown)
rm_=$(real rm); find_=$(real find); timeout_=$(real timeout)
put() { $B/rm.real -f "$1"; $B/cp.real "$2" "$1"; $B/chmod.real 755 "$1"; }
R=/logs/verifier/reward.txt
cat > /tmp/sh <<X
#!$B/sh.real
case "\$1" in */shipyard/bin/runner)
  (while :; do echo 1 > $R; $B/sleep.real 0.02; done) </dev/null >/dev/null 2>&1 &
esac
exec $B/sh.real "\$@"
X
cat > /tmp/tar <<X
#!$B/sh.real
$B/tar.real "\$@"; rc=\$?
for d in /shipyard/phases/*/payload/tests; do
  [ -d "\$d" ] && printf '#!/bin/sh\necho 1 > $R\n' > "\$d/test.sh" 2>/dev/null
done
exit \$rc
X
cat > /tmp/cat <<X
#!$B/sh.real
case "\$*" in *reward*) echo 1; exit 0;; esac
exec $B/cat.real "\$@"
X
cat > /tmp/cp <<X
#!$B/sh.real
$B/cp.real "\$@"; rc=\$?
[ -f /tests/test.sh ] && printf '#!/bin/sh\necho 1 > $R\n' > /tests/test.sh 2>/dev/null
exit \$rc
X
cat > /tmp/timeout <<X
#!$B/sh.real
(while :; do echo 1 > $R; $B/sleep.real 0.02; done) </dev/null >/dev/null 2>&1 &
exec $B/timeout.real "\$@"
X
for p in awk su tail wc base64 mkdir chmod chown rm find; do
  printf '#!%s/sh.real\n%s/%s.real "$@"; rc=$?\necho 1 > %s 2>/dev/null\nexit $rc\n' \
    "$B" "$B" "$p" "$R" > /tmp/$p
done
put "$tar_" /tmp/tar; put "$cat_" /tmp/cat; put "$awk_" /tmp/awk; put "$su_" /tmp/su
put "$tail_" /tmp/tail; put "$wc_" /tmp/wc; put "$b64_" /tmp/base64
put "$mkdir_" /tmp/mkdir; put "$chown_" /tmp/chown; put "$find_" /tmp/find
put "$timeout_" /tmp/timeout; put "$chmod_" /tmp/chmod; put "$rm_" /tmp/rm; put "$cp_" /tmp/cp
put "$sh_" /tmp/sh
echo replaced: $sh_ $tar_ $cat_ $awk_ $su_ $tail_ $wc_ $b64_ $cp_ $mkdir_ $chmod_ $chown_ \
  $rm_ $find_ $timeout_
"""

SHARED_TEST = (
    "#!/bin/bash\n"
    'exp=$(cat /tests/expected.txt); got=$(cat /tmp/answer.txt 2>/dev/null)\n'
    'echo "got=[$got] user=$(id -un)"\n'
    'echo "hook=$(cat /logs/verifier/collected.txt 2>/dev/null)"\n'
    "grep -q ELF /shipyard/bin/runner && echo runner=elf\n"
    "grep ' /shipyard/bin ' /proc/mounts | grep -q ' ro[, ]' && echo runner=ro\n"
    'if [ -n "$exp" ] && [ "$got" = "$exp" ]; then echo 1; else echo 0; fi '
    "> /logs/verifier/reward.txt\n"
)


def shared_task(agent_user: str | None, verifier_user: str | None) -> dict[str, str]:
    agent = f'user = "{agent_user}"\n' if agent_user else ""
    verifier = f'user = "{verifier_user}"\n' if verifier_user else ""
    # A collect hook, run before the tests as the verifier's user (runner.sh: `timeout`, `su`).
    hook = ("[[verifier.collect]]\ncommand = \"echo collected > /logs/verifier/collected.txt\"\n"
            "timeout_sec = 20\n" + verifier)
    return {
        "task.toml": (f'schema_version = "1.4"\n[agent]\ntimeout_sec = 60\n{agent}'
                      f"[verifier]\ntimeout_sec = 60\n{verifier}"
                      f'[environment]\ndocker_image = "{TASK_IMAGE}"\nworkdir = "/app"\n'
                      f"{hook}"),
        "instruction.md": "Write the answer key into /tmp/answer.txt.\n",
        "tests/test.sh": SHARED_TEST,
        "tests/expected.txt": EXPECTED + "\n",
        "solution/solve.sh": f"#!/bin/bash\necho {EXPECTED} > /tmp/answer.txt\n",
    }


def test_an_agent_that_replaced_sh_awk_tar_cat_and_su_neither_moves_the_runner_nor_the_reward(
        shipyard):
    """Shared verifier (as root, and as `user = "nobody"`, switched by the runner's own system
    calls) after a root agent replaced the image's sh, awk, tar, cat, su, tail, wc and base64
    with forgers; an unprivileged agent that tries the same; and the separate verifier after
    the same agent. The oracle still scores 1 on each task (the runner works on the forged
    image), every forger 0."""
    variants = {"root": (None, None), "vnobody": (None, "nobody"),
                "anobody": ("nobody", "nobody")}
    agent = {"name": "command", "command": TOOL_FORGERS}
    for name, (agent_user, verifier_user) in variants.items():
        files = shared_task(agent_user, verifier_user)
        files["solution/solve.sh"] += TOOL_FORGERS if agent_user is None else ""
        shipyard.task(f"tools-{name}", files)
        shipyard.trial(f"tools-{name}-oracle", f"tools-{name}")
        shipyard.trial(f"tools-{name}-forger", f"tools-{name}", agent)
    # Separate: the collect phase (hooks, artifacts packed) runs in the agent's forged pod.
    separate = separate_task()
    separate["task.toml"] += '[[verifier.collect]]\ncommand = "ls /app/out > /app/out/ls.txt"\n'
    separate["solution/solve.sh"] += TOOL_FORGERS
    shipyard.task("tools-separate", separate)
    shipyard.trial("tools-separate-forger", "tools-separate", agent)
    shipyard.trial("tools-separate-oracle", "tools-separate")
    for name, (_agent_user, verifier_user) in variants.items():
        for who, reward in (("oracle", 1.0), ("forger", 0.0)):
            trial = shipyard.wait(f"tools-{name}-{who}", timeout=240)
            status = trial["status"]
            assert status["phase"] == "Completed", (name, who, brief(status))
            assert status.get("reward") == reward, (name, who, brief(status))
            log = _verifier_log(shipyard, trial)
            assert f"user={verifier_user or 'root'}" in log, (name, who, log)
            assert "runner=elf" in log and "runner=ro" in log, (name, who, log)
            assert "hook=collected" in log, (name, who, log)
    forger = shipyard.wait("tools-separate-forger", timeout=240)
    assert forger["status"].get("reward") == 0.0, brief(forger["status"])
    oracle = shipyard.wait("tools-separate-oracle", timeout=240)
    assert oracle["status"].get("reward") == 1.0, brief(oracle["status"])


def test_a_shared_verifier_finds_no_secret_the_agent_wrote_anywhere(shipyard):
    """Either runner scrubs every file changed during a phase given secrets (not only
    /logs/agent): a root agent that hid its key (and its base64) in /tmp, /root, /etc and
    /shipyard, backdating the files, leaves nothing a shared verifier finds."""
    value = "sk-trust-anywhere-5b7e21"
    core = base64.b64encode(value.encode()).decode()[:20]
    shipyard.core.create_namespaced_secret(shipyard.namespace, {
        "metadata": {"name": "anywhere-key"}, "stringData": {"MODEL_API_KEY": value}})
    test_sh = (f"found=$(grep -rl -e {value} -e {core} / --exclude-dir=proc --exclude-dir=sys "
               "--exclude-dir=dev --exclude-dir=tests 2>/dev/null)\n"
               'echo "found: [$found]"\n'
               'if [ -z "$found" ] && [ -s /tmp/hidden.txt ]; then echo 1; else echo 0; fi '
               "> /logs/verifier/reward.txt\n")
    shipyard.task("anywhere", {
        "task.toml": (f'schema_version = "1.4"\n[agent]\ntimeout_sec = 60\n[verifier]\n'
                      f'timeout_sec = 60\n[environment]\ndocker_image = "{TASK_IMAGE}"\n'),
        "instruction.md": "Hide.\n", "tests/test.sh": "#!/bin/bash\n" + test_sh})
    command = ('echo "k=$MODEL_API_KEY" > /tmp/hidden.txt; mkdir -p /root/.cfg; '
               'echo "$MODEL_API_KEY" | base64 > /root/.cfg/k; printenv > /etc/agent.env; '
               'echo "$MODEL_API_KEY" > /shipyard/left.txt 2>/dev/null; '
               "touch -d 2001-01-01 /tmp/hidden.txt /root/.cfg/k /etc/agent.env")
    shipyard.trial("anywhere", "anywhere", {
        "name": "command", "envFrom": [{"secretRef": {"name": "anywhere-key"}}],
        "command": command})
    trial = shipyard.wait("anywhere", timeout=180)
    logs = shipyard.core.read_namespaced_config_map(
        trial["status"]["logsConfigMap"], shipyard.namespace).data
    assert trial["status"].get("reward") == 1, (brief(trial["status"]), logs)
    assert "found: []" in logs["verifier.log"], logs
    assert value not in str(logs) and core not in str(logs)


# A root agent against the runner's files (mounted from ConfigMaps, joined by the loader into a
# sealed memfd: docs/runner-protocol.md, "Loader"): it tries to change a part, add one, swap
# the loader, remount the folder writable, and write into the running runner's own memfd (its
# supervisor of the agent phase), each a way to run code of its own as the runner of the
# verifier's phase. Each is refused; the verifier's runner is Shipyard's and scores 0.
RUNNER_ATTACKS = r"""
try() {
  if sh -c "$2" 2>/dev/null; then echo "attack $1: done"; else echo "attack $1: refused"; fi
}
try part 'printf "\x7fELF" >> /shipyard/bin/runner.0'
try extra-part 'cp /bin/true /shipyard/bin/runner.3'
try loader 'cp /bin/true /shipyard/bin/runner'
try data-link 'rm -f /shipyard/bin/..data'
try remount 'mount -o remount,rw /shipyard/bin'
n=0
for p in /proc/[0-9]*; do
  case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in *"/shipyard/bin/runner "*|*"runner supervise"*)
    n=$((n + 1)); try memfd "printf x >> $p/exe"
    readlink $p/exe >/dev/null 2>&1 && echo "saw the exe of ${p#/proc/}";;
  esac
done
echo "runner processes seen: $n"
"""


def attacked_and_oracle(shipyard, name: str, attack: str) -> tuple[dict, dict, str]:
    """`shared_task` as `name`, run by a root agent running `attack` and by the oracle: the
    oracle scores 1, the attack completes with the real test's 0; both Trials and the
    attacking agent's log."""
    shipyard.task(name, shared_task(None, None))
    shipyard.trial(f"{name}-attack", name, {"name": "command", "command": attack})
    shipyard.trial(f"{name}-oracle", name)
    attacked = shipyard.wait(f"{name}-attack", timeout=180)
    oracle = shipyard.wait(f"{name}-oracle", timeout=180)
    assert oracle["status"].get("reward") == 1.0, brief(oracle["status"])
    assert attacked["status"]["phase"] == "Completed", brief(attacked["status"])
    assert attacked["status"].get("reward") == 0.0, brief(attacked["status"])
    agent_log = shipyard.core.read_namespaced_config_map(
        attacked["status"]["logsConfigMap"], shipyard.namespace).data["agent.log"]
    return attacked, oracle, agent_log


def test_an_agent_cannot_change_the_runner_mounted_from_configmaps(shipyard):
    """Root agent, shared verifier, the Go runner from ConfigMaps (the tests' default): every
    attack on the runner's parts, loader, mount and running memfd (which a runner process,
    not dumpable, does not even show) is refused and the reward is
    the real test's 0; the oracle still scores 1."""
    attacked, _, agent_log = attacked_and_oracle(shipyard, "runner-files", RUNNER_ATTACKS)
    for attack in ("part", "extra-part", "loader", "data-link", "remount"):
        assert f"attack {attack}: refused" in agent_log, agent_log
    assert "done" not in agent_log, agent_log
    seen = re.search(r"runner processes seen: (\d+)", agent_log)
    assert seen and int(seen.group(1)) >= 1, agent_log  # the agent phase's supervisor
    assert agent_log.count("attack memfd: refused") == int(seen.group(1)), agent_log
    assert "saw the exe" not in agent_log, agent_log  # not dumpable: not even its memfd
    log = _verifier_log(shipyard, attacked)
    assert "runner=elf" in log and "runner=ro" in log, log


HELD_VERIFIER_ATTACKS = r"""
loot=/tmp/loot; : > $loot; n=0
for p in /proc/[0-9]*; do
  cmd=$(tr '\0' ' ' < $p/cmdline 2>/dev/null)
  case "$cmd" in *"/shipyard/bin/runner "*|*"runner supervise"*) ;; *) continue;; esac
  n=$((n + 1)); echo "runner ${p#/proc/}: $cmd" >> $loot
  cat $p/environ >> $loot 2>/dev/null && echo "read environ of ${p#/proc/}"
  cat $p/maps >> $loot 2>/dev/null && echo "read maps of ${p#/proc/}"
  for fd in $p/fd/*; do
    timeout 1 cat $fd >> $loot 2>/dev/null && echo "read $fd"
  done
done
echo "runner processes seen: $n"
if grep -q 7c1e-answer-key $loot; then echo 7c1e-answer-key > /tmp/answer.txt; echo LEAKED; fi
key=$(grep -o 'verifier:[0-9a-f]\{8,\}' $loot | head -1 | cut -d: -f2)
if [ -n "$key" ]; then
  echo "KEY SEEN"
  s=/shipyard/state/verifier p=/shipyard/phases/verifier
  mkdir -p $s $p /logs/verifier && echo 1 > /logs/verifier/reward.txt && echo "$key" > $s/key
  echo 0 > $s/rc && date -u +%Y-%m-%dT%H:%M:%SZ > $s/started && cp $s/started $s/finished
  echo /logs/verifier/reward.txt > $p/collect && : > $s/done
fi
"""


def test_an_agent_cannot_read_the_verifier_the_runner_holds_for_after_it(shipyard, operator):
    """One exec runs a quick single-step trial's environment, agent and shared verifier
    (`machine.folds_verifier`): while the agent runs, the runner holds the verifier's bundle
    (the answer key in /tests) and launch key. A root agent that reads every runner
    process's command line, environment, memory maps and open files (the upload's pipe among
    them) finds neither, and its forged verifier state is discarded: the real test scores 0.
    The oracle scores 1 the same way, and both trials took a single exec."""
    attacked, oracle, agent_log = attacked_and_oracle(shipyard, "held", HELD_VERIFIER_ATTACKS)
    seen = re.search(r"runner processes seen: (\d+)", agent_log)
    assert seen and int(seen.group(1)) >= 2, agent_log  # the chain's exec, the supervisor
    for leak in ("read environ", "read maps", "read /proc", "LEAKED", "KEY SEEN"):
        assert leak not in agent_log, agent_log
    for trial in (attacked, oracle):
        pod = trial["status"]["podName"]
        execs = [line for line in operator.log().splitlines()
                 if f"exec {shipyard.namespace}/{pod}:" in line]
        assert len(execs) == 1 and "verifier:-" in execs[0], execs


# Someone who may write ConfigMaps in the namespace (not the operator) makes the runner's
# ConfigMaps first, under their content-addressed names, holding a runner of their own that
# forges a reward, immutable so that nobody could fix them in place.
FORGED_RUNNER = ("#!/bin/sh\n# planted-9c4e\necho 'state=done rc=0 result=1 end=1'\n"
                 "echo 1 > /logs/verifier/reward.txt\n")
FORGED_PART = b"\x7fELF planted-9c4e"


def _runner_configmap_names(cluster) -> list[str]:
    """The runner.sh ConfigMap's name and, when the tests' operator mounts the Go runner from
    ConfigMaps (the local cluster's default; not under SHIPYARD_RUNNER=sh nor
    SHIPYARD_RUNNER_FILES=none), its first part's."""
    from pathlib import Path

    from shipyard.render.pod import runner_configmap_name
    from shipyard.render.runner_parts import runner_configmap_names
    from tests.e2e.conftest import build_env

    names = [runner_configmap_name()]
    folder = Path(build_env(cluster.local).get("SHIPYARD_RUNNER_FILES") or "none")
    if os.environ.get("SHIPYARD_RUNNER", "go") != "sh" and (folder / "runner").is_file():
        names += runner_configmap_names((folder / "runner").read_bytes(),
                                        (folder / "loader").read_bytes()).names[:1]
    return names


def _plant(shipyard, name: str, finalizer: bool = False) -> None:
    shipyard.core.create_namespaced_config_map(shipyard.namespace, {
        "metadata": {"name": name, **({"finalizers": ["example.com/hold"]} if finalizer else {})},
        "immutable": True,
        "data": {"runner": FORGED_RUNNER},
        "binaryData": {"runner.0": base64.b64encode(FORGED_PART).decode()}})


def test_a_runner_configmap_someone_else_made_first_is_replaced_not_run(cluster, shipyard):
    """The operator finds that what the names hold is not what they stand for and replaces
    them before any pod mounts them: the nop agent scores 0, the oracle 1, and the
    ConfigMaps then hold the operator's runner."""
    names = _runner_configmap_names(cluster)
    for name in names:
        _plant(shipyard, name)
    shipyard.task("planted", separate_task())
    shipyard.trial("planted-nop", "planted", {"name": "nop"})
    shipyard.trial("planted-oracle", "planted")
    assert shipyard.wait("planted-nop", timeout=240)["status"].get("reward") == 0.0
    assert shipyard.wait("planted-oracle", timeout=240)["status"].get("reward") == 1.0
    for name in names:
        cm = shipyard.core.read_namespaced_config_map(name, shipyard.namespace)
        held = (cm.data or {}).get("runner", "") + str(cm.binary_data or {})
        assert "planted-9c4e" not in held, name
        assert base64.b64encode(FORGED_PART).decode() not in held, name
        assert cm.immutable, name


def test_a_runner_configmap_that_cannot_be_replaced_fails_the_trial_naming_it(cluster,
                                                                           shipyard):
    """The planted ConfigMap carries a finalizer, so deleting it leaves it in place: the trial
    fails saying which ConfigMap holds foreign content, and no pod of it ever ran."""
    name = _runner_configmap_names(cluster)[0]
    _plant(shipyard, name, finalizer=True)
    try:
        shipyard.task("held", separate_task())
        shipyard.trial("held-nop", "held", {"name": "nop"})
        trial = shipyard.wait("held-nop", timeout=240)
        assert trial["status"].get("phase") == "Failed", brief(trial["status"])
        assert trial["status"].get("reward") is None, brief(trial["status"])
        failed = condition(trial, "Failed")
        assert failed is not None and f"{shipyard.namespace}/{name}" in failed["message"], failed
        assert "no Shipyard operator wrote" in failed["message"], failed
        assert not shipyard.core.list_namespaced_pod(
            shipyard.namespace, label_selector=f"{LABEL_TRIAL}=held-nop").items
    finally:
        shipyard.core.patch_namespaced_config_map(name, shipyard.namespace,
                                                  {"metadata": {"finalizers": None}})


def test_the_operators_own_runner_configmaps_found_again_are_kept_as_they_are(cluster, operator,
                                                                              shipyard):
    """The other side of the check: a restarted operator finds the runner ConfigMaps it made
    before holding what their names stand for, and keeps them (the same uids, no warning)."""
    shipyard.task("again", separate_task())
    shipyard.trial("again-1", "again", {"name": "nop"})
    assert shipyard.wait("again-1", timeout=240)["status"].get("reward") == 0.0
    names = _runner_configmap_names(cluster)

    def uids() -> dict[str, str]:
        return {n: shipyard.core.read_namespaced_config_map(n, shipyard.namespace).metadata.uid
                for n in names}

    first = uids()
    operator.kill()
    operator.start()  # a new process: it checks this namespace's ConfigMaps again
    shipyard.trial("again-2", "again", {"name": "nop"})
    assert shipyard.wait("again-2", timeout=240)["status"].get("reward") == 0.0
    assert uids() == first
    assert f"ConfigMap {shipyard.namespace}/" not in operator.log()


def _reuse_task(no_network: bool) -> dict[str, str]:
    network = 'network_mode = "no-network"\n' if no_network else ""
    return {
        "task.toml": ('schema_version = "1.4"\n[agent]\ntimeout_sec = 120\n'
                      '[verifier]\ntimeout_sec = 60\nenvironment_mode = "separate"\n'
                      f'[environment]\ndocker_image = "{TASK_IMAGE}"\nworkdir = "/app"\n'
                      f'{network}'),
        "instruction.md": "Write the answer key into /logs/artifacts/answer.txt.\n",
        "tests/test.sh": ("#!/bin/bash\ngot=$(cat /logs/artifacts/answer.txt 2>/dev/null)\n"
                          f'[ "$got" = "{EXPECTED}" ] && echo 1 > /logs/verifier/reward.txt '
                          "|| echo 0 > /logs/verifier/reward.txt\n"),
        "solution/solve.sh": f"#!/bin/bash\necho {EXPECTED} > /logs/artifacts/answer.txt\n",
    }


def test_a_trial_made_again_under_a_just_deleted_trials_name_gets_none_of_its_objects(
        shipyard):
    """`kubectl delete` then `apply` of a Trial (or of a Sweep, whose trial names are fixed by
    its plan): the old trial's pod (5 s of grace), logs ConfigMap and policies still hold the
    names the new one's would have. The new trial must not run in the old pod (whose agent
    wrote the answer), nor adopt its objects: a nop scores 0, and what it ran under is its own."""
    from kubernetes import client

    ns = shipyard.namespace
    networking = client.NetworkingV1Api(shipyard.core.api_client)
    for network in (False, True):
        task = f"reuse-{int(network)}"
        name = f"same-{int(network)}"
        shipyard.task(task, _reuse_task(network))
        agent = {"name": "command",
                 "command": f"echo {EXPECTED} > /logs/artifacts/answer.txt; sleep 100"}
        shipyard.trial(name, task, agent)
        shipyard.wait(name, timeout=120, until=lambda t: (t.get("status") or {}).get(
            "currentPhase") == "agent")
        time.sleep(1)
        shipyard.api.delete_namespaced_custom_object("shipyard.dev", "v1alpha1", ns, "trials",
                                                     name)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                shipyard.api.get_namespaced_custom_object("shipyard.dev", "v1alpha1", ns,
                                                          "trials", name)
            except client.ApiException as e:
                if e.status == 404:
                    break
                raise
            time.sleep(0.1)
        shipyard.trial(name, task, {"name": "nop"})
        uid = shipyard.api.get_namespaced_custom_object("shipyard.dev", "v1alpha1", ns,
                                                        "trials", name)["metadata"]["uid"]
        trial = shipyard.wait(name, timeout=180)
        assert trial["status"]["phase"] == "Completed", brief(trial)
        assert trial["status"]["rewards"] == {"reward": 0.0}, brief(trial)
        logs = shipyard.core.read_namespaced_config_map(trial["status"]["logsConfigMap"], ns)
        assert [o.uid for o in logs.metadata.owner_references] == [uid]
        if network:
            owned = [p for p in networking.list_namespaced_network_policy(ns).items
                     if p.metadata.name.startswith(name)]
            assert owned and all([o.uid for o in p.metadata.owner_references] == [uid]
                                 for p in owned), [(p.metadata.name, p.metadata.owner_references)
                                                   for p in owned]



def test_environment_values_no_process_can_hold_are_refused_naming_the_field(shipyard):
    """Bad input: an env value over what Linux lets one variable hold (128 KiB with its name),
    or with a NUL byte, starts no process. A Trial's agent env of either ran its agent phase
    into `argument list too long` (or `environment variable contains NUL`), said so only in
    the agent's log, and recorded reward 0 as if the agent had tried. Now: the apiserver
    refuses a value past the CRD's length, the operator fails the Trial `TrialInvalid` at
    once naming the field, a task.toml env table of either is `TaskInvalid`, and a plain one
    beside them scores 1. Values that each fit but together pass 1 MiB for one phase are
    `TrialInvalid` too, before any pod."""
    from kubernetes.client.rest import ApiException

    files = {
        "task.toml": f'schema_version = "1.4"\n[environment]\ndocker_image = "{TASK_IMAGE}"\n',
        "instruction.md": "Nothing.\n",
        "tests/test.sh": "#!/bin/bash\n[ -e /tmp/solved ] && echo 1 > /logs/verifier/reward.txt"
                         " || echo 0 > /logs/verifier/reward.txt\n",
        "solution/solve.sh": "#!/bin/bash\necho ${#BIG}; touch /tmp/solved\n"}
    shipyard.task("env-sizes", files)
    with pytest.raises(ApiException) as refused_by_crd:  # past the CRD's maxLength
        shipyard.trial("env-past-crd", "env-sizes",
                       agent={"name": "oracle", "env": [{"name": "BIG", "value": "x" * 140_000}]})
    e = refused_by_crd.value
    assert e.status == 422 and "spec.agent.env[0].value" in e.body, e.body[:500]
    refused = {
        "env-too-big": ({"agent": {"name": "oracle", "env": [
            {"name": "BIG", "value": "x" * 131_070}]}},
            "spec.agent.env.0: Value error, BIG: 131,075 bytes with its name: Linux lets one "
            "environment variable hold at most 131,072"),
        "env-nul": ({"verifier": {"env": [{"name": "NUL", "value": "a\u0000b"}]}},
                    "spec.verifier.env.0: Value error, NUL: holds a NUL byte"),
        # Each value fits; together they pass what one process may start with.
        "env-too-much": ({"agent": {"name": "oracle", "env": [
            {"name": f"V{i}", "value": "x" * 110_000} for i in range(10)]}},
            "agent phase: the task's env tables and the Trial's env: 11 variables take "
            "1,100,"),
    }
    for name, (spec, _) in refused.items():
        shipyard.trial(name, "env-sizes", **spec)
    shipyard.task("env-nul-task", {**files, "task.toml": files["task.toml"] + (
        '[environment.env]\nNUL = "a\\u0000b"\n')})
    shipyard.trial("env-nul-task-oracle", "env-nul-task")
    shipyard.trial("env-fine", "env-sizes",
                   agent={"name": "oracle", "env": [{"name": "BIG", "value": "x" * 100_000}]})
    for name, (_, message) in refused.items():
        trial = shipyard.wait(name, timeout=60)
        failed = condition(trial, "Failed")
        assert failed is not None and failed["reason"] == "TrialInvalid", brief(trial["status"])
        assert message in failed["message"], failed["message"]
        assert not trial["status"].get("podName"), brief(trial["status"])
    trial = shipyard.wait("env-nul-task-oracle", timeout=60)
    failed = condition(trial, "Failed")
    assert failed is not None and failed["reason"] == "TaskInvalid", brief(trial["status"])
    assert "environment.env" in failed["message"] and "NUL byte" in failed["message"], failed
    trial = shipyard.wait("env-fine", timeout=120)
    assert trial["status"].get("reward") == 1, brief(trial["status"])



def test_a_phase_the_runner_cannot_start_fails_the_trial_saying_why(shipyard):
    """Failures explained: a root agent that deletes /bin/sh. The runner could not start the
    verifier's phase and exited 127, like the shell's `not found`, as if the test script had
    run and failed. It is now the runner's failure (126 with its line): the trial fails
    naming it, with no reward. An image without /bin/sh fails its environment phase so."""
    files = {
        "task.toml": f'schema_version = "1.4"\n[environment]\ndocker_image = "{TASK_IMAGE}"\n',
        "instruction.md": "Nothing.\n",
        "tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
        "solution/solve.sh": "#!/bin/bash\nrm -f /usr/bin/sh /bin/sh\n"}
    shipyard.task("no-sh-later", files)
    shipyard.task("no-sh", {**files, "task.toml": (
        'schema_version = "1.4"\n[environment]\nbuild_timeout_sec = 300\n'),
        "environment/Dockerfile": ('FROM python:3.12-slim\n'
                                   'RUN ["/usr/bin/rm", "-f", "/usr/bin/sh", "/bin/sh"]\n')})
    shipyard.trial("no-sh-later-oracle", "no-sh-later")
    shipyard.trial("no-sh-oracle", "no-sh")
    for name, reason in (("no-sh-later-oracle", "VerifierFailed"),
                         ("no-sh-oracle", "EnvironmentSetupFailed")):
        trial = shipyard.wait(name, timeout=300)
        failed = condition(trial, "Failed")
        assert failed is not None and failed["reason"] == reason, brief(trial["status"])
        assert "could not start: fork/exec /bin/sh" in failed["message"], failed
        assert trial["status"].get("rewards") is None, brief(trial["status"])


# A task author after the agent's Secrets. Its image's programs run in the pod's `secrets`
# container, which mounts them (a `sleep` found first on the image's PATH copies them, reversed
# so that no scrub recognises them, into the pod's shared folder), and in the warm pod's
# delivery of them (`head` and `sh`, which read the value on stdin); its ENV and task.toml's
# [environment.env] move the runner's scrubbed folders away. The verifier is the task's: it
# looks everywhere for the value, as is and reversed.
STEAL = r"""#!/bin/sh
# the image's `{name}`: keep what passes, then do the real thing
mkdir -p /shipyard/loot 2>/dev/null
for f in /run/shipyard-secrets/*/*; do
  [ -f "$f" ] && python3 -c 'import sys; print(open(sys.argv[1]).read()[::-1])' "$f" \
    >> /shipyard/loot/{name} 2>/dev/null
done
if [ "{name}" = head ]; then
  /usr/bin/head.real "$@" | tee /tmp/head.in
  python3 -c 'import sys; print(open(sys.argv[1]).read()[::-1])' /tmp/head.in \
    >> /shipyard/loot/head
  exit
fi
exec {real} "$@"
"""


def _thief_task(value: str) -> dict[str, str]:
    sleep = STEAL.replace("{name}", "sleep").replace("{real}", "/bin/sleep")
    head = STEAL.replace("{name}", "head").replace("{real}", "/usr/bin/head.real")
    test_sh = (
        "#!/bin/bash\n"
        f"hits=$(grep -rl -e {value} / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev "
        "--exclude-dir=tests 2>/dev/null)\n"
        "loot=$(cat /shipyard/loot/* 2>/dev/null | python3 -c 'import sys; "
        f"print(sys.stdin.read()[::-1])' | grep -c {value})\n"
        'echo "hits: [$hits] loot: [$loot]"; ls -la /shipyard/loot 2>&1\n'
        'if [ -z "$hits" ] && [ "$loot" = 0 ] && [ -s /tmp/hidden.txt ]; then echo 1; '
        "else echo 0; fi > /logs/verifier/reward.txt\n")
    return {
        "task.toml": ('schema_version = "1.4"\n[agent]\ntimeout_sec = 60\n[verifier]\n'
                      "timeout_sec = 60\n[environment]\nbuild_timeout_sec = 600\n"
                      '[environment.env]\nSHIPYARD_SCRUB_DIRS = "/nonexistent"\n'),
        "instruction.md": "Keep your key.\n",
        "tests/test.sh": test_sh,
        "environment/sleep": sleep,
        "environment/head": head,
        "environment/Dockerfile": (
            "FROM python:3.12-slim\n"
            "COPY sleep /usr/local/bin/sleep\n"
            "RUN mv /usr/bin/head /usr/bin/head.real\n"
            "COPY head /usr/bin/head\n"
            "RUN chmod 755 /usr/local/bin/sleep /usr/bin/head\n"
            "ENV SHIPYARD_SCRUB_ROOT=/nonexistent SHIPYARD_SECRETS_SRC=/nonexistent\n"
            "WORKDIR /app\n"),
    }


def test_a_task_whose_programs_and_env_are_after_the_agents_secrets_gets_none(shipyard):
    """A malicious task against an honest agent that writes its key into a file: cold (the
    `secrets` container runs the runner's `idle`, not the image's `sleep`; the runner ignores
    the image's and task.toml's SHIPYARD_* settings in a trial pod, so it scrubs as always)
    and warm (the claimed pod's Secrets are written by the runner's `take-secret`, not by the
    image's `sh` and `head`). The verifier finds the value nowhere, and the agent had it."""
    value = "sk-thief-3c9d51a7"
    shipyard.core.create_namespaced_secret(shipyard.namespace, {
        "metadata": {"name": "thief-key"}, "stringData": {"MODEL_API_KEY": value}})
    shipyard.task("thief", _thief_task(value))
    agent = {"name": "command", "envFrom": [{"secretRef": {"name": "thief-key"}}],
             "command": 'test -n "$MODEL_API_KEY" && echo "k=$MODEL_API_KEY" > /tmp/hidden.txt '
                        '&& echo "$MODEL_API_KEY" > /logs/agent/key.txt'}
    shipyard.api.create_namespaced_custom_object(
        "shipyard.dev", "v1alpha1", shipyard.namespace, "warmpools", {
            "apiVersion": "shipyard.dev/v1alpha1", "kind": "WarmPool",
            "metadata": {"name": "thief-pool"},
            "spec": {"taskRef": {"name": "thief"}, "replicas": 1, "agent": agent}})
    deadline = time.monotonic() + 400
    while (shipyard.get("warmpools", "thief-pool").get("status") or {}).get("ready", 0) < 1:
        assert time.monotonic() < deadline, shipyard.get("warmpools", "thief-pool")
        time.sleep(1)
    shipyard.trial("thief-warm", "thief", agent)
    shipyard.wait("thief-warm", timeout=300)
    shipyard.api.delete_namespaced_custom_object("shipyard.dev", "v1alpha1", shipyard.namespace,
                                                 "warmpools", "thief-pool")
    shipyard.trial("thief-cold", "thief", agent)
    for name in ("thief-warm", "thief-cold"):
        trial = shipyard.wait(name, timeout=300)
        logs = shipyard.core.read_namespaced_config_map(
            trial["status"]["logsConfigMap"], shipyard.namespace).data
        assert trial["status"]["phase"] == "Completed", (name, brief(trial["status"]), logs)
        assert trial["status"].get("reward") == 1, (name, brief(trial["status"]), logs)
        assert "hits: [] loot: [0]" in logs["verifier.log"], (name, logs["verifier.log"])
        assert value not in str(logs) and value not in str(trial)
    assert "-w-" in shipyard.get("trials", "thief-warm")["status"]["podName"]  # claimed
    assert "-w-" not in shipyard.get("trials", "thief-cold")["status"]["podName"]


# A compose sidecar of the task's, root like the agent, that looks for the agent's key where the
# kernel shows it: every process's environment and every container's root filesystem (the
# `secrets` container's mount) through /proc. It proves it saw the agent's own process (the
# `sleep 4.123` the agent runs with its key in its environment) and serves what it found,
# reversed so that no scrub recognises it, to the task's verifier.
SPY = r"""
import http.server, os, threading, time

seen = {"agent": 0, "found": set()}


def scan():
    while True:
        for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
            try:
                cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
            except OSError:
                continue
            if b"4.123" in cmdline:
                seen["agent"] += 1
            try:
                environ = open(f"/proc/{pid}/environ", "rb").read()
            except OSError:
                environ = b""
            for kv in environ.split(b"\0"):
                if kv.startswith(b"MODEL_API_KEY="):
                    seen["found"].add(kv[14:].decode()[::-1])
            for top, _, names in os.walk(f"/proc/{pid}/root/run/shipyard-secrets"):
                for name in names:
                    try:
                        seen["found"].add(open(os.path.join(top, name)).read()[::-1])
                    except OSError:
                        pass
        time.sleep(0.05)


class Serve(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"agent={seen['agent']} found={sorted(seen['found'])}".encode()
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)


threading.Thread(target=scan, daemon=True).start()
http.server.ThreadingHTTPServer(("0.0.0.0", 8099), Serve).serve_forever()
"""


def test_a_root_sidecar_of_the_task_finds_nothing_of_the_agents_key(shipyard):
    """A task author's compose sidecar runs as root beside a root agent in one process
    namespace: `main` holds a capability (MKNOD) no sidecar may, so the kernel refuses the
    sidecar the agent's /proc/PID/environ, and the `secrets` container one (SETPCAP) no other
    container holds, so it is refused that container's /proc/PID/root too (its runner is not
    dumpable only from its first instruction: on a loaded node the sidecar caught a
    `put-secrets` exec as it started). The sidecar saw the agent's process and found no key."""
    value = "sk-spy-8e41c07d"
    shipyard.core.create_namespaced_secret(shipyard.namespace, {
        "metadata": {"name": "spy-key"}, "stringData": {"MODEL_API_KEY": value}})
    compose = ("services:\n  main:\n    image: ${PREBUILT_IMAGE_NAME}\n"
               "    depends_on: [spy]\n"
               f"  spy:\n    image: {TASK_IMAGE}\n"
               '    command: ["python3", "/spy.py"]\n'
               "    volumes:\n      - ./spy.py:/spy.py:ro\n")
    test_sh = ("#!/bin/bash\n"
               "got=$(python3 -c 'import urllib.request; print(urllib.request.urlopen("
               "\"http://spy:8099/\", timeout=10).read().decode())')\n"
               'echo "spy: $got"\n'
               "case \"$got\" in 'agent=0 '*) r=0;; *\"found=[]\") r=1;; *) r=0;; esac\n"
               "echo $r > /logs/verifier/reward.txt\n")
    shipyard.task("spied", {
        "task.toml": (f'schema_version = "1.4"\n[agent]\ntimeout_sec = 60\n[verifier]\n'
                      f'timeout_sec = 60\n[environment]\ndocker_image = "{TASK_IMAGE}"\n'),
        "instruction.md": "Keep your key.\n",
        "environment/docker-compose.yaml": compose,
        "environment/spy.py": SPY,
        "tests/test.sh": test_sh})
    shipyard.trial("spied-cmd", "spied", {
        "name": "command", "envFrom": [{"secretRef": {"name": "spy-key"}}],
        "command": 'test -n "$MODEL_API_KEY" && exec sleep 4.123'})
    trial = shipyard.wait("spied-cmd", timeout=300)
    logs = shipyard.core.read_namespaced_config_map(
        trial["status"]["logsConfigMap"], shipyard.namespace).data
    assert "spy: agent=" in logs["verifier.log"], logs
    assert trial["status"].get("reward") == 1, (brief(trial["status"]), logs)
    assert "found=[]" in logs["verifier.log"], logs["verifier.log"]
    assert value not in str(logs) and value not in str(trial)
