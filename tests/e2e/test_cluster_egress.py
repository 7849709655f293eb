"""A `public` trial is kept out of the cluster (issue 22, class 4): its agent, root or not,
reaches an outside address but none of the apiserver's addresses (the Service IP, its endpoint,
the node's address, any other address of the host it answers on), no pod or Service of
another namespace, and no node port. The local cluster enforces NetworkPolicy with
kube-router; the operator's settings are the local cluster's (tests/e2e/conftest.py).

The "outside" address is a TEST-NET-2 address put on the host's loopback device for the test,
served by a small HTTP server: like the internet, it is in none of the cluster's ranges.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from shipyard.api.conventions import RUNNER_PATH
from tests.e2e.conftest import TASK_IMAGE, TEST_IMAGE, condition, task_files, wait_ready
from tests.e2e.test_build_network import host_addresses, reachable_from_host

pytestmark = pytest.mark.usefixtures("local_only")

OUTSIDE_IP = "198.51.100.77"
OUTSIDE_PORT = 18077

PROBE = r'''
import json, socket, sys, threading
out = {}
def probe(target):
    host, port = target.rsplit(":", 1)
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, int(port)))
        out[target] = "reached"
    except OSError:
        out[target] = "blocked"
    finally:
        s.close()
threads = [threading.Thread(target=probe, args=(t,)) for t in sys.argv[1:]]
[t.start() for t in threads]
[t.join() for t in threads]
print(json.dumps(out, sort_keys=True))
'''
# The verifier reports what the agent saw; reward 1 only for the expected picture.
TEST_SH = r"""#!/bin/bash
cat /tmp/observed.json; echo
python3 - <<'END'
import json
seen = json.load(open("/tmp/observed.json"))
allowed = [seen.pop(t) for t in "{allowed}".split()]
ok = set(allowed) == {{"reached"}} and all(v == "blocked" for v in seen.values())
open("/logs/verifier/reward.json", "w").write(json.dumps({{
    "reward": 1 if ok else 0, "cluster_reached": sum(v == "reached" for v in seen.values())}}))
END
"""


@pytest.fixture(scope="module")
def local_only(cluster) -> None:
    if not cluster.local:
        pytest.skip("the local cluster's addresses and kube-router")


@pytest.fixture(scope="module")
def outside() -> Iterator[str]:
    """An HTTP server on an address outside every cluster range."""
    subprocess.run(["ip", "addr", "add", f"{OUTSIDE_IP}/32", "dev", "lo"], capture_output=True)
    server = http.server.ThreadingHTTPServer((OUTSIDE_IP, OUTSIDE_PORT),
                                             http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"{OUTSIDE_IP}:{OUTSIDE_PORT}"
    finally:
        server.shutdown()
        subprocess.run(["ip", "addr", "del", f"{OUTSIDE_IP}/32", "dev", "lo"],
                       capture_output=True)


def http_pod(core_v1, namespace: str, name: str) -> str:
    """A pod serving HTTP on 8080 and a Service for it; the pod's IP."""
    core_v1.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"role": name}),
        spec=client.V1PodSpec(termination_grace_period_seconds=1, containers=[
            client.V1Container(name="http", image=TEST_IMAGE, image_pull_policy="Never",
                               command=["python3", "-m", "http.server", "8080"],
                               readiness_probe=client.V1Probe(
                                   tcp_socket=client.V1TCPSocketAction(port=8080),
                                   period_seconds=1))])))
    core_v1.create_namespaced_service(namespace, client.V1Service(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1ServiceSpec(selector={"role": name},
                                  ports=[client.V1ServicePort(port=80, target_port=8080)])))
    return wait_ready(core_v1, namespace, name, timeout=90)


@pytest.fixture
def other_namespace(core_v1, namespace) -> Iterator[str]:
    name = f"{namespace}-other"
    core_v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        core_v1.delete_namespace(name, propagation_policy="Background")


