"""Rewards that can be trusted (issue 13), on the real local cluster: an agent cannot outlive
its phase to forge the reward, the verifier finds no agent secret and no /solution, the
secret appears nowhere, and trial pods run hardened with the task's limits."""

from __future__ import annotations

import base64

from tests.e2e.conftest import condition, task_files

# The real test writes 0, then gives a surviving forger time to overwrite it, and reports
# what a forger stole of /tests.
HONEST_TEST = (
    "echo 0 > /logs/verifier/reward.txt\n"
    "sleep 2\n"
    'echo "stolen bytes: $(cat /tmp/stolen 2>/dev/null | wc -c)"\n'
    'echo "reward now: $(cat /logs/verifier/reward.txt)"\n'
)
FORGE = ("while true; do echo 1 > /logs/verifier/reward.txt; cat /tests/test.sh > /tmp/stolen "
         "2>/dev/null; sleep 0.02; done")
AGENTS = {
    # The issue's detached forger.
    "setsid": f"setsid nohup bash -c '{FORGE}' >/dev/null 2>&1 &\nsleep 1",
    # A double fork: its parent is gone at once, it is an orphan of pause.
    "doublefork": f"( ( bash -c '{FORGE}' >/dev/null 2>&1 & ) & )\nsleep 1",
    # As root, the runner's own folders: the verifier's state made ahead of its launch (done,
    # exit code 0) with a collect list naming a reward of 1.
    "state": (
        "s=/shipyard/state/verifier p=/shipyard/phases/verifier\n"
        "mkdir -p $s $p /logs/verifier && echo 1 > /logs/verifier/reward.txt\n"
        "echo 0 > $s/rc && date -u +%Y-%m-%dT%H:%M:%SZ > $s/started && cp $s/started "
        "$s/finished\n"
        "echo /logs/verifier/reward.txt > $p/collect && : > $s/done"
    ),
    # As root, the runner's base written far ahead (its processes would pass for the image's
    # own) and its supervisor killed (whose sweep would end them): the verifier's launch sweeps
    # with the base the operator kept.
    "base": (
        "echo 999999999999 > /shipyard/state/baseline\n"
        f"setsid nohup bash -c '{FORGE}' >/dev/null 2>&1 &\n"
        "sleep 1\nkill -9 $(cat /shipyard/state/agent/supervisor)"
    ),
    # A loop installed in /etc/profile.d, started by a login shell, ignoring TERM and HUP.
    "profiled": (
        "cat > /etc/profile.d/zz-forge.sh <<'EOF'\n"
        f"( trap '' TERM HUP; {FORGE} ) >/dev/null 2>&1 &\n"
        "EOF\n"
        "bash -lc true\nsleep 1"
    ),
}


def test_reward_forgers_are_scored_by_the_real_test(shipyard):
    files = task_files(HONEST_TEST, solve_sh=f"nohup bash -c '{FORGE}' >/dev/null 2>&1 &\n"
                                              "sleep 1\n")
    shipyard.task("forge", files)
    names = []
    for name, command in AGENTS.items():
        shipyard.trial(f"forge-{name}", "forge", {"name": "command", "command": command})
        names.append(f"forge-{name}")
    # The oracle's solve.sh leaves a background nohup forger.
    shipyard.trial("forge-oracle", "forge", {"name": "oracle"})
    names.append("forge-oracle")
    for name in names:
        trial = shipyard.wait(name, timeout=180)
        assert trial["status"]["phase"] == "Completed", (name, trial["status"])
        assert trial["status"]["reward"] == 0.0, name
        logs = shipyard.core.read_namespaced_config_map(trial["status"]["logsConfigMap"],
                                                        shipyard.namespace).data
        assert "stolen bytes: 0" in logs["verifier.log"], (name, logs["verifier.log"])
        assert "reward now: 0" in logs["verifier.log"], (name, logs["verifier.log"])


