"""Two operators on the same namespace: the Lease holder drives, the standby waits; SIGKILL the
holder and the standby takes over within about the lease duration; every phase ran once. Two
operators on two different namespaces, with the default Lease name: both lead and both drive."""

from __future__ import annotations

import contextlib
import socket
import time
import urllib.request
import uuid
from collections.abc import Iterator

import pytest

from tests.conftest import TEST_NAMESPACE_LABEL, TEST_NAMESPACE_PREFIX
from tests.e2e.conftest import (
    LEASE_NAMESPACE,
    OperatorProcess,
    Shipyard,
    lease_env,
    task_files,
)

LEASE_SEC, RENEW_DEADLINE_SEC, RETRY_SEC = 6, 4, 1
TIMINGS = {"SHIPYARD_LEADER_LEASE_SEC": str(LEASE_SEC),
           "SHIPYARD_LEADER_RENEW_DEADLINE_SEC": str(RENEW_DEADLINE_SEC),
           "SHIPYARD_LEADER_RETRY_SEC": str(RETRY_SEC)}
TRIALS = 3
# The agent and the verifier each append a line to a file in the environment pod; the verifier
# reports both counts, and reward 1 only when each ran exactly once.
AGENT = "echo run >> /app/agent-runs; sleep 8"
TEST_SH = (
    "echo run >> /app/verifier-runs\n"
    "a=$(wc -l < /app/agent-runs); v=$(wc -l < /app/verifier-runs)\n"
    'r=0; [ "$a" -eq 1 ] && [ "$v" -eq 1 ] && r=1\n'
    'printf \'{"reward": %d, "agent_runs": %d, "verifier_runs": %d}\' "$r" "$a" "$v"'
    " > /logs/verifier/reward.json\n"
)


@pytest.fixture
def lone_namespace(core_v1) -> Iterator[str]:
    """A namespace no `<prefix>-*` operator serves (this test's two operators only)."""
    with new_lone_namespace(core_v1) as name:
        yield name


@contextlib.contextmanager
def new_lone_namespace(core_v1) -> Iterator[str]:
    from kubernetes import client

    name = f"lease-{TEST_NAMESPACE_PREFIX}-{uuid.uuid4().hex[:6]}"
    core_v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=name, labels={TEST_NAMESPACE_LABEL: "true"})))
    try:
        deadline = time.monotonic() + 60
        while not any(sa.metadata.name == "default"
                      for sa in core_v1.list_namespaced_service_account(name).items):
            assert time.monotonic() < deadline, "no default ServiceAccount"
            time.sleep(0.2)
        yield name
    finally:
        core_v1.delete_namespace(name, propagation_policy="Background")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def holder(coordination, name: str) -> str | None:
    from kubernetes.client.rest import ApiException

    try:
        return coordination.read_namespaced_lease(name, LEASE_NAMESPACE).spec.holder_identity
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def wait_for(what: str, predicate, timeout: float) -> float:
    began = time.monotonic()
    while not predicate():
        assert time.monotonic() - began < timeout, f"{what}: not after {timeout}s"
        time.sleep(0.2)
    return time.monotonic() - began


