"""CPU requests as an operator setting, and pods that wait for capacity or can never fit
(plan.capacity; issue 23)."""

from __future__ import annotations

import pytest

from shipyard.api.conventions import Role
from shipyard.api.models import TrialStatus
from shipyard.plan.accelerators import PodOverrides, SchedulingSettings
from shipyard.plan.capacity import (
    MI,
    NodeCapacity,
    cpu_request_millis,
    node_capacities,
    parse_cpu,
    parse_memory,
    pod_requests,
    waits_for_capacity,
)
from shipyard.plan.phases import PlanError, build_plan
from shipyard.reconcile import trial_machine as m
from shipyard.reconcile.pod_observation import observe_pod
from shipyard.render.pod import build_trial_pod
from tests.unit.helpers import HELLO_TOML, T0, at, task, trial_body, trial_spec, unschedulable_pod

TWO_CORES = (NodeCapacity("localhost", 2000, 8 * 1024 * MI),)


def test_quantities():
    assert parse_cpu("2") == 2000 and parse_cpu("500m") == 500 and parse_cpu("1.5") == 1500
    assert parse_cpu("lots") is None
    assert parse_memory("2Gi") == 2 * 1024 * MI and parse_memory("1G") == 10**9
    assert parse_memory("1048576") == MI and parse_memory("x") is None
    assert node_capacities((("n", "2", "8025596Ki"), ("bad", "?", "1Gi"))) == (
        NodeCapacity("n", 2000, 8025596 * 1024),)


def test_the_request_is_the_operators_share_of_the_declared_cpus():
    assert cpu_request_millis(2, PodOverrides()) == 2000
    assert cpu_request_millis(2, PodOverrides(cpu_request_ratio=0.25)) == 500
    assert cpu_request_millis(4, PodOverrides(cpu_request_max_millis=1000)) == 1000
    assert cpu_request_millis(0.001, PodOverrides(cpu_request_ratio=0.1)) == 1


def test_the_settings_are_read_and_bad_values_named():
    s = SchedulingSettings.from_env({"SHIPYARD_TRIAL_CPU_REQUEST_RATIO": "0.5",
                                     "SHIPYARD_TRIAL_CPU_REQUEST_MAX": "750m"})
    assert (s.pod_defaults.cpu_request_ratio, s.pod_defaults.cpu_request_max_millis) == (
        0.5, 750)
    for env in ({"SHIPYARD_TRIAL_CPU_REQUEST_RATIO": "2"},
                {"SHIPYARD_TRIAL_CPU_REQUEST_RATIO": "half"},
                {"SHIPYARD_TRIAL_CPU_REQUEST_MAX": "-1"}):
        with pytest.raises(ValueError, match=next(iter(env))):
            SchedulingSettings.from_env(env)


def test_limits_stay_as_declared_and_requests_follow_the_setting():
    loaded = task(HELLO_TOML + "cpus = 2\nmemory_mb = 1024\n")
    scheduling = SchedulingSettings.from_env({"SHIPYARD_TRIAL_CPU_REQUEST_RATIO": "0.25"})
    plan = build_plan(loaded, trial_spec(), {}, scheduling=scheduling)
    pod = build_trial_pod(trial_body(), plan, Role.ENV, None, "p")
    main = next(c for c in pod["spec"]["containers"] if c["name"] == "main")
    assert main["resources"]["limits"] == {"cpu": "2", "memory": "1024Mi"}
    assert main["resources"]["requests"] == {"cpu": "500m", "memory": "1024Mi"}
    default = build_trial_pod(trial_body(), build_plan(loaded, trial_spec(), {}), Role.ENV, None,
                              "p")
    main = next(c for c in default["spec"]["containers"] if c["name"] == "main")
    assert main["resources"]["requests"]["cpu"] == "2"