def cluster_targets(core_v1, other: str, other_ip: str) -> list[str]:
    # The node's address, the pod and build bridges' gateways; not the test's outside address,
    # which is the host's too for the test (so the apiserver answers there as well: an address
    # of a node that the cluster does not tell of belongs in SHIPYARD_CLUSTER_CIDRS).
    hosts = [h for h in host_addresses() if h != OUTSIDE_IP]
    endpoints = core_v1.read_namespaced_endpoints("kubernetes", "default")
    apiserver = [f"{a.ip}:{p.port}" for s in endpoints.subsets for a in s.addresses
                 for p in s.ports]
    service = core_v1.read_namespaced_service("kubernetes", "default").spec.cluster_ip
    other_svc = core_v1.read_namespaced_service("web", other).spec.cluster_ip
    return sorted({*apiserver, f"{service}:443", *(f"{h}:6443" for h in hosts),
                   *(f"{h}:20244" for h in hosts),  # kube-router's health port
                   f"{other_ip}:8080", f"{other_svc}:80", "169.254.169.254:80"})


def reachable_soon(target: str, timeout: float = 30) -> bool:
    """Reachable from the host within `timeout`: a Service made a moment ago answers once
    kube-proxy has programmed it (a second or more on a busy node; CI once checked too soon)."""
    deadline = time.monotonic() + timeout
    while not reachable_from_host(target):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def probe_task(allowed: list[str], user: str | None) -> dict[str, str]:
    agent_user = f'user = "{user}"\n' if user else ""
    return {
        "task.toml": (f'schema_version = "1.4"\n[agent]\ntimeout_sec = 60\n{agent_user}'
                      f'[verifier]\ntimeout_sec = 60\n'
                      f'[environment]\ndocker_image = "{TASK_IMAGE}"\nworkdir = "/app"\n'),
        "instruction.md": "Probe.\n",
        "environment/probe.py": PROBE,
        "tests/test.sh": TEST_SH.format(allowed=" ".join(allowed)),
        "solution/solve.sh": "#!/bin/bash\ntrue\n",
    }


def agent(targets: list[str]) -> dict[str, str]:
    return {"name": "command",
            "command": f"python3 /app/probe.py {' '.join(targets)} > /tmp/observed.json"}


@pytest.mark.parametrize("user", [None, "nobody"], ids=["root", "non-root"])
def test_a_public_agent_reaches_outside_but_nothing_of_the_cluster(
        shipyard, core_v1, namespace, other_namespace, outside, user):
    other_ip = http_pod(core_v1, other_namespace, "web")
    own_ip = http_pod(core_v1, namespace, "neighbour")
    targets = cluster_targets(core_v1, other_namespace, other_ip)
    # From the host, each of them answers (the apiserver on every address): the refusals
    # below are the policy's, not an absent listener's.

    silent = [t for t in targets if not t.startswith("169.254.") and not reachable_soon(t)]
    assert not silent, silent
    # Allowed: the outside address, and a pod and Service of the trial's own namespace (a
    # model server, a fixture; test_network.py's target).
    own_svc = core_v1.read_namespaced_service("neighbour", namespace).spec.cluster_ip
    allowed = [outside, f"{own_ip}:8080", f"{own_svc}:80"]
    name = f"pub-{user or 'root'}"
    shipyard.task(name, probe_task(allowed, user))
    shipyard.trial(name, name, agent(targets + allowed))
    trial = shipyard.wait(name, timeout=300)
    logs = shipyard.core.read_namespaced_config_map(trial["status"]["logsConfigMap"],
                                                    namespace).data
    assert trial["status"]["phase"] == "Completed", (trial["status"], logs)
    seen = json.loads(next(line for line in logs["verifier.log"].splitlines()
                           if line.startswith("{")))
    assert {t: seen.pop(t) for t in allowed} == dict.fromkeys(allowed, "reached"), seen
    assert seen == dict.fromkeys(targets, "blocked"), seen
    assert trial["status"]["rewards"]["reward"] == 1.0


