"""The Unschedulable grace comes from the plan: longer when accelerators are requested."""

from __future__ import annotations

from shipyard.api.models import TrialStatus
from shipyard.plan.phases import TrialPlan
from shipyard.reconcile import trial_machine as m
from shipyard.reconcile.pod_observation import observe_pod
from tests.unit.helpers import HELLO_TOML, T0, at, plan_for, task, unschedulable_pod


def pending(plan: TrialPlan) -> tuple[TrialStatus, m.Pods]:
    status = m.on_pod_created(m.start(TrialStatus(), plan, "sha256:x", 1, T0), "env",
                              "hello-oracle-env", T0)
    stuck = observe_pod(unschedulable_pod(created=T0))
    return status, m.Pods(env=stuck, verifier=observe_pod(None))


def test_accelerator_pods_get_the_longer_grace() -> None:
    plan = plan_for(task(HELLO_TOML + "gpus = 1\n"))
    assert plan.unschedulable_grace_sec == 600
    status, pods = pending(plan)
    action, decided, _ = m.next_action(status, plan, pods, at(59))
    assert decided is None and isinstance(action, m.Wait)
    action, decided, _ = m.next_action(status, plan, pods, at(599))
    assert decided is None and action == m.Wait(at(600))
    action, decided, _ = m.next_action(status, plan, pods, at(600))
    assert isinstance(action, m.Finish)
    assert decided is not None
    failed = next(c for c in decided.conditions if c.type == "Failed")
    assert failed.reason == "Unschedulable"


def test_trial_override_of_the_grace() -> None:
    plan = plan_for(task(HELLO_TOML + "gpus = 1\n"), environment={"unschedulableGraceSec": 5})
    status, pods = pending(plan)
    assert m.next_action(status, plan, pods, at(4))[0] == m.Wait(at(5))
    assert isinstance(m.next_action(status, plan, pods, at(5))[0], m.Finish)


def test_a_pod_held_only_by_a_nodes_passing_taints_waits_past_the_grace_and_says_so() -> None:
    from dataclasses import replace

    from tests.unit.plan.test_capacity import TAINTED, TWO_CORES

    plan = replace(plan_for(), nodes=TWO_CORES)
    status, _ = pending(plan)
    stuck = unschedulable_pod(created=T0)
    stuck["status"]["conditions"][0]["message"] = TAINTED
    held = observe_pod(stuck)
    failed = m.next_action(status, plan, m.Pods(env=held, verifier=observe_pod(None)), at(3600))
    assert isinstance(failed[0], m.Finish)  # a taint that does not pass: Unschedulable
    waiting = replace(held, passing_taints=("node.kubernetes.io/disk-pressure",))
    action, decided, _ = m.next_action(status, plan, m.Pods(env=waiting,
                                                            verifier=observe_pod(None)), at(3600))
    assert isinstance(action, m.Wait) and decided is not None
    text = next(c.message for c in decided.conditions if c.reason == "WaitingForCapacity")
    assert "node.kubernetes.io/disk-pressure" in text and "waits for them to pass" in text