def test_scheduler_messages_that_mean_full_now():
    assert waits_for_capacity("0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 "
                              "nodes are available: 1 No preemption victims found.")
    assert waits_for_capacity("0/3 nodes are available: 1 Insufficient cpu, 2 Insufficient "
                              "memory.")
    assert not waits_for_capacity("0/2 nodes are available: 1 node(s) didn't match Pod's node "
                                  "affinity/selector, 1 Insufficient cpu.")
    assert not waits_for_capacity("no nodes available to schedule pods")
    # Kubernetes 1.34's wording (a DRA phrase, a comma before preemption).
    assert waits_for_capacity("0/1 nodes are available: 1 Insufficient cpu. no new claims to "
                              "deallocate, preemption: 0/1 nodes are available: 1 No "
                              "preemption victims found for incoming pod.")
    assert not waits_for_capacity("0/1 nodes are available: 1 node(s) had untolerated taint "
                                  "{x: y}. no new claims to deallocate, preemption: 0/1 nodes "
                                  "are available: 1 Preemption is not helpful.")


def test_a_pod_that_can_never_fit_is_refused_before_the_trial_starts():
    loaded = task(HELLO_TOML + "cpus = 4\n")
    with pytest.raises(PlanError) as e:
        build_plan(loaded, trial_spec(), {}, nodes=TWO_CORES)
    assert e.value.reason == "Unschedulable"
    assert "requests cpu 4" in e.value.message and "cpus = 4" in e.value.message
    assert "largest node (localhost)" in e.value.message
    assert "SHIPYARD_TRIAL_CPU_REQUEST_RATIO" in e.value.message
    # With a ratio it fits: not refused. Unknown nodes: nothing refused.
    scheduling = SchedulingSettings.from_env({"SHIPYARD_TRIAL_CPU_REQUEST_RATIO": "0.25"})
    build_plan(loaded, trial_spec(), {}, scheduling=scheduling, nodes=TWO_CORES)
    build_plan(loaded, trial_spec(), {})


SEPARATE_STEPS = """\
[environment]
docker_image = "python:3.12-slim"
cpus = 2

[verifier]
environment_mode = "separate"

[[steps]]
name = "one"

[[steps]]
name = "two"
"""


def _multi_step_task():
    files = {}
    for step in ("one", "two"):
        files[f"steps/{step}/instruction.md"] = "Do it.\n"
        files[f"steps/{step}/tests/test.sh"] = "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"
        files[f"steps/{step}/solution/solve.sh"] = "#!/bin/bash\ntrue\n"
    return task(SEPARATE_STEPS, extra=files,
                drop=("instruction.md", "tests/test.sh", "solution/solve.sh"))


def test_a_non_last_steps_verifier_must_fit_beside_the_environment():
    scheduling = SchedulingSettings.from_env({"SHIPYARD_TRIAL_CPU_REQUEST_RATIO": "0.75"})
    loaded = _multi_step_task()
    with pytest.raises(PlanError) as e:
        build_plan(loaded, trial_spec(), {}, scheduling=scheduling, nodes=TWO_CORES)
    assert "step one's separate verifier runs beside the environment" in e.value.message
    assert "cpu 3020m" in e.value.message
    roomy = (NodeCapacity("big", 4000, 8 * 1024 * MI),)
    build_plan(loaded, trial_spec(), {}, scheduling=scheduling, nodes=roomy)
    # The last step's verifier: beside the environment unless it is released first.
    single = task(HELLO_TOML.replace("[verifier]", '[verifier]\nenvironment_mode = "separate"')
                  + "cpus = 2\n")
    # Released by default (as Harbor stops the environment before the verifier's starts).
    assert build_plan(single, trial_spec(), {}, scheduling=scheduling,
                      nodes=TWO_CORES).release_environment
    kept = SchedulingSettings.from_env({"SHIPYARD_TRIAL_CPU_REQUEST_RATIO": "0.75",
                                        "SHIPYARD_RELEASE_ENVIRONMENT": "0"})
    with pytest.raises(PlanError) as e:
        build_plan(single, trial_spec(), {}, scheduling=kept, nodes=TWO_CORES)
    assert "SHIPYARD_RELEASE_ENVIRONMENT is off" in e.value.message