def test_a_task_cannot_allowlist_the_apiserver_the_nodes_or_the_metadata_address(
        shipyard, core_v1):
    """A malicious task names what trial pods never reach in its allowlist: refused before any
    pod starts, naming the entry."""
    service = core_v1.read_namespaced_service("kubernetes", "default").spec.cluster_ip
    node = next(a.address for a in core_v1.read_node("localhost").status.addresses
                if a.type == "InternalIP")
    for i, entry in enumerate((service, node, "169.254.169.254")):
        files = probe_task([], None)
        files["task.toml"] = files["task.toml"].replace(
            "[environment]\n",
            f'[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["{entry}"]\n')
        shipyard.task(f"open-{i}", files)
        shipyard.trial(f"open-{i}", f"open-{i}")
    for i, entry in enumerate((service, node, "169.254.169.254")):
        trial = shipyard.wait(f"open-{i}", timeout=120)
        failed = next(c for c in trial["status"]["conditions"] if c["type"] == "Failed")
        assert failed["reason"] == "NetworkPolicyUnenforceable", failed
        assert entry in failed["message"] and "never reach" in failed["message"], failed
        assert not trial["status"].get("podName"), trial["status"]


def test_an_allowlist_of_everything_still_excepts_the_apiserver_and_the_nodes(
        shipyard, core_v1, outside):
    """`allowed_hosts = ["0.0.0.0/0"]`: the outside is reached, the apiserver on its Service
    IP, endpoint and node address is not."""
    endpoints = core_v1.read_namespaced_endpoints("kubernetes", "default")
    service = core_v1.read_namespaced_service("kubernetes", "default").spec.cluster_ip
    nodes = [a.address for a in core_v1.read_node("localhost").status.addresses
             if a.type == "InternalIP"]
    targets = sorted({f"{a.ip}:{p.port}" for s in endpoints.subsets for a in s.addresses
                      for p in s.ports} | {f"{service}:443"} | {f"{n}:6443" for n in nodes})
    files = probe_task([outside], "nobody")
    files["task.toml"] = files["task.toml"].replace(
        "[environment]\n", '[environment]\nnetwork_mode = "allowlist"\n'
                           'allowed_hosts = ["0.0.0.0/0"]\n')
    shipyard.task("everything", files)
    shipyard.trial("everything", "everything", agent([*targets, outside]))
    trial = shipyard.wait("everything", timeout=300)
    logs = shipyard.core.read_namespaced_config_map(trial["status"]["logsConfigMap"],
                                                    shipyard.namespace).data
    assert trial["status"]["phase"] == "Completed", (trial["status"], logs)
    seen = json.loads(next(line for line in logs["verifier.log"].splitlines()
                           if line.startswith("{")))
    assert seen.pop(outside) == "reached", seen
    assert seen == dict.fromkeys(targets, "blocked"), seen
    assert trial["status"]["rewards"]["reward"] == 1.0


def test_a_separate_verifier_pod_is_kept_out_of_the_cluster_too(
        shipyard, core_v1, namespace, other_namespace, outside):
    """The task's own code in a verifier pod of its own (`environment_mode = "separate"`),
    public: the same picture as for an agent."""
    other_ip = http_pod(core_v1, other_namespace, "web")
    targets = cluster_targets(core_v1, other_namespace, other_ip)
    files = probe_task([outside], None)
    files["task.toml"] = files["task.toml"].replace(
        "[verifier]\n", '[verifier]\nenvironment_mode = "separate"\n')
    files["tests/probe.py"] = PROBE
    files["tests/test.sh"] = (f"#!/bin/bash\npython3 /tests/probe.py {' '.join(targets)} "
                              f"{outside} > /tmp/observed.json\n"
                              + TEST_SH.format(allowed=outside).split("\n", 1)[1])
    shipyard.task("separate", files)
    shipyard.trial("separate", "separate", {"name": "nop"})
    trial = shipyard.wait("separate", timeout=300)
    logs = shipyard.core.read_namespaced_config_map(trial["status"]["logsConfigMap"],
                                                    namespace).data
    assert trial["status"]["phase"] == "Completed", (trial["status"], logs)
    seen = json.loads(next(line for line in logs["verifier.log"].splitlines()
                           if line.startswith("{")))
    assert seen.pop(outside) == "reached", seen
    assert seen == dict.fromkeys(targets, "blocked"), seen
    assert trial["status"]["rewards"]["reward"] == 1.0


