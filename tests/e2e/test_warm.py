"""Warm pods end to end (docs/warm-pods.md): a WarmPool's pods claimed by Trials, each once,
with no Secret in a pod before its claim, and replaced when lost."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.e2e.conftest import GROUP, ROOT, TASK_IMAGE, VERSION, condition, task_files

CLAIMED_BY = "shipyard.dev/claimed-by"
POOL_LABEL = "shipyard.dev/warm-pool"
REWARD = "grep -q ok /app/out.txt && echo 1 > /logs/verifier/reward.txt || echo 0 > " \
         "/logs/verifier/reward.txt\n"


@pytest.fixture(autouse=True)
def own_crds(cluster) -> None:
    """CRDs are cluster-wide: another checkout's test run may have applied its own since the
    session began (without `status.warmPod`, which the apiserver would then drop)."""
    cluster.kubectl_run("apply", "-f", str(ROOT / "crds"))


def pool(shipyard, name: str, task: str, replicas: int, **spec: Any) -> None:
    shipyard.api.create_namespaced_custom_object(GROUP, VERSION, shipyard.namespace, "warmpools", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "WarmPool", "metadata": {"name": name},
        "spec": {"taskRef": {"name": task}, "replicas": replicas, **spec}})


def warm_pod_of(trial: dict[str, Any]) -> str | None:
    """The warm pod the trial claimed: its pod, named by its pool (`<pool>-w-…`). Read from
    status.podName: status.warmPod is dropped while another checkout's CRD is applied (shared
    cluster)."""
    pod = (trial.get("status") or {}).get("podName")
    return pod if pod and "-w-" in pod else None


def pods_of(shipyard, pool_name: str) -> list[Any]:
    return [p for p in shipyard.core.list_namespaced_pod(
        shipyard.namespace, label_selector=f"{POOL_LABEL}={pool_name}").items
        if p.metadata.deletion_timestamp is None]


def wait_ready(shipyard, name: str, ready: int, timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = shipyard.get("warmpools", name)
        if (body.get("status") or {}).get("ready", 0) >= ready:
            return body
        time.sleep(0.5)
    raise AssertionError(f"pool {name} not ready: {body.get('status')}")


def test_warm_pool_apply_trial_reward_each_pod_once_no_secret_before_claim(cluster, shipyard):
    value = "sk-warm-5e1f0c"
    shipyard.core.create_namespaced_secret(shipyard.namespace, {
        "metadata": {"name": "warm-key"}, "stringData": {"WARM_API_KEY": value}})
    shipyard.task("warm", task_files(REWARD, solve_sh="echo ok > /app/out.txt\n"))
    agent = {"name": "command", "command": 'test -n "$WARM_API_KEY" && echo ok > /app/out.txt',
             "envFrom": [{"secretRef": {"name": "warm-key"}}]}
    pool(shipyard, "warm-pool", "warm", 2)
    pool(shipyard, "secret-pool", "warm", 1, agent=agent)  # pods for trials with Secrets
    wait_ready(shipyard, "warm-pool", 2)
    wait_ready(shipyard, "secret-pool", 1)
    printed = cluster.kubectl_run("-n", shipyard.namespace, "get", "warmpools").stdout
    assert "warm-pool" in printed and "READY" in printed and "CLAIMED" in printed
    warm = pods_of(shipyard, "warm-pool") + pods_of(shipyard, "secret-pool")
    assert len(warm) == 3
    for p in warm:  # no Secret volume, no agent env: nothing of a trial before its claim
        spec = str(p.spec.to_dict())
        assert "secret_name" not in spec.replace("'secret_name': None", "")
        assert value not in spec and "warm-key" not in spec
        assert p.metadata.labels["shipyard.dev/trial"] == ""
        assert "shipyard.dev/network" not in p.metadata.labels
    assert [c.name for c in pods_of(shipyard, "secret-pool")[0].spec.containers] == [
        "main", "secrets"]
    names = {p.metadata.name for p in warm}
    shipyard.trial("warm-secret", "warm", agent)
    shipyard.trial("warm-oracle", "warm")
    shipyard.trial("warm-nop", "warm", {"name": "nop"})
    claimed = {}
    for name, reward in (("warm-secret", 1), ("warm-oracle", 1), ("warm-nop", 0)):
        trial = shipyard.wait(name)
        assert trial["status"]["reward"] == reward, trial["status"]
        claimed[name] = warm_pod_of(trial)
    assert value not in str(shipyard.get("trials", "warm-secret"))
    used = [p for p in claimed.values() if p]
    assert len(used) == len(set(used)) == 3, claimed  # three warm pods, each used once
    assert "secret-pool" in claimed["warm-secret"]
    assert set(used) <= names | {p.metadata.name for p in pods_of(shipyard, "warm-pool")}
    reasons = {e.reason for n in claimed for e in shipyard.events(n)}
    assert "WarmPodClaimed" in reasons
    # the pool refills; the claimed pods went with their trials
    body = wait_ready(shipyard, "warm-pool", 2)
    left = {p.metadata.name for p in pods_of(shipyard, "warm-pool")}
    assert not (left & set(used)), left
    assert condition(body, "Ready")["status"] == "True"


def test_a_warm_pod_deleted_under_a_claim_costs_no_retry(shipyard):
    """Pods that cannot be scheduled (a node selector no node has) stay claimed and not yet
    running: deleting the claimed one makes the trial let it go and claim another, in the
    same attempt."""
    shipyard.task("gone", task_files(REWARD, solve_sh="echo ok > /app/out.txt\n"))
    nowhere = {"nodeSelector": {"shipyard.dev/nowhere": "x"}}
    pool(shipyard, "gone-pool", "gone", 2, pod=nowhere)
    deadline = time.monotonic() + 60
    while len(pods_of(shipyard, "gone-pool")) < 2:
        assert time.monotonic() < deadline, shipyard.get("warmpools", "gone-pool").get("status")
        time.sleep(0.5)
    shipyard.trial("gone-oracle", "gone", pod=nowhere)

    first = warm_pod_of(shipyard.wait("gone-oracle", timeout=60, until=warm_pod_of))
    shipyard.core.delete_namespaced_pod(first, shipyard.namespace, grace_period_seconds=0)

    def reclaimed(t):
        return warm_pod_of(t) not in (None, first)

    status = shipyard.wait("gone-oracle", timeout=60, until=reclaimed)["status"]
    assert status["attempt"] == 1 and not status.get("attempts"), status
    assert "WarmPodLost" in {e.reason for e in shipyard.events("gone-oracle")}
    shipyard.api.delete_namespaced_custom_object(GROUP, VERSION, shipyard.namespace, "trials",
                                                 "gone-oracle")


def test_deleting_a_pool_leaves_no_pod(shipyard):
    shipyard.task("drop", task_files(REWARD))
    pool(shipyard, "drop-pool", "drop", 2)
    wait_ready(shipyard, "drop-pool", 2)
    shipyard.api.patch_namespaced_custom_object(GROUP, VERSION, shipyard.namespace, "warmpools",
                                                "drop-pool", {"spec": {"replicas": 1}})
    deadline = time.monotonic() + 30
    while len(pods_of(shipyard, "drop-pool")) != 1:
        assert time.monotonic() < deadline, "the pool did not shrink"
        time.sleep(0.5)
    shipyard.api.delete_namespaced_custom_object(GROUP, VERSION, shipyard.namespace, "warmpools",
                                                 "drop-pool")
    deadline = time.monotonic() + 60
    while pods_of(shipyard, "drop-pool"):
        assert time.monotonic() < deadline, "the pool's pods are still there"
        time.sleep(0.5)


def test_a_pool_whose_image_never_pulls_says_why_and_does_not_churn(shipyard):
    """An image the registry does not have: the pool said `0 of 2 pods ready` and nothing
    more, and made and deleted a pod a second for as long as it existed. Its Ready condition
    now names the pod and the pull error (`PodsFailing`), and it makes at most its 2 pods
    per 30 s backoff."""
    files = task_files(REWARD)
    assert TASK_IMAGE in files["task.toml"]
    files["task.toml"] = files["task.toml"].replace(
        TASK_IMAGE, "127.0.0.1:5055/shipyard-tests/never-pushed:1")
    shipyard.task("nopull", files)
    pool(shipyard, "nopull-pool", "nopull", 2)
    seen: set[str] = set()
    deadline = time.monotonic() + 45
    ready: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        seen |= {p.metadata.name for p in pods_of(shipyard, "nopull-pool")}
        body = shipyard.get("warmpools", "nopull-pool")
        ready = condition(body, "Ready")
        time.sleep(0.5)
    assert ready is not None and ready["reason"] == "PodsFailing", ready
    assert "failed: " in ready["message"] and "nopull-pool-w-" in ready["message"], ready
    assert "never-pushed" in ready["message"] and "not found" in ready["message"], ready
    assert len(seen) <= 4, f"{len(seen)} pods in 45 s: {sorted(seen)}"


def sweep_body(name: str, task: str, attempts: int, parallelism: int,
               agents: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Sweep", "metadata": {"name": name},
            "spec": {"tasks": {"names": [task]},
                     "agents": agents or [{"name": "oracle"}, {"name": "nop"}],
                     "attempts": attempts, "parallelism": parallelism}}


def sweep_done(shipyard, name: str, timeout: float = 300) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sweep = shipyard.get("sweeps", name)
        if condition(sweep, "Complete") and condition(sweep, "Complete")["status"] == "True":
            return shipyard.api.list_namespaced_custom_object(
                GROUP, VERSION, shipyard.namespace, "trials",
                label_selector=f"shipyard.dev/sweep={name}")["items"]
        time.sleep(1)
    raise AssertionError(f"sweep {name} not complete: {shipyard.get('sweeps', name)['status']}")


def live_pods(shipyard) -> list[str]:
    return [p.metadata.name for p in shipyard.core.list_namespaced_pod(shipyard.namespace).items
            if p.metadata.deletion_timestamp is None]


def no_pods_left(shipyard, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while live_pods(shipyard):
        assert time.monotonic() < deadline, f"pods left: {live_pods(shipyard)}"
        time.sleep(1)
    pools = shipyard.api.list_namespaced_custom_object(GROUP, VERSION, shipyard.namespace,
                                                       "warmpools")["items"]
    assert not pools, [p["metadata"]["name"] for p in pools]


def check_rewards_and_claims(trials: list[dict[str, Any]], expected: int) -> set[str]:
    """Every trial rewarded as without warm pods (oracle 1, nop 0); each warm pod used by one
    trial at most. Returns the warm pods used."""
    assert len(trials) == expected
    for t in trials:
        reward = 1 if t["spec"]["agent"]["name"] == "oracle" else 0
        assert t["status"].get("reward") == reward, (t["metadata"]["name"], t["status"])
    used = [warm_pod_of(t) for t in trials if warm_pod_of(t)]
    assert len(used) == len(set(used)), used
    return set(used)


def test_a_sweep_with_warm_pods_rewards_as_without_and_leaves_nothing(shipyard):
    shipyard.task("sw", task_files(REWARD, solve_sh="echo ok > /app/out.txt\n"))
    shipyard.wait_task("sw")
    shipyard.api.create_namespaced_custom_object(GROUP, VERSION, shipyard.namespace, "sweeps",
                                                 sweep_body("sw", "sw", 4, 2))
    used = check_rewards_and_claims(sweep_done(shipyard, "sw"), 8)
    assert used, "no trial of the sweep ran in a warm pod"
    no_pods_left(shipyard)


def test_operator_killed_during_claims_loses_and_duplicates_nothing(operator, shipyard):
    shipyard.task("chaos", task_files(REWARD, solve_sh="echo ok > /app/out.txt\n"))
    shipyard.wait_task("chaos")
    shipyard.api.create_namespaced_custom_object(GROUP, VERSION, shipyard.namespace, "sweeps",
                                                 sweep_body("chaos", "chaos", 6, 4))
    for _ in range(3):  # while trials claim pods and the pool refills
        deadline = time.monotonic() + 60
        while not any("-w-" in p for p in live_pods(shipyard)):
            assert time.monotonic() < deadline, "no warm pod"
            time.sleep(0.2)
        time.sleep(1.5)
        operator.kill()
        time.sleep(1)
        operator.start()
        sweep = shipyard.get("sweeps", "chaos")
        if condition(sweep, "Complete"):
            break
    trials = sweep_done(shipyard, "chaos")
    check_rewards_and_claims(trials, 12)
    assert all(t["status"]["attempt"] == 1 for t in trials)
    no_pods_left(shipyard)


def test_a_suspended_then_deleted_sweep_leaves_no_pod(shipyard):
    shipyard.task("susp", task_files(REWARD, solve_sh="echo ok > /app/out.txt\n"))
    shipyard.wait_task("susp")
    slow = [{"name": "command", "command": "sleep 4; echo ok > /app/out.txt"}]
    shipyard.api.create_namespaced_custom_object(GROUP, VERSION, shipyard.namespace, "sweeps",
                                                 sweep_body("susp", "susp", 10, 2, slow))
    deadline = time.monotonic() + 60
    while not any("-w-" in p for p in live_pods(shipyard)):
        assert time.monotonic() < deadline, "the sweep keeps no warm pod"
        time.sleep(0.5)
    shipyard.api.patch_namespaced_custom_object(GROUP, VERSION, shipyard.namespace, "sweeps",
                                                "susp", {"spec": {"suspend": True}})
    deadline = time.monotonic() + 60
    while any("-w-" in p for p in live_pods(shipyard)):  # the unclaimed go at once
        assert time.monotonic() < deadline, f"warm pods left: {live_pods(shipyard)}"
        time.sleep(0.5)
    shipyard.api.delete_namespaced_custom_object(GROUP, VERSION, shipyard.namespace, "sweeps",
                                                 "susp")
    no_pods_left(shipyard, timeout=120)
