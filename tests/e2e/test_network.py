"""Network policies enforced with real packets on the local cluster (issue 6).

A small HTTP server pod (`python3 -m http.server` in the Debian image) is the target. Each
trial probes it from inside its environment pod, during the agent phase (a command agent) and
during verification (test.sh), and the reward reports what was observed: 1 when the target was
reached, 0 when it was not. The local cluster enforces NetworkPolicy with kube-router's
network policy controller (hack/localcluster/kuberouter.py).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

from tests.e2e.conftest import ROOT, TASK_IMAGE, TEST_IMAGE, condition

PROBE = """\
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=3).read()
    print("reached")
except Exception as e:
    print("blocked", type(e).__name__, e, file=sys.stderr)
    print("blocked")
"""
UDP_ECHO = """\
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 9090))
while True:
    data, peer = s.recvfrom(512)
    s.sendto(data, peer)
"""
UDP_PROBE = """\
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
try:
    s.sendto(b"ping", (sys.argv[1], 9090))
    print("reached" if s.recvfrom(512)[0] == b"ping" else "blocked")
except OSError:
    print("blocked")
"""
# The verifier probes, then reports both observations; the reward is the one the test names.
TEST_SH = """#!/bin/bash
agent=$(cat /app/agent-observed.txt 2>/dev/null || echo none)
verifier=$(python3 /app/probe.py "{url}")
a=0; v=0
[ "$agent" = reached ] && a=1
[ "$verifier" = reached ] && v=1
reward={reward}
printf '{{"reward": %s, "agent_reached": %s, "verifier_reached": %s}}' "$reward" "$a" "$v" \\
  > /logs/verifier/reward.json