def test_a_public_trial_stays_out_of_the_cluster_after_the_namespaces_shared_objects_went(
        cluster, shipyard, core_v1, namespace, other_namespace, outside):
    """A user deletes the namespace's shared policies and runner ConfigMaps while the operator
    runs (as deleting and making again a namespace does). Between two trials: the next public
    trial is kept out of the cluster as the first was, and runs (its pod is not left without
    its runner). While a trial runs: they are made again at once, before its agent probes."""
    other_ip = http_pod(core_v1, other_namespace, "web")
    targets = cluster_targets(core_v1, other_namespace, other_ip)
    shipyard.task("pub", probe_task([outside], None))
    networking = client.NetworkingV1Api(core_v1.api_client)

    def shared() -> tuple[set[str], set[str]]:
        policies = {p.metadata.name for p in networking.list_namespaced_network_policy(
            namespace).items if not p.metadata.owner_references}
        runner = {c.metadata.name for c in core_v1.list_namespaced_config_map(
            namespace, label_selector="app.kubernetes.io/component=runner").items}
        return policies, runner

    def delete_shared() -> None:
        policies, runner = shared()
        assert {"shipyard-trial-pods-deny", "shipyard-trial-pods-public"} <= policies
        assert runner
        for policy in policies:
            networking.delete_namespaced_network_policy(policy, namespace)
        for configmap in runner:
            core_v1.delete_namespaced_config_map(configmap, namespace)

    def kept_out(name: str) -> None:
        trial = shipyard.wait(name, timeout=300)
        logs = shipyard.core.read_namespaced_config_map(
            trial["status"]["logsConfigMap"], namespace).data
        assert trial["status"]["phase"] == "Completed", (trial["status"], logs)
        seen = json.loads(next(line for line in logs["verifier.log"].splitlines()
                               if line.startswith("{")))
        assert seen.pop(outside) == "reached", seen
        assert seen == dict.fromkeys(targets, "blocked"), (name, seen)

    shipyard.trial("first", "pub", agent([*targets, outside]))
    kept_out("first")
    delete_shared()  # made again at once while the first's driver still ends, else by the next
    time.sleep(1)
    shipyard.trial("second", "pub", agent([*targets, outside]))
    kept_out("second")
    # The agent waits for the deletion, then probes: what runs is never left open.
    probe = agent([*targets, outside])
    probe["command"] = ("i=0; while [ ! -e /tmp/go ] && [ $i -lt 300 ]; do sleep 0.2; "
                        "i=$((i+1)); done; " + probe["command"])
    shipyard.trial("third", "pub", probe)
    shipyard.wait("third", timeout=120,
                  until=lambda t: (t.get("status") or {}).get("phase") == "Running")
    time.sleep(1)
    made = shared()
    # Again and again, each deleted right after the other: the operator's remaking of the
    # first meets the second's deletion (a 404 there once left the namespace without them).
    for _ in range(8):
        delete_shared()
        deadline = time.monotonic() + 10
        while shared() != made and time.monotonic() < deadline:
            time.sleep(0.1)
        assert shared() == made
    pod = shipyard.wait("third", timeout=10, until=lambda t: True)["status"]["podName"]
    cluster.kubectl_run("exec", "-n", namespace, pod, "-c", "main", "--", "touch", "/tmp/go")
    kept_out("third")


def trial_pods_policy(core_v1, namespace: str, name: str,
                      egress: client.V1NetworkPolicyEgressRule) -> client.NetworkingV1Api:
    """Someone's NetworkPolicy giving every trial pod of the namespace `egress`."""
    networking = client.NetworkingV1Api(core_v1.api_client)
    networking.create_namespaced_network_policy(namespace, client.V1NetworkPolicy(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1NetworkPolicySpec(
            pod_selector=client.V1LabelSelector(match_expressions=[
                client.V1LabelSelectorRequirement(key="shipyard.dev/trial", operator="Exists")]),
            policy_types=["Egress"], egress=[egress])))
    return networking