def test_the_standby_takes_over_a_killed_leader_and_every_phase_runs_once(
        cluster, crds, api_client, core_v1, custom_objects, lone_namespace, tmp_path) -> None:
    from kubernetes import client

    coordination = client.CoordinationV1Api(api_client)
    lease = f"shipyard-operator-{lone_namespace}"
    ids = {n: f"{lone_namespace}-{n}" for n in ("a", "b")}
    port = free_port()
    ops = {n: OperatorProcess(cluster.kubeconfig, tmp_path / f"operator-{n}.log",
                              {**lease_env(lease, ids[n]), **TIMINGS},
                              namespaces=(lone_namespace,),
                              liveness=f"http://127.0.0.1:{port}/healthz" if n == "b" else "")
           for n in ("a", "b")}
    shipyard = Shipyard(custom_objects, core_v1, lone_namespace)
    try:
        ops["a"].start()
        wait_for("a leads", lambda: holder(coordination, lease) == ids["a"], 30)
        ops["b"].start()
        wait_for("b waits", lambda: "standby:" in ops["b"].log(), 30)
        # The standby answers its liveness probe, so that its pod would not be restarted.
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
            assert answer.read() == b"standby\n"

        shipyard.task("leased", task_files(TEST_SH, agent_timeout=60))
        names = [f"leased-{i}" for i in range(TRIALS)]
        for name in names:
            shipyard.trial(name, "leased", {"name": "command", "command": AGENT})
        for name in names:  # every trial is inside its agent phase when the leader dies
            shipyard.wait(name, timeout=120,
                          until=lambda t: (t.get("status") or {}).get("currentPhase") == "agent")
        assert "kopf" not in ops["b"].log(), "the standby started serving while a led"

        ops["a"].kill()
        took = wait_for("b takes over", lambda: holder(coordination, lease) == ids["b"],
                        LEASE_SEC + 10)
        print(f"standby took over {took:.1f}s after the leader's SIGKILL (lease {LEASE_SEC}s)")
        assert took <= LEASE_SEC + 2 * RETRY_SEC + 3, took

        finished = [shipyard.wait(name, timeout=180) for name in names]
        for trial in finished:
            status = trial["status"]
            assert status["phase"] == "Completed", status
            assert status["rewards"] == {"reward": 1, "agent_runs": 1, "verifier_runs": 1}, status
            phases = [p["name"] for p in status["phases"]]
            assert phases.count("agent") == 1 and phases.count("verifier") == 1, phases
            started = sorted(e.reason for e in shipyard.events(trial["metadata"]["name"])
                             if e.reason in ("AgentStarted", "VerifierStarted"))
            assert started == ["AgentStarted", "VerifierStarted"], started
        # kopf serves the liveness endpoint now that b leads.
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
            assert answer.status == 200 and answer.read() != b"standby\n"

        # A leader that finds the Lease taken stops driving at once: exit status 3.
        coordination.patch_namespaced_lease(lease, LEASE_NAMESPACE,
                                            {"spec": {"holderIdentity": "intruder"}})
        proc = ops["b"].proc
        assert proc is not None
        assert proc.wait(3 * RETRY_SEC + 5) == 3, ops["b"].log()[-2000:]
        assert "lost the leadership" in ops["b"].log()
    finally:
        for op in ops.values():
            op.kill()
        with contextlib.suppress(client.ApiException):
            coordination.delete_namespaced_lease(lease, LEASE_NAMESPACE)


def test_operators_serving_different_namespaces_both_lead_with_the_default_lease_names(
        cluster, crds, api_client, core_v1, custom_objects, tmp_path) -> None:
    """`shipyard operator -n NS` with no SHIPYARD_LEADER_LEASE_NAME takes a Lease named from
    NS: two operators on two namespaces do not wait for each other, and both drive their
    trials to a reward."""
    from kubernetes import client

    from shipyard.api.conventions import operator_lease_name

    coordination = client.CoordinationV1Api(api_client)
    with contextlib.ExitStack() as stack:
        spaces = {n: stack.enter_context(new_lone_namespace(core_v1)) for n in ("a", "b")}
        leases = {n: operator_lease_name([ns]) for n, ns in spaces.items()}
        assert leases["a"] != leases["b"]
        ops = {}
        for n, ns in spaces.items():
            op = OperatorProcess(cluster.kubeconfig, tmp_path / f"operator-{n}.log",
                                 {**lease_env(identity=f"{ns}-op"), **TIMINGS}, namespaces=(ns,))
            # The default name: the Lease is named by the operator from what it serves.
            del op.extra_env["SHIPYARD_LEADER_LEASE_NAME"]
            ops[n] = op
        try:
            for op in ops.values():
                op.start()
            for n, ns in spaces.items():
                wait_for(f"{n} leads", lambda n=n, ns=ns: holder(coordination, leases[n])
                         == f"{ns}-op", 30)
            assert "standby:" not in ops["a"].log() + ops["b"].log()
            shipyards = {n: Shipyard(custom_objects, core_v1, ns) for n, ns in spaces.items()}
            for sy in shipyards.values():
                sy.task("served", task_files(
                    '[ -f /app/done ] && echo 1 > /logs/verifier/reward.txt'
                    ' || echo 0 > /logs/verifier/reward.txt\n'))
                sy.trial("served-1", "served", {"name": "command", "command": "touch /app/done"})
            for n, sy in shipyards.items():
                status = sy.wait("served-1", timeout=180)["status"]
                assert status["phase"] == "Completed" and status["rewards"] == {"reward": 1}, \
                    (n, status)
        finally:
            for op in ops.values():
                op.kill()
            for name in leases.values():
                with contextlib.suppress(client.ApiException):
                    coordination.delete_namespaced_lease(name, LEASE_NAMESPACE)