echo "agent=$agent verifier=$verifier"
"""


@pytest.fixture
def target(core_v1, namespace) -> str:
    """The URL of an HTTP server pod in the test namespace (no policy selects it)."""
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="target", labels={"role": "target"}),
        spec=client.V1PodSpec(
            termination_grace_period_seconds=1,
            containers=[client.V1Container(
                name="http", image=TEST_IMAGE, image_pull_policy="Never",
                command=["python3", "-m", "http.server", "8080"],
                readiness_probe=client.V1Probe(
                    tcp_socket=client.V1TCPSocketAction(port=8080), period_seconds=1),
            ), client.V1Container(
                name="udp-echo", image=TEST_IMAGE, image_pull_policy="Never",
                command=["python3", "-c", UDP_ECHO],
            )],
        ),
    )
    core_v1.create_namespaced_pod(namespace, pod)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = core_v1.read_namespaced_pod("target", namespace)
        ready = any(c.type == "Ready" and c.status == "True"
                    for c in got.status.conditions or [])
        if ready and got.status.pod_ip:
            return f"http://{got.status.pod_ip}:8080/"
        time.sleep(0.3)
    raise AssertionError("the target pod never became ready")


def probe_task(url: str, environment: str = "", agent: str = "", verifier: str = "",
               reward: str = "$v") -> dict[str, str]:
    """A task whose agent (a command agent, see AGENT) and verifier both probe `url`.
    `environment`, `agent` and `verifier` are extra lines for those task.toml tables."""
    toml = (
        'schema_version = "1.4"\n'
        f"[agent]\ntimeout_sec = 60\n{agent}"
        f"[verifier]\ntimeout_sec = 60\n{verifier}"
        f'[environment]\ndocker_image = "{TASK_IMAGE}"\nworkdir = "/app"\n{environment}'
    )
    return {
        "task.toml": toml,
        "instruction.md": "Probe the target.\n",
        "environment/probe.py": PROBE,
        "tests/test.sh": TEST_SH.format(url=url, reward=reward),
    }


def agent_probe(url: str) -> dict[str, Any]:
    return {"name": "command",
            "command": f'python3 /app/probe.py "{url}" > /app/agent-observed.txt'}


def rewards(shipyard, name: str) -> dict[str, float]:
    trial = shipyard.wait(name, timeout=300)
    assert trial["status"]["phase"] == "Completed", trial["status"]
    return trial["status"]["rewards"]


def test_no_network_cannot_reach_the_target_while_public_can(shipyard, target, namespace):
    shipyard.task("public", probe_task(target))
    shipyard.task("offline", probe_task(target, environment='network_mode = "no-network"\n'))
    shipyard.trial("public-probe", "public", agent_probe(target))
    shipyard.trial("offline-probe", "offline", agent_probe(target))
    public, offline = rewards(shipyard, "public-probe"), rewards(shipyard, "offline-probe")
    assert public == {"reward": 1.0, "agent_reached": 1.0, "verifier_reached": 1.0}
    assert offline == {"reward": 0.0, "agent_reached": 0.0, "verifier_reached": 0.0}
    # A restricted trial's policies are objects owned by the trial: deny-all (no allow policy).
    policies = client.NetworkingV1Api(shipyard.core.api_client).list_namespaced_network_policy(
        namespace).items
    owned = {p.metadata.name: p for p in policies
             if p.metadata.owner_references
             and p.metadata.owner_references[0].name == "offline-probe"}
    assert set(owned) == {"offline-probe-net-deny"}
    deny = owned["offline-probe-net-deny"].spec
    assert deny.pod_selector.match_labels == {"shipyard.dev/trial": "offline-probe"}
    assert sorted(deny.policy_types) == ["Egress", "Ingress"]
    # A trial public throughout owns none: the namespace's shared baseline serves it.
    public_names = {p.metadata.name for p in policies if p.metadata.owner_references
                    and p.metadata.owner_references[0].name == "public-probe"}
    assert public_names == set()
    shared = {p.metadata.name for p in policies if not p.metadata.owner_references}
    assert {"shipyard-trial-pods-deny", "shipyard-trial-pods-public"} <= shared
    assert "NetworkPolicies" in {e.reason for e in shipyard.events("offline-probe")}


def test_allowlist_naming_the_target_ip_reaches_it_and_another_ip_does_not(shipyard, target):
    ip = target.split("//")[1].split(":")[0]
    shipyard.task("allowed", probe_task(
        target, environment=f'network_mode = "allowlist"\nallowed_hosts = ["{ip}"]\n'))
    shipyard.task("elsewhere", probe_task(
        target, environment='network_mode = "allowlist"\nallowed_hosts = ["192.0.2.123"]\n'))
    shipyard.trial("allowed-probe", "allowed", agent_probe(target))
    shipyard.trial("elsewhere-probe", "elsewhere", agent_probe(target))
    assert rewards(shipyard, "allowed-probe") == {
        "reward": 1.0, "agent_reached": 1.0, "verifier_reached": 1.0}
    assert rewards(shipyard, "elsewhere-probe") == {
        "reward": 0.0, "agent_reached": 0.0, "verifier_reached": 0.0}


def test_agent_allowlist_on_a_no_network_baseline_holds_only_during_the_agent_phase(
        shipyard, target):
    ip = target.split("//")[1].split(":")[0]
    shipyard.task("phased", probe_task(
        target, environment='network_mode = "no-network"\n',
        agent=f'network_mode = "allowlist"\nallowed_hosts = ["{ip}/32"]\n',
        reward="$a"))
    shipyard.trial("phased-probe", "phased", agent_probe(target))
    # The same through the Trial: a run-level extra agent host on a no-network task
    # (Harbor's --allow-agent-host) turns the agent phase into an allowlist of just it.
    shipyard.task("offline-task", probe_task(
        target, environment='network_mode = "no-network"\n', reward="$a"))
    shipyard.trial("extra-probe", "offline-task", agent_probe(target),
                   network={"extraAllowedHosts": {"agent": [ip]}})
    for name in ("phased-probe", "extra-probe"):
        assert rewards(shipyard, name) == {
            "reward": 1.0, "agent_reached": 1.0, "verifier_reached": 0.0}, name


def test_hostname_allowlist_without_fqdn_backend_is_refused_naming_the_entries(
        shipyard, namespace):
    shipyard.task("named", probe_task(
        "http://example.invalid/", environment='network_mode = "no-network"\n',
        agent='network_mode = "allowlist"\n'
              'allowed_hosts = ["pypi.org", "*.github.com", "192.0.2.7"]\n'))
    shipyard.trial("named-probe", "named", agent_probe("http://pypi.org/"))
    trial = shipyard.wait("named-probe", timeout=30)
    failed = condition(trial, "Failed")
    assert failed["reason"] == "NetworkPolicyUnenforceable"
    assert "agent phase: pypi.org, *.github.com" in failed["message"]
    assert "192.0.2.7" not in failed["message"]
    assert "open" in failed["message"]
    # Refused before any pod started.
    assert not trial["status"].get("podName")
    assert not shipyard.core.list_namespaced_pod(
        namespace, label_selector="shipyard.dev/trial=named-probe").items


@pytest.mark.parametrize("example", ["no-network", "allowlist"])
def test_network_examples_oracle_and_nop(cluster, shipyard, namespace, example):
    root = ROOT / "examples" / example
    cluster.kubectl_run("-n", namespace, "apply", "-f", str(root / "task.yaml"),
                        "-f", str(root / "trial-oracle.yaml"), "-f", str(root / "trial-nop.yaml"))
    assert shipyard.wait(f"{example}-oracle", timeout=120)["status"]["reward"] == 1.0
    assert shipyard.wait(f"{example}-nop", timeout=120)["status"]["reward"] == 0.0


def test_separate_verifier_runs_under_its_own_baseline(shipyard, target):
    """[verifier.environment] has its own network policy: the separate verifier pod reaches the
    target while the agent environment (no-network) does not."""
    ip = target.split("//")[1].split(":")[0]
    test_sh = (
        "#!/bin/bash\n"
        f"cat > /tmp/probe.py <<'PY'\n{PROBE}PY\n"
        f'v=$(python3 /tmp/probe.py "{target}")\n'
        'a=$(cat /app/agent-observed.txt 2>/dev/null || echo none)\n'
        'r=0; [ "$v" = reached ] && r=1\n'
        'echo "{\\"reward\\": $r}" > /logs/verifier/reward.json\n'
        'echo "verifier=$v agent-file=$a"\n'
    )
    files = probe_task(target, environment='network_mode = "no-network"\n')
    files["task.toml"] += (
        f'[verifier.environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["{ip}"]\n'
    )
    files["tests/test.sh"] = test_sh
    shipyard.task("split", files)
    shipyard.trial("split-probe", "split", agent_probe(target))
    trial = shipyard.wait("split-probe", timeout=300)
    assert trial["status"]["phase"] == "Completed", trial["status"]
    assert trial["status"]["rewards"] == {"reward": 1.0}
    logs = shipyard.core.read_namespaced_config_map(trial["status"]["logsConfigMap"],
                                                    shipyard.namespace)
    # The verifier pod is a fresh pod: the agent's file is not there, its own probe got through.
    assert "verifier=reached agent-file=none" in logs.data["verifier.log"]


def test_allowlist_is_tcp_only_as_harbor_while_public_passes_udp(shipyard, target):
    """Harbor's egress control rejects all non-TCP under a restricted mode: an allowlisted IP
    answers over TCP (HTTP) but not over UDP, which a public trial reaches."""
    ip = target.split("//")[1].split(":")[0]
    udp = {"name": "command",
           "command": f'python3 /app/udp_probe.py {ip} > /app/agent-observed.txt'}
    for name, environment in (
            ("udp-public", ""),
            ("udp-allowlist", f'network_mode = "allowlist"\nallowed_hosts = ["{ip}"]\n')):
        files = probe_task(target, environment=environment, reward="$a")
        files["environment/udp_probe.py"] = UDP_PROBE
        shipyard.task(name, files)
        shipyard.trial(f"{name}-probe", name, udp)
    # agent_reached: UDP from the agent phase; verifier_reached: HTTP from the verifier.
    assert rewards(shipyard, "udp-public-probe") == {
        "reward": 1.0, "agent_reached": 1.0, "verifier_reached": 1.0}
    assert rewards(shipyard, "udp-allowlist-probe") == {
        "reward": 0.0, "agent_reached": 0.0, "verifier_reached": 1.0}


@pytest.mark.parametrize("length", [100, 253])
def test_long_trial_names_are_under_their_policies(shipyard, target, namespace, length):
    """A Trial name longer than a label value (63 characters; names may have 253): the pods
    carry a shortened trial label and every policy selects them by that same value, so
    `no-network` really blocks and `public` really lets out."""
    shipyard.task("offline", probe_task(target, environment='network_mode = "no-network"\n'))
    shipyard.task("public", probe_task(target))
    names = {}
    for mode in ("offline", "public"):
        head = f"{mode}-"
        # A DNS subdomain: dots keep each part short, as a 253-character name needs.
        body = ".".join(["x" * 60] * 5)
        names[mode] = (head + body)[:length - 1] + "z"
        assert len(names[mode]) == length
        shipyard.trial(names[mode], mode, agent_probe(target), keepPods=True)
    assert rewards(shipyard, names["offline"]) == {
        "reward": 0.0, "agent_reached": 0.0, "verifier_reached": 0.0}
    assert rewards(shipyard, names["public"]) == {
        "reward": 1.0, "agent_reached": 1.0, "verifier_reached": 1.0}
    net = client.NetworkingV1Api(shipyard.core.api_client)
    for mode, name in names.items():
        pod = next(p for p in shipyard.core.list_namespaced_pod(namespace).items
                   if p.metadata.owner_references
                   and p.metadata.owner_references[0].name == name)
        policies = [p for p in net.list_namespaced_network_policy(namespace).items
                    if p.metadata.owner_references
                    and p.metadata.owner_references[0].name == name]
        assert len(pod.metadata.labels["shipyard.dev/trial"]) <= 63
        if mode == "public":
            # public throughout: no policy of its own, the namespace's shared baseline selects
            # every pod with a trial label and lets those labelled public out
            assert policies == []
            assert pod.metadata.labels["shipyard.dev/network"] == "public"
            shared = {p.metadata.name: p
                      for p in net.list_namespaced_network_policy(namespace).items}
            deny = shared["shipyard-trial-pods-deny"].spec.pod_selector.match_expressions
            assert [(e.key, e.operator) for e in deny] == [("shipyard.dev/trial", "Exists")]
            allow = shared["shipyard-trial-pods-public"].spec.pod_selector.match_labels
            assert allow == {"shipyard.dev/network": "public"}
            continue
        assert len(policies) == 1  # the trial's deny-all (no-network allows nothing)
        for policy in policies:
            selector = policy.spec.pod_selector.match_labels
            # the trial label: the same shortened value on the pod and in every selector
            assert selector["shipyard.dev/trial"] == pod.metadata.labels["shipyard.dev/trial"]