def fenced_out(shipyard, task: str, name: str, agent_extra: str = "") -> tuple[dict, dict]:
    """An oracle trial of a one-line task that a fence fails: the trial and its condition."""
    files = task_files("echo 1 > /logs/verifier/reward.txt\n", solve_sh="true\n")
    files["task.toml"] = files["task.toml"].replace("[agent]\n", f"[agent]\n{agent_extra}", 1)
    shipyard.task(task, files)
    shipyard.trial(name, task)
    trial = shipyard.wait(name, timeout=120)
    failed = condition(trial, "Failed")
    assert failed is not None and failed["reason"] == "NetworkPolicyUnenforceable", trial["status"]
    return trial, failed


def test_no_task_code_runs_in_a_pod_its_namespace_lets_out_and_the_trial_says_why(
        shipyard, core_v1, namespace):
    """Policies add up: someone's NetworkPolicy letting every trial pod of the namespace out
    (or a CNI that ignores NetworkPolicy) would leave a trial open. The pod's first phase finds
    the apiserver answering, runs nothing of the task and fails the trial naming it; without
    that policy the same task scores 1."""
    networking = trial_pods_policy(core_v1, namespace, "everyone-out",
                                   client.V1NetworkPolicyEgressRule())
    trial, failed = fenced_out(shipyard, "fenced", "open")
    service = core_v1.read_namespaced_service("kubernetes", "default").spec.cluster_ip
    assert "network policy not in force" in failed["message"]
    assert "the pod still reached the apiserver at" in failed["message"]
    assert service in failed["message"] or ":6443" in failed["message"], failed["message"]
    phases = {p["name"]: p for p in trial["status"].get("phases", [])}
    assert "agent" not in phases or not phases["agent"].get("startedAt"), phases
    assert trial["status"].get("rewards") is None
    events = [e.message for e in shipyard.events("open") if e.reason == "Failed"
              or "NetworkPolicyUnenforceable" in (e.reason or "")]
    assert any("network policy not in force" in m for m in events), events

    networking.delete_namespaced_network_policy("everyone-out", namespace)
    time.sleep(2)
    shipyard.trial("closed", "fenced")
    trial = shipyard.wait("closed", timeout=120)
    assert trial["status"]["phase"] == "Completed", trial["status"]
    assert trial["status"]["rewards"]["reward"] == 1.0


def test_an_offline_agent_phase_that_its_namespace_leaves_dns_fails_before_the_agent_runs(
        shipyard, core_v1, namespace):
    """A namespace policy giving every trial pod DNS: the `no-network` agent phase of a public
    environment would have it. Its fence finds the cluster DNS answering: the trial fails
    naming it, and the agent never ran."""
    networking = trial_pods_policy(core_v1, namespace, "everyone-dns",
                                   client.V1NetworkPolicyEgressRule(ports=[
                                       client.V1NetworkPolicyPort(port=53, protocol="TCP"),
                                       client.V1NetworkPolicyPort(port=53, protocol="UDP")]))
    trial, failed = fenced_out(shipyard, "offline-dns", "leaky", 'network_mode = "no-network"\n')
    dns = core_v1.read_namespaced_service("kube-dns", "kube-system").spec.cluster_ip
    assert f"the pod still reached the cluster DNS at {dns}:53" in failed["message"], failed
    assert trial["status"].get("rewards") is None
    networking.delete_namespaced_network_policy("everyone-dns", namespace)


WINDOW_PROBE = r'''
import json, socket, sys, time
targets, seen, end = sys.argv[1:], {}, time.monotonic() + 3
while time.monotonic() < end:  # from the agent's first instant, again and again for 3 s
    for t in targets:
        host, port = t.rsplit(":", 1)
        s = socket.socket()
        s.settimeout(0.05)
        try:
            s.connect((host, int(port)))
            seen[t] = seen.get(t, 0) + 1
        except OSError:
            pass
        finally:
            s.close()
    time.sleep(0.01)
print(json.dumps(seen, sort_keys=True))
'''