def _pending(plan):
    status = m.on_pod_created(m.start(TrialStatus(), plan, "sha256:x", 1, T0), "env",
                              "hello-oracle-env", T0)
    return status, m.Pods(env=observe_pod(unschedulable_pod(created=T0)),
                          verifier=observe_pod(None))


def test_a_pod_that_fits_the_largest_node_waits_for_capacity_and_says_so():
    loaded = task(HELLO_TOML + "cpus = 2\n")
    plan = build_plan(loaded, trial_spec(), {}, nodes=(NodeCapacity("big", 4000, 8 * 1024 * MI),))
    status, pods = _pending(plan)
    action, decided, outcome = m.next_action(status, plan, pods, at(3600))
    assert isinstance(action, m.Wait) and decided is not None
    running = next(c for c in decided.conditions if c.type == "Running")
    assert running.reason == "WaitingForCapacity" and "requests cpu 2" in running.message
    assert outcome.events[0][1] == "WaitingForCapacity"
    # Said once: the next look changes nothing.
    action, again, _ = m.next_action(decided, plan, pods, at(3630))
    assert isinstance(action, m.Wait) and again is None


def test_without_known_nodes_the_grace_decides_and_names_the_request():
    plan = build_plan(task(HELLO_TOML + "cpus = 2\n"), trial_spec(), {})
    status, pods = _pending(plan)
    action, decided, _ = m.next_action(status, plan, pods, at(31))
    assert isinstance(action, m.Finish)
    failed = next(c for c in decided.conditions if c.type == "Failed")
    assert failed.reason == "Unschedulable"
    assert "Insufficient cpu" in failed.message and "requests cpu 2" in failed.message
    assert "SHIPYARD_TRIAL_CPU_REQUEST_RATIO" in failed.message


def test_pod_requests_count_the_sidecars():
    requests = pod_requests(1, 512, PodOverrides())
    assert requests.cpu_millis == 1010 and requests.memory_bytes == 528 * MI


TAINTED = ("0/1 nodes are available: 1 node(s) had untolerated taint(s). no new claims to "
           "deallocate, preemption: 0/1 nodes are available: 1 Preemption is not helpful for "
           "scheduling.")


def test_a_taint_holds_the_pod_for_a_while_only_when_it_is_a_nodes_passing_condition():
    from shipyard.plan.capacity import passing_taints

    assert not waits_for_capacity(TAINTED)  # the scheduler no longer names the taint
    assert waits_for_capacity(TAINTED, temporary_taints=True)
    disk = ("node-a", (("node.kubernetes.io/disk-pressure", "", "NoSchedule"),))
    gpu = ("node-b", (("nvidia.com/gpu", "present", "NoSchedule"),))
    both = ("node-c", (("node.kubernetes.io/not-ready", "", "NoExecute"),
                       ("dedicated", "eval", "NoSchedule")))
    soft = ("node-d", (("example.com/soon", "", "PreferNoSchedule"),))
    assert passing_taints((disk,), []) == ("node.kubernetes.io/disk-pressure",)
    assert passing_taints((gpu, disk), []) == ("node.kubernetes.io/disk-pressure",)
    assert passing_taints((gpu,), []) == ()  # a node pool's own taint does not pass
    assert passing_taints((both,), []) == ()  # nor does it with a passing one
    assert passing_taints((both,), [{"key": "dedicated", "operator": "Equal",
                                     "value": "eval", "effect": "NoSchedule"}]) == (
        "node.kubernetes.io/not-ready",)
    assert passing_taints((soft,), []) == ()  # held by nothing of it
    assert passing_taints((disk,), [{"operator": "Exists"}]) == ()  # tolerated: not the cause
