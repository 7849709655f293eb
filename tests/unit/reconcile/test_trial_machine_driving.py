"""Decisions the driver used to take itself: switching a pod's network policy before a phase
(and back after it), the pod that stops answering execs, and the wait for a missing Task."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from shipyard.api.conventions import Role
from shipyard.api.models import TrialStatus
from shipyard.api.reasons import Reason
from shipyard.reconcile import trial_machine as m
from shipyard.reconcile.pod_observation import PodObservation, observe_pod
from shipyard.taskformat import load_task_dir
from tests.unit.helpers import REPO, T0, at, done, plan_for, pod, running

POD = "hello-oracle-env"
ABSENT = PodObservation.absent()


def ready(network: str | None, settled_at=None) -> PodObservation:
    return replace(observe_pod(pod(ready=True)), network=network,
                   network_settled_at=settled_at)


def agent_allowlist_plan():
    """examples/allowlist: an allowlist for the agent phase on a no-network baseline."""
    return plan_for(load_task_dir(REPO / "examples" / "allowlist" / "task"))


def at_agent(plan) -> TrialStatus:
    """The environment phase done: the agent phase is next, not launched yet."""
    status = m.on_pod_created(m.start(TrialStatus(), plan, "sha256:d", 1, T0), Role.ENV, POD, T0)
    status, _ = m.on_launch(status, "environment", running(), at(1))
    status, _ = m.on_result(status, plan, "environment", done(), at(2))
    return status


def test_before_a_phase_its_policy_is_put_on_the_pod_and_given_time_to_hold() -> None:
    plan = agent_allowlist_plan()
    assert plan.network is not None and plan.network.restricted
    agent = plan.phase("agent")
    baseline = plan.network.baseline(Role.ENV, None)
    assert agent.network != baseline
    status = at_agent(plan)
    action, _, _ = m.next_action(status, plan, m.Pods(ready(baseline), ABSENT), at(3))
    assert action == m.SetNetwork(Role.ENV, agent.network, "agent phase")
    settled = at(5)
    action, _, _ = m.next_action(status, plan, m.Pods(ready(agent.network, settled), ABSENT),
                                 at(4))
    assert action == m.Wait(settled)
    action, _, _ = m.next_action(status, plan, m.Pods(ready(agent.network, settled), ABSENT),
                                 at(5))
    assert action == m.Launch("agent")


def test_a_fenced_phase_is_launched_as_soon_as_its_policy_is_on_the_pod() -> None:
    from shipyard.plan.network import Fence

    plan = agent_allowlist_plan()
    dns = Fence(("10.96.0.10:53",), 30.0, "the cluster DNS")
    plan = replace(plan, phases=tuple(replace(p, fence=dns) if p.id == "agent" else p
                                      for p in plan.phases))
    agent = plan.phase("agent")
    status = at_agent(plan)
    action, _, _ = m.next_action(status, plan, m.Pods(ready(agent.network, at(5)), ABSENT),
                                 at(4))
    assert action == m.Launch("agent")  # the runner's fence waits for the policy, not a clock


def test_after_a_phase_its_pod_goes_back_under_its_baseline() -> None:
    plan = agent_allowlist_plan()
    status = at_agent(plan)
    status, _ = m.on_launch(status, "agent", running(), at(3))
    _, outcome = m.on_result(status, plan, "agent", done(), at(4))
    assert outcome.network == [(Role.ENV, plan.network.baseline(Role.ENV, None))]


def test_public_plans_never_switch() -> None:
    plan = plan_for()
    status = at_agent(plan)
    action, _, _ = m.next_action(status, plan, m.Pods(ready("public"), ABSENT), at(3))
    assert action == m.Launch("agent")
    _, outcome = m.on_result(status, plan, "agent", done(), at(4))
    assert outcome.network == []


def test_a_pod_that_stops_answering_execs_is_lost_unless_it_is_already_gone() -> None:
    plan = plan_for()
    status = at_agent(plan)
    assert m.unanswered_execs(status, plan, 0, Role.ENV, ABSENT, at(9)) is None
    lost = observe_pod(pod(ready=True, deleting=True))
    assert m.unanswered_execs(status, plan, 0, Role.ENV, lost, at(9)) is None
    failed, outcome = m.unanswered_execs(status, plan, 0, Role.ENV, ready("public"), at(9))
    assert m.terminal_condition(failed).reason == Reason.POD_LOST
    assert f"the pod {POD} stopped answering execs" in m.terminal_condition(failed).message
    retried, outcome = m.unanswered_execs(status, plan, 1, Role.ENV, ready("public"), at(9))
    assert m.terminal_condition(retried) is None and retried.attempt == 2
    assert POD in outcome.delete_pods


def test_a_missing_task_is_waited_for_polled_then_not_found() -> None:
    status = TrialStatus()
    decided = m.task_missing(status, "Task ns/t not found", T0, at(1), 60, cancelling=False)
    assert isinstance(decided, m.WaitForTask)
    assert decided.poll_sec == m.TASK_POLL_SEC
    assert decided.outcome.events[0][1] == Reason.WAITING_FOR_TASK
    near_end = m.task_missing(status, "x", T0, at(59.5), 60, cancelling=False)
    assert isinstance(near_end, m.WaitForTask) and near_end.poll_sec == 0.5
    assert m.task_missing(status, "Task ns/t not found", T0, at(60), 60, False) == (
        Reason.TASK_NOT_FOUND, "Task ns/t not found (waited 60s for it to be created)")
    reason, message = m.task_missing(status, "x", T0, at(1), 60, cancelling=True)
    assert reason == Reason.CANCELLED and "while waiting: x" in message
    # Without a creation time the wait counts from now.
    assert isinstance(m.task_missing(status, "x", None, at(100), 60, False), m.WaitForTask)
    assert timedelta(seconds=decided.poll_sec) <= timedelta(seconds=2)