@pytest.fixture
def busy_node(core_v1, other_namespace) -> None:
    """12 pods of another namespace under 120 policies: each sync of the node's rules takes
    longer (as a shared cluster's node has)."""
    networking = client.NetworkingV1Api(core_v1.api_client)
    for i in range(120):
        networking.create_namespaced_network_policy(other_namespace, client.V1NetworkPolicy(
            metadata=client.V1ObjectMeta(name=f"busy-{i}"),
            spec=client.V1NetworkPolicySpec(
                pod_selector=client.V1LabelSelector(match_labels={"app": "busy"}),
                policy_types=["Ingress", "Egress"],
                egress=[client.V1NetworkPolicyEgressRule(to=[client.V1NetworkPolicyPeer(
                    ip_block=client.V1IPBlock(cidr=f"10.{i}.0.0/16"))])])))
    for i in range(12):
        core_v1.create_namespaced_pod(other_namespace, client.V1Pod(
            metadata=client.V1ObjectMeta(name=f"busy-{i}", labels={"app": "busy"}),
            spec=client.V1PodSpec(termination_grace_period_seconds=0, containers=[
                client.V1Container(name="idle", image=TEST_IMAGE, image_pull_policy="Never",
                                   command=["sleep", "infinity"])])))


def window_trials(shipyard, core_v1, namespace: str, name: str, targets: list[str],
                  agent_extra: str = "") -> None:
    """Eight trials at once, each agent trying `targets` from its first instant for 3 s: each
    scores 1 only if none answered."""
    files = task_files(
        "cat /tmp/seen.json; echo\n"
        "python3 -c 'import json; seen = json.load(open(\"/tmp/seen.json\")); "
        "open(\"/logs/verifier/reward.txt\", \"w\").write(\"0\" if seen else \"1\")'\n")
    files["task.toml"] = files["task.toml"].replace("[agent]\n", f"[agent]\n{agent_extra}", 1)
    files["environment/window.py"] = WINDOW_PROBE
    shipyard.task(name, files)
    command = f"python3 /app/window.py {' '.join(targets)} > /tmp/seen.json"
    names = [f"{name}-{i}" for i in range(8)]
    for trial in names:
        shipyard.trial(trial, name, {"name": "command", "command": command})
    each_scores_one(shipyard, core_v1, namespace, names, 300)


def each_scores_one(shipyard, core_v1, namespace: str, names: list[str], timeout: float
                    ) -> None:
    """Each trial completes with reward 1 (its verifier's log in the message otherwise)."""
    for trial in names:
        done = shipyard.wait(trial, timeout=timeout)
        logs = core_v1.read_namespaced_config_map(done["status"]["logsConfigMap"],
                                                  namespace).data
        assert done["status"]["phase"] == "Completed", (done["status"], logs)
        assert done["status"]["rewards"]["reward"] == 1.0, (trial, logs.get("verifier.log"))


def test_no_agent_reaches_the_cluster_in_the_moment_its_pod_starts(
        shipyard, core_v1, namespace, busy_node):
    """A CNI programs a new pod's policies a moment after its containers start (kube-router:
    about a second, more with many policies on the node). Eight trials start at once on a busy
    node, each agent trying the apiserver from its first instant: none reaches it."""
    endpoints = core_v1.read_namespaced_endpoints("kubernetes", "default")
    service = core_v1.read_namespaced_service("kubernetes", "default").spec.cluster_ip
    window_trials(shipyard, core_v1, namespace, "window", sorted({
        f"{service}:443", *(f"{a.ip}:{p.port}" for s in endpoints.subsets
                            for a in s.addresses for p in s.ports)}))


def test_an_offline_agent_phase_is_offline_from_its_first_instant(
        shipyard, core_v1, namespace, busy_node, outside):
    """A public environment with a `no-network` agent phase: the pod's label switches before
    the agent starts. Eight agents at once on a busy node, trying the outside address and the
    cluster DNS from their first instant: none reaches either."""
    dns = core_v1.read_namespaced_service("kube-dns", "kube-system").spec.cluster_ip
    window_trials(shipyard, core_v1, namespace, "offline", [outside, f"{dns}:53"],
                  agent_extra='network_mode = "no-network"\n')