def _encodings(value: str) -> list[str]:
    """The value and its base64 forms (with or without a newline, at each of the three
    alignments a longer base64 text could hold it in)."""
    forms = [value]
    for raw in (value.encode(), value.encode() + b"\n"):
        forms.append(base64.b64encode(raw).decode().rstrip("="))
        for pad in (b"x", b"xx"):
            text = base64.b64encode(pad + raw).decode().rstrip("=")
            forms.append(text[4:len(text) - 4])
    return forms


def test_the_verifier_finds_no_secret_and_no_solution(operator, shipyard):
    value = "sk-isolation-4c1d9e77a0b3"
    shipyard.core.create_namespaced_secret(shipyard.namespace, {
        "metadata": {"name": "model-key"}, "stringData": {"MODEL_API_KEY": value}})
    # The verifier looks everywhere it could: its env, the mount path, other containers'
    # files through /proc, the runner's directories, /solution. It prints what it finds,
    # base64-encoded (as the issue's leaky test.sh did), and scores 1 only when it finds nothing.
    test_sh = (
        "found=$( { env | grep MODEL_API_KEY; cat /run/shipyard-secrets/*/* "
        "/proc/*/root/run/shipyard-secrets/*/* /proc/*/environ; "
        "grep -rl MODEL_API_KEY /shipyard /proc/*/root/shipyard; ls -A /solution; } 2>/dev/null "
        "| tr '\\0' '\\n' | grep -a -e MODEL_API_KEY -e sk- -e solve )\n"
        'echo "found: $(printf %s "$found" | base64 -w0)"\n'
        'if [ -z "$found" ] && [ -s /app/got-key ]; then echo 1; else echo 0; fi '
        "> /logs/verifier/reward.txt\n"
    )
    solve_sh = '[ "${#MODEL_API_KEY}" -gt 10 ] && echo yes > /app/got-key\n'
    shipyard.task("sealed", task_files(test_sh, solve_sh=solve_sh))
    shipyard.trial("sealed-oracle", "sealed",
                   {"name": "oracle", "envFrom": [{"secretRef": {"name": "model-key"}}]})
    # A command agent that writes the key where a verifier would look, and prints it.
    shipyard.trial("sealed-leaky", "sealed", {
        "name": "command", "envFrom": [{"secretRef": {"name": "model-key"}}],
        "command": 'echo yes > /app/got-key; echo "key=$MODEL_API_KEY"; '
                   'echo "$MODEL_API_KEY" | base64'})
    oracle = shipyard.wait("sealed-oracle", timeout=180)
    assert oracle["status"]["reward"] == 1.0, oracle["status"]
    leaky = shipyard.wait("sealed-leaky", timeout=180)
    assert leaky["status"]["phase"] == "Completed", leaky["status"]
    logs = shipyard.core.read_namespaced_config_map(leaky["status"]["logsConfigMap"],
                                                    shipyard.namespace).data
    assert "key=[REDACTED]" in logs["agent.log"]
    # Everything Shipyard wrote: statuses, Events, ConfigMaps, the operator's log.
    written = [str(shipyard.get("trials", n)) for n in ("sealed-oracle", "sealed-leaky")]
    written += [f"{e.reason} {e.message}" for e in
                shipyard.core.list_namespaced_event(shipyard.namespace).items]
    written += [str(cm.data) for cm in
                shipyard.core.list_namespaced_config_map(shipyard.namespace).items]
    written.append(operator.log())
    for form in _encodings(value):
        assert not [w for w in written if form in w], form