def test_no_images_entrypoint_reaches_the_cluster_in_the_moment_its_pod_starts(
        shipyard, core_v1, namespace, busy_node):
    """A task image's ENTRYPOINT runs when its container starts, before any phase and its
    fence: task-author code. Six pods start at once on a busy node, each image's ENTRYPOINT
    trying the apiserver from its first instant, in the background, before it execs the
    pod's command: none reaches it (without a fence the first trial's ENTRYPOINT reached the
    apiserver 24 times in 3 s). The operator read the built image's ENTRYPOINT from the
    registry: the main container's command is the runner's fence, then that ENTRYPOINT, and
    the pod has no fence init container (which would make its start slower)."""
    endpoints = core_v1.read_namespaced_endpoints("kubernetes", "default")
    service = core_v1.read_namespaced_service("kubernetes", "default").spec.cluster_ip
    targets = " ".join(sorted({f"{service}:443", *(f"{a.ip}:{p.port}" for s in endpoints.subsets
                                                   for a in s.addresses for p in s.ports)}))
    files = task_files(
        "for i in $(seq 100); do [ -e /tmp/seen.json ] && break; sleep 0.2; done\n"
        "cat /tmp/seen.json\n"
        "python3 -c 'import json; seen = json.load(open(\"/tmp/seen.json\")); "
        "open(\"/logs/verifier/reward.txt\", \"w\").write(\"0\" if seen else \"1\")'\n",
        toml_extra="build_timeout_sec = 600\n")
    files["task.toml"] = "\n".join(line for line in files["task.toml"].splitlines()
                                   if not line.startswith("docker_image")) + "\n"
    files["environment/window.py"] = WINDOW_PROBE
    entrypoint = ["/bin/sh", "-c", f"python3 /window.py {targets} > /tmp/seen.part "
                  '&& mv /tmp/seen.part /tmp/seen.json & exec "$@"', "--"]
    files["environment/Dockerfile"] = ("FROM python:3.12-slim\nCOPY window.py /window.py\n"
                                       f"WORKDIR /app\nENTRYPOINT {json.dumps(entrypoint)}\n")
    shipyard.task("entrypoint", files)
    names = [f"entrypoint-{i}" for i in range(6)]
    for trial in names:
        shipyard.trial(trial, "entrypoint", {"name": "nop"}, keepPods=trial == names[0])
    each_scores_one(shipyard, core_v1, namespace, names, 600)
    kept = core_v1.read_namespaced_pod(shipyard.get("trials", names[0])["status"]["podName"],
                                       namespace)
    main = next(c for c in kept.spec.containers if c.name == "main")
    assert main.command[:2] == [RUNNER_PATH, "fence"], main.command
    assert main.command[-len(entrypoint) - 1:] == ["--", *entrypoint]
    assert main.args == ["sleep", "infinity"]
    assert [c.name for c in kept.spec.init_containers or []] == ["runner"] or all(
        c.name != "fence" for c in kept.spec.init_containers or [])


def test_an_image_whose_entrypoint_cannot_be_read_starts_behind_the_fence_init_container(
        shipyard, core_v1, namespace):
    """A prebuilt image the operator cannot read from a registry (the local Debian image: only
    the node has it):
    its ENTRYPOINT is not known, so no container of it starts before the pod's `fence` init
    container has seen the policy in force; the trial scores as before."""
    files = task_files("echo 1 > /logs/verifier/reward.txt\n")
    shipyard.task("unread", files)
    shipyard.trial("unread-nop", "unread", {"name": "nop"}, keepPods=True,
                   environment={"image": TEST_IMAGE, "imagePullPolicy": "Never"})
    each_scores_one(shipyard, core_v1, namespace, ["unread-nop"], 300)
    kept = core_v1.read_namespaced_pod(shipyard.get("trials", "unread-nop")["status"]["podName"],
                                       namespace)
    init = [c.name for c in kept.spec.init_containers]
    assert "fence" in init, init
    assert kept.status.init_container_statuses[init.index("fence")].state.terminated.exit_code == 0
    main = next(c for c in kept.spec.containers if c.name == "main")
    assert main.command is None and main.args == ["sleep", "infinity"]