def test_trial_pods_are_hardened_from_inside(shipyard):
    probe = (
        "grep -E '^(NoNewPrivs|Seccomp|CapEff|CapBnd):' /proc/self/status; "
        "chroot / /bin/true && echo 'chroot: ok'; "
        "cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null "
        "| sed 's/^/memory.max: /'"
    )
    shipyard.task("hardened", task_files("echo 1 > /logs/verifier/reward.txt\n",
                                         toml_extra="memory_mb = 512\ncpus = 1\n"))
    shipyard.trial("hardened-cmd", "hardened", {"name": "command", "command": probe})
    trial = shipyard.wait("hardened-cmd", timeout=120)
    logs = shipyard.core.read_namespaced_config_map(trial["status"]["logsConfigMap"],
                                                    shipyard.namespace).data["agent.log"]
    fields = dict(line.split(":", 1) for line in logs.splitlines() if ":" in line)
    assert fields["NoNewPrivs"].strip() == "1", logs
    assert fields["Seccomp"].strip() == "2", logs  # filter mode: RuntimeDefault
    # CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID NET_BIND_SERVICE SYS_CHROOT MKNOD
    # = bits 0-1,3-7,10,18,27
    assert int(fields["CapEff"], 16) == 0x80404FB, logs
    assert int(fields["CapBnd"], 16) == 0x80404FB, logs
    # sshd's privilege separation chroots, as a jail does (Harbor's containers can)
    assert fields["chroot"].strip() == "ok", logs
    assert fields["memory.max"].strip() == str(512 * 1024 * 1024), logs


def test_an_agent_over_its_memory_is_oom_killed_and_reported(shipyard):
    hog = "python3 -c \"x = b'x' * (1 << 30); print(len(x))\""
    shipyard.task("small", task_files("echo 1 > /logs/verifier/reward.txt\n",
                                      toml_extra="memory_mb = 256\n"))
    shipyard.trial("small-hog", "small", {"name": "command", "command": hog})
    trial = shipyard.wait("small-hog", timeout=120)
    # The kernel kills the hog (cgroup v1: the process; v2: the container, a lost pod).
    status = trial["status"]
    if status["phase"] == "Completed":  # verified anyway, as Harbor does after agent errors
        assert status["error"]["type"] == "OOMKilled", status
        agent = next(p for p in status["phases"] if p["name"] == "agent")
        assert agent["state"] == "Failed" and "memory limit" in agent["message"], agent
        assert "OOMKilled" in {e.reason for e in shipyard.events("small-hog")}
    else:
        assert condition(trial, "Failed")["reason"] == "OOMKilled", status


# A fork bomb in the phase's shell (dash): each call starts two more in the background.
BOMB = "b() { b | b & }; b"


def test_a_fork_bomb_stays_in_its_pod_and_its_trial_still_gets_its_reward(shipyard):
    """An agent that fork-bombs, and one that bombs then waits for its timeout, each hold at
    most the pod's PIDs (the kubelet's podPidsLimit, docs/trust.md): the node, the runner and
    a trial beside them go on. The bomb is ended with the phase (the runner's sweep stops
    before it kills: a forking loop cannot outrun it) and the real test scores what the agent
    left, as Harbor verifies after an agent's timeout too."""
    shipyard.task("bomb", task_files(
        "grep -q ok /tmp/out && echo 1 > /logs/verifier/reward.txt"
        " || echo 0 > /logs/verifier/reward.txt\n"
        'echo "processes now: $(ls /proc | grep -c \'^[0-9]\')"\n',
        solve_sh="echo ok > /tmp/out\n", agent_timeout=25))
    shipyard.trial("bomb-left", "bomb", {"name": "command",
                                         "command": f"echo ok > /tmp/out\n{BOMB}\nsleep 5"})
    shipyard.trial("bomb-waits", "bomb", {"name": "command",
                                          "command": f"echo ok > /tmp/out\n{BOMB}\nsleep 600"})
    shipyard.trial("bomb-calm", "bomb")
    for name in ("bomb-left", "bomb-waits", "bomb-calm"):
        trial = shipyard.wait(name, timeout=240)
        status = trial["status"]
        assert status["phase"] == "Completed" and status["rewards"] == {"reward": 1}, status
        logs = shipyard.core.read_namespaced_config_map(status["logsConfigMap"],
                                                        shipyard.namespace).data
        # the verifier ran with the bomb gone: a handful of processes, not thousands
        count = int(logs["verifier.log"].split("processes now: ")[1].split()[0])
        assert count < 50, logs["verifier.log"]
        if name != "bomb-calm":  # the bomb met the pod's limit (dash: "Cannot fork")
            assert "Cannot fork" in logs["agent.log"], logs["agent.log"][-2000:]
        if name == "bomb-waits":
            assert status["error"]["type"] == "AgentTimeoutError", status
    node = shipyard.core.read_node("localhost")
    assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)


def test_the_apiserver_is_unreachable_from_a_public_trial(shipyard):
    """Under `public` (egress anywhere) the apiserver's Service IP and endpoints stay blocked.
    The probe's own control: a server in the pod answers the same probe."""
    svc = shipyard.core.read_namespaced_service("kubernetes", "default")
    endpoints = shipyard.core.read_namespaced_endpoints("kubernetes", "default")
    targets = [(svc.spec.cluster_ip, 443)] + [
        (a.ip, p.port) for s in endpoints.subsets for a in s.addresses for p in s.ports]
    control = ("127.0.0.1", 8765)

    def probe(host: str, port: int) -> str:
        return (f"python3 -c \"import socket; socket.create_connection(('{host}', {port}), "
                f"timeout=3)\" 2>/dev/null && echo 'reached {host}:{port}' "
                f"|| echo 'blocked {host}:{port}'")
    # the control server may take a while to listen on a loaded node: wait for it (≤ 20 s)
    wait_control = ("for i in $(seq 40); do python3 -c \"import socket; socket.create_connection("
                    "('127.0.0.1', 8765), timeout=1)\" 2>/dev/null && break; sleep 0.5; done\n")
    command = ("python3 -m http.server 8765 --bind 127.0.0.1 >/dev/null 2>&1 &\n" + wait_control
               + "\n".join(probe(*t) for t in [control, *targets]))
    shipyard.task("noapi", task_files("echo 1 > /logs/verifier/reward.txt\n"))
    shipyard.trial("noapi-cmd", "noapi", {"name": "command", "command": command})
    trial = shipyard.wait("noapi-cmd", timeout=120)
    log = shipyard.core.read_namespaced_config_map(trial["status"]["logsConfigMap"],
                                                   shipyard.namespace).data["agent.log"]
    assert "reached 127.0.0.1:8765" in log, log
    for host, port in targets:
        assert f"blocked {host}:{port}" in log, log


def test_a_missing_secret_fails_the_trial_within_seconds_naming_it(cluster, shipyard):
    import time

    shipyard.task("needs-key", task_files("echo 1 > /logs/verifier/reward.txt\n"))
    began = time.monotonic()
    shipyard.trial("needs-key-cmd", "needs-key", {
        "name": "command", "command": "true",
        "envFrom": [{"secretRef": {"name": "no-such-key"}}]})
    trial = shipyard.wait("needs-key-cmd", timeout=60)
    assert time.monotonic() - began < 30
    failed = condition(trial, "Failed")
    assert failed["reason"] == "SecretNotFound", trial["status"]
    assert 'spec.agent.envFrom[0].secretRef.name: Secret "no-such-key" not found' in \
        failed["message"], failed
    # `kubectl get trials` shows why, without -o wide.
    printed = cluster.kubectl_run("-n", shipyard.namespace, "get", "trials").stdout
    assert "REASON" in printed and "SecretNotFound" in printed, printed


def test_a_non_positive_timeout_makes_the_task_not_ready_naming_the_field(shipyard):
    shipyard.task("negative", task_files("echo 1 > /logs/verifier/reward.txt\n",
                                         agent_timeout=-5))
    ready = condition(shipyard.wait_task("negative"), "Ready")
    assert ready["status"] == "False", ready
    assert "task.toml" in ready["message"] and "agent.timeout_sec" in ready["message"], ready
    assert "greater than 0" in ready["message"], ready
